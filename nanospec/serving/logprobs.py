"""OpenAI's `logprobs` and `echo` for a completion's choice, as the target scores it.

They give the target's log-probability of each token, the likeliest alternatives at each
position, and where each token begins in the text.

    {"tokens": [" Paris", ","], "token_logprobs": [-0.92, -2.1],
     "top_logprobs": [{" Paris": -0.92, " Lyon": -2.3}, {".": -0.4, ",": -2.1}],
     "text_offset": [24, 30]}

Whatever made a token — the target itself, or a draft the target accepted — its logprob is the
target's: the choice is scored once it has ended, by one plain forward pass over prompt and
completion (score.py), on the scheduler's scoring thread, so that neither the event loop nor the
engine thread waits for it, and one pass runs at a time however many ask (a prompt scored
without generating, echo with max_tokens 0, is a queued job whose pass runs there too). (JAX may be called from two threads at once; the pass only reads the target's
weights, and no engine program donates them.) The law is the model's own, before temperature
and top-k/top-p (vLLM's default, "raw" logprobs).

Which tokens are listed: with echo, every token the model read as the prompt — a text prompt's
leading <|endoftext|> (the server puts it there: it spans no text) included, so the prompt's
entries are usage.prompt_tokens, the first with a null logprob and null top_logprobs, as it has
no context. Then the completion's tokens that make its text: not <|endoftext|> or a stop token,
and none wholly past a stop string's cut (one that straddles the cut is listed whole).

    token strings  the token's bytes as text; a piece of a character, which is no text by
                   itself, is OpenAI's "bytes:\\xe2\\x80" (vLLM's convention too)
    top_logprobs   the `logprobs` likeliest tokens and the chosen one (so up to logprobs + 1,
                   as OpenAI says), likeliest first; logprobs 0 gives the chosen one alone
    text_offset    where the token begins, in characters from the start of the prompt's text
                   (OpenAI's rule, echo or not: the completion's first token is at the
                   prompt's length); a token that finishes a character begins where it does

What this file deliberately leaves out: logprobs in a stream (refused, api.py: each chunk would
cost a pass over everything before it), and "processed" logprobs (after temperature or cuts).
"""

import codecs

import numpy as np

from nanospec.score import Scored, score


def target_scorer(engine):
    """score(ids, top) with the engine's target, read at each call (a mesh may re-place it)."""
    return lambda ids, top: score(engine.loop.graphdef, engine.params, engine.loop.cfg, ids, top)


def token_string(tok, token_id: int) -> str:
    """One token as OpenAI shows it: its text, or its bytes if they are not whole UTF-8.

    >>> class Tok: vocab = {5: b" Paris", 6: b"\\xc3"}
    >>> token_string(Tok, 5), token_string(Tok, 6)
    (' Paris', 'bytes:\\\\xc3')
    """
    data = tok.vocab.get(int(token_id))
    if data is None:  # an id the model has and the tokenizer lacks (a padded vocabulary)
        return f"<|token {int(token_id)}|>"
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in data)


def decoded(tok, ids: list[int], start: int = 0) -> tuple[list[int], str]:
    """(where each token begins, counting from `start`; the text) of `ids`, decoded as the
    server's TextStream does: UTF-8, a cut-off character as U+FFFD, <|endoftext|> as nothing.

    >>> class Tok: eos_id = 0; vocab = {0: b"<eos>", 1: b"ab", 2: b"\\xc3", 3: b"\\xa9!"}
    >>> decoded(Tok, [0, 1, 2, 3])
    ([0, 0, 2, 2], 'ab\u00e9!')
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    at, offsets, pieces = start, [], []
    for i in ids:
        offsets.append(at)
        if i != tok.eos_id:
            pieces.append(decoder.decode(tok.vocab[int(i)]))
            at += len(pieces[-1])
    pieces.append(decoder.decode(b"", final=True))
    return offsets, "".join(pieces)


def echo_text(tok, prompt: list[int]) -> str:
    """What echo puts before a completion: its prompt's text (the start token shows nothing)."""
    return decoded(tok, prompt)[1]


def logprobs_object(
    tok, ids: list[int], scored: Scored, rows: list[tuple[int, int]], top: int
) -> dict:
    """OpenAI's logprobs object for the positions `rows` ((index into ids, text offset))."""
    tokens, logprobs, tops, offsets = [], [], [], []
    for i, offset in rows:
        chosen = token_string(tok, ids[i])
        value = None if np.isnan(scored.logprobs[i]) else float(scored.logprobs[i])
        tokens.append(chosen), logprobs.append(value), offsets.append(offset)
        if value is None:  # the first token: no context, no law
            tops.append(None)
            continue
        alternatives = {}
        for t, lp in zip(scored.top_ids[i][:top], scored.top_logprobs[i][:top]):
            alternatives.setdefault(token_string(tok, t), float(lp))  # two ids, one string
        alternatives.setdefault(chosen, value)
        tops.append(dict(sorted(alternatives.items(), key=lambda kv: -kv[1])))
    return {
        "tokens": tokens,
        "token_logprobs": logprobs,
        "top_logprobs": tops,
        "text_offset": offsets,
    }


async def echo_and_logprobs(
    scorer, tok, prompt: list[int], generated: list[int], text: str, echo: bool, top: int | None
) -> tuple[str, dict | None]:
    """A choice's text (with echo, its prompt's text first) and its logprobs object (None if
    not asked for), from the prompt's ids, every token generated and the completion's text;
    `await scorer(ids, top)` scores the ids (off the event loop)."""
    starts, head = decoded(tok, prompt)
    shown = head + text if echo else text
    if top is None:
        return shown, None
    scored = await scorer(prompt + generated, top)
    rows = list(zip(range(len(prompt)), starts)) if echo else []
    offsets, _ = decoded(tok, generated, len(head))
    rows += [
        (len(prompt) + j, at)
        for j, (t, at) in enumerate(zip(generated, offsets))
        if t != tok.eos_id and at < len(head) + len(text)
    ]
    return shown, logprobs_object(tok, prompt + generated, scored, rows, top)
