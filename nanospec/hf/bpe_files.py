"""Reading GPT-2's tokenizer files: tokenizer.json, or vocab.json + merges.txt (for bpe.py).

Also the tokens tokenizer_config.json names; bpe.py builds the tokenizer from what these return.

Every check here refuses, in one sentence, a file that `tokenizers` would read into other ids
than nanospec's BPE computes: a model that is not BPE, a pre-tokenizer other than GPT-2's
ByteLevel, a normalizer, BPE dropout, added tokens that strip spaces.

What this file deliberately leaves out: added_tokens.json (the oldest layout's extra tokens).
"""

import json
from pathlib import Path

from nanospec.errors import UserError

# The options of a `tokenizers` BPE model that change its ids and that nanospec leaves out.
UNSUPPORTED = ("dropout", "continuing_subword_prefix", "end_of_word_suffix", "ignore_merges")


def read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):  # a JSONDecodeError is a ValueError
        raise UserError(f"{path} is not valid JSON.") from None
    except OSError as e:
        raise UserError(f"Cannot read {path} ({e.strerror}).") from None


def read_vocab(vocab, path: Path) -> dict[str, int]:
    if not isinstance(vocab, dict):
        raise UserError(f"{path} has no vocabulary (an object of token -> id).")
    for text, i in vocab.items():
        if type(i) is not int or i < 0:  # JSON's true is a Python int too, hence `type`
            raise UserError(f"{path}: the token {text!r} has the id {i!r}, not a whole number.")
    return vocab


def read_merge(merge, rank: int, path: Path) -> tuple[str, str]:
    """One merge: "a b" (merges.txt, and tokenizer.json before `tokenizers` 0.20) or ["a", "b"]."""
    pair = merge.split(" ") if isinstance(merge, str) else merge
    if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(t, str) for t in pair)):
        raise UserError(f"{path}: merge {rank + 1} is {merge!r}, not a pair of tokens.")
    return pair[0], pair[1]


def read_added(doc, path: Path) -> dict[str, tuple[int, bool]]:
    """tokenizer.json's added tokens: text -> (id, whether special)."""
    entries = doc.get("added_tokens") or []
    if not isinstance(entries, list):
        raise UserError(f"{path}: added_tokens is not a list.")
    added = {}
    for entry in entries:
        entry = entry if isinstance(entry, dict) else {}
        i, text = entry.get("id"), entry.get("content")
        if type(i) is not int or i < 0 or not isinstance(text, str) or not text:
            raise UserError(f"{path}: an added token has no whole-number id or no text.")
        flags = [k for k in ("lstrip", "rstrip", "single_word") if entry.get(k)]
        if flags:
            raise UserError(
                f"{path}: the added token {text!r} sets {flags[0]}, which nanospec leaves out."
            )
        added[text] = (i, bool(entry.get("special")))
    return added


def template_start(post, path: Path) -> int | None:
    """The id a TemplateProcessing post-processor puts before the text, if any.

    It may stand alone or inside a Sequence of post-processors (as in Llama 3's files)."""
    steps = (post.get("processors") or []) if isinstance(post, dict) else []
    template = next(
        (
            p
            for p in [post, *steps]
            if isinstance(p, dict) and p.get("type") == "TemplateProcessing"
        ),
        None,
    )
    if template is None:
        return None
    # `single` is a list like [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}].
    pieces = template.get("single") if isinstance(template.get("single"), list) else []
    single = [next(iter(p.items())) if isinstance(p, dict) and p else (None, None) for p in pieces]
    kinds = [kind for kind, _ in single]
    if "Sequence" not in kinds or "SpecialToken" in kinds[1:]:
        raise UserError(
            f"{path}: its template adds tokens other than one start token, which nanospec leaves "
            "out (a prompt must end where its text ends)."
        )
    if kinds[0] != "SpecialToken":
        return None
    name = single[0][1].get("id") if isinstance(single[0][1], dict) else None
    ids = ((template.get("special_tokens") or {}).get(name) or {}).get("ids")
    if not (isinstance(ids, list) and len(ids) == 1 and type(ids[0]) is int):
        raise UserError(f"{path}: its template's start token {name!r} has no single id.")
    return ids[0]


def read_tokenizer_json(path: Path):
    """(vocab, merges, added tokens, the template's start id) of a `tokenizers` file."""
    doc = read_json(path)
    model = doc.get("model") if isinstance(doc, dict) else None
    if not isinstance(model, dict):
        raise UserError(f"{path} has no tokenizer model; it is not a `tokenizers` file.")
    # `tokenizers` also reads a model without a "type"; of its models only BPE has merges.
    kind = model.get("type", "BPE" if "merges" in model else None)
    if kind != "BPE":
        raise UserError(f"{path}: the model is {kind}, not BPE; nanospec reads GPT-2's BPE.")
    for key in UNSUPPORTED:
        if model.get(key):
            raise UserError(f"{path}: its BPE sets {key}, which nanospec leaves out.")
    pre = doc.get("pre_tokenizer")
    name = pre.get("type") if isinstance(pre, dict) else pre
    if name != "ByteLevel":
        raise UserError(
            f"{path}: the pre-tokenizer is {name or 'missing'}, not ByteLevel (GPT-2's)."
        )
    for key, wanted in (("add_prefix_space", False), ("use_regex", True)):
        if pre.get(key, wanted) != wanted:
            raise UserError(f"{path}: its ByteLevel sets {key} to {not wanted}, unlike GPT-2's.")
    if doc.get("normalizer") is not None:
        raise UserError(f"{path} normalizes text first, which nanospec leaves out.")
    vocab = read_vocab(model.get("vocab"), path)
    merges = [read_merge(m, r, path) for r, m in enumerate(model.get("merges") or [])]
    return vocab, merges, read_added(doc, path), template_start(doc.get("post_processor"), path)


def read_merges_txt(path: Path) -> list[tuple[str, str]]:
    """merges.txt: one "a b" a line, after an optional "#version: 0.2" line."""
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text.") from None
    except OSError as e:
        raise UserError(f"Cannot read {path} ({e.strerror}).") from None
    lines = [line.removesuffix("\r") for line in lines]
    if lines and lines[0].startswith("#version"):
        lines = lines[1:]
    if lines and not lines[-1]:
        lines = lines[:-1]  # the newline that ends the file
    return [read_merge(line, r, path) for r, line in enumerate(lines)]


def config_token(value, path: Path) -> str | None:
    """A token as tokenizer_config.json names it: "<|endoftext|>" or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    if value is not None and not isinstance(value, str):
        raise UserError(f"{path}: the token {value!r} is not text.")
    return value
