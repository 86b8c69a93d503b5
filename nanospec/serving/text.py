"""Token ids in, text a client may safely see out: incremental detokenizing and stop strings.

A server streams text while the tokens are still coming, and two things make the text of a
prefix differ from a prefix of the final text:

1. The tokenizer is byte-level BPE, so one character may be split across tokens: "é" is the
   bytes c3 a9, and a token may end after c3. Decoding that token alone would show U+FFFD.
   Python's incremental UTF-8 decoder holds an incomplete tail back until the next token
   completes it (and, like `Tokenizer.decode`, turns bytes that can never be UTF-8 into
   U+FFFD), so the streamed pieces always join to exactly the text of the whole output.
2. A stop string cuts the text before its first occurrence, and it may arrive a piece at a
   time: with stop "\\n\\n" a text ending in "\\n" cannot be sent yet, since the next token may
   complete the stop. So the stream holds back the longest tail that is the beginning of a
   stop string, and sends it only once the next text shows it is not one.

Worked example, stop ["END"]: push("the E") sends "the " and holds "E"; push("N") holds "EN";
push("D and more") finds "END": the stream has stopped, and the whole text is "the ".

With vLLM's `min_tokens`, a stop string counts only if it ends in the text of a token after
the first `min_tokens`: one that ends earlier is text like any other (it may still be the
beginning of one that ends later).

What this file deliberately leaves out: tokens themselves (the engine's), and stop *token ids*.
"""

import codecs


def held_back(text: str, stops: list[str]) -> int:
    """How many of `text`'s last characters could be the beginning of a stop string.

    >>> held_back("said the E", ["END", "\\n\\n"])
    1
    >>> held_back("said the", ["END"])
    0
    """
    most = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), most, -1):
            if text.endswith(stop[:n]):
                most = n
                break
    return most


class TextStream:
    """One request's text: `push` each step's new tokens, send what it returns; `finish` at
    the end. `stopped` turns True at the first stop string (push returns the text before it,
    and everything after is dropped)."""

    def __init__(self, tokenizer, stops: list[str], min_tokens: int = 0):
        self.tok, self.stops, self.min_tokens = tokenizer, stops, min_tokens
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.pending = ""  # decoded, not sent yet: it may be the beginning of a stop string
        self.early = 0  # how many of pending's characters came before min_tokens was reached
        self.pushed = 0  # tokens pushed so far
        self.stopped = False

    def push(self, ids: list[int]) -> str:
        """The text that these tokens make safe to send (often "", never past a stop)."""
        if self.stopped:
            return ""
        n_early = max(0, min(len(ids), self.min_tokens - self.pushed))  # before min_tokens
        self.pushed += len(ids)
        text = self.pending + self._decode(ids[:n_early])
        if n_early:
            self.early = len(text)  # no stop string may end in here
        return self._release(text + self._decode(ids[n_early:]))

    def _decode(self, ids: list[int]) -> str:
        return self.decoder.decode(
            b"".join(self.tok.token_bytes(i) for i in ids if i != self.tok.eos_id)
        )

    def finish(self) -> str:
        """The rest: the held-back tail (no stop can complete now) and any cut-off bytes."""
        if self.stopped:
            return ""
        text = self._release(self.pending + self.decoder.decode(b"", final=True))
        rest, self.pending = self.pending, ""
        return text + rest

    def _release(self, text: str) -> str:
        """Send `text` up to the first stop string that ends past the early text (and stop
        there), or up to what is held."""
        cut = min(
            (i for i in (first_end_past(text, s, self.early) for s in self.stops) if i >= 0),
            default=-1,
        )
        if cut >= 0:
            self.stopped, self.pending = True, ""
            return text[:cut]
        keep = held_back(text, self.stops)
        self.pending = text[len(text) - keep :]
        self.early = max(0, self.early - (len(text) - keep))  # now counted within pending
        return text[: len(text) - keep]


def first_end_past(text: str, stop: str, early: int) -> int:
    """Where the first `stop` in `text` that ends after its first `early` characters begins
    (-1: none).

    >>> first_end_past("a.b.", ".", 2), first_end_past("a.b.", ".", 0), first_end_past("a.", ".", 2)
    (3, 1, -1)
    """
    return text.find(stop, max(0, early - len(stop) + 1))
