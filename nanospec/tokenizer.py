"""Byte-level BPE tokenizer, written from scratch (in the spirit of minbpe).

Text is first split into chunks by a GPT-2 style regex (words with their leading space, numbers,
punctuation runs, whitespace), then each chunk's UTF-8 bytes are merged pair by pair following
the learned merge list. Ids 0..255 are the raw bytes, id 256 is `<|endoftext|>` (the document
separator the corpus uses), ids 257.. are merges in the order they were learned.

Worked example: with merges [(b"a", b"b") -> 257, (257, b"c") -> 258], "abc" is bytes
[97, 98, 99] -> [257, 99] -> [258]; decoding 258 gives back b"abc".

Training counts whole chunks once ("word counts"), so it costs time proportional to the number of
*distinct* chunks, not the corpus length: a few seconds for the nanospec corpus.

What this file deliberately leaves out: special tokens other than <|endoftext|> (encode() never
produces it from text; `encode_prompt` and the corpus insert `eos_id`), normalisation.
Any Unicode string round-trips exactly: decode(encode(s)) == s.
"""

import heapq
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

import numpy as np
import regex

from nanospec.errors import UserError
from nanospec.fileio import atomic_write

# GPT-2's split pattern: contractions, optional-space + letters, optional-space + numbers,
# optional-space + other symbols, and whitespace (trailing whitespace stays separate so that
# " Paris" is one chunk with its leading space).
SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOS_TEXT = "<|endoftext|>"
EOS_ID = 256
FIRST_MERGE_ID = 257


def merge_pair(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every non-overlapping occurrence of `pair` in `ids` by `new_id`, left to right.

    >>> merge_pair([1, 2, 1, 2, 3], (1, 2), 9)
    [9, 9, 3]
    """
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _pairs(ids: list[int]) -> Counter:
    """Adjacent pairs with their counts: [1, 2, 1, 2] -> {(1, 2): 2, (2, 1): 1}."""
    return Counter(zip(ids, ids[1:]))


class Tokenizer:
    """A trained byte-level BPE: `merges[(a, b)] = new_id`, applied lowest id first."""

    def __init__(self, merges: list[tuple[int, int]]):
        self.merges = {tuple(pair): FIRST_MERGE_ID + i for i, pair in enumerate(merges)}
        self.vocab = {i: bytes([i]) for i in range(256)}
        self.vocab[EOS_ID] = EOS_TEXT.encode()
        for (a, b), new_id in self.merges.items():
            self.vocab[new_id] = self.vocab[a] + self.vocab[b]
        self._split = regex.compile(SPLIT_PATTERN)
        # Chunks repeat constantly ("the", " of"), so memoise their encodings per instance.
        self._encode_chunk = lru_cache(maxsize=1 << 16)(self._encode_chunk_uncached)

    @property
    def vocab_size(self) -> int:
        return FIRST_MERGE_ID + len(self.merges)

    @property
    def eos_id(self) -> int:
        return EOS_ID

    # ---------------------------------------------------------------- training

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int) -> "Tokenizer":
        """Learn `vocab_size - 257` merges from the chunk counts of `texts`.

        Each step merges the most frequent adjacent pair (ties broken by the smaller pair, so
        training is deterministic). Pair counts are updated incrementally: only the chunks that
        contain the merged pair are touched, and a lazy max-heap finds the next best pair.
        """
        if vocab_size < FIRST_MERGE_ID:
            raise UserError(f"vocab_size must be at least {FIRST_MERGE_ID}, got {vocab_size}.")
        split = regex.compile(SPLIT_PATTERN)
        chunk_counts = Counter(c for text in texts for c in split.findall(text))
        words = [list(c.encode("utf-8")) for c in chunk_counts]  # each distinct chunk as ids
        weights = list(chunk_counts.values())  # how often that chunk occurs

        pair_counts: Counter = Counter()
        where: dict[tuple[int, int], set[int]] = defaultdict(set)  # pair -> words containing it
        for w, ids in enumerate(words):
            for pair, n in _pairs(ids).items():
                pair_counts[pair] += n * weights[w]
                where[pair].add(w)
        heap = [(-n, pair) for pair, n in pair_counts.items()]
        heapq.heapify(heap)

        merges: list[tuple[int, int]] = []
        while len(merges) < vocab_size - FIRST_MERGE_ID and heap:
            neg, pair = heapq.heappop(heap)
            if pair_counts.get(pair, 0) != -neg or -neg == 0:
                continue  # stale heap entry: this pair's count changed since it was pushed
            new_id = FIRST_MERGE_ID + len(merges)
            merges.append(pair)
            touched = Counter()
            for w in where.pop(pair):
                old = _pairs(words[w])
                words[w] = merge_pair(words[w], pair, new_id)
                new = _pairs(words[w])
                for p in old.keys() | new.keys():
                    delta = (new.get(p, 0) - old.get(p, 0)) * weights[w]
                    if delta:
                        touched[p] += delta
                    if p in new and p != pair:
                        where[p].add(w)
            for p, delta in touched.items():
                pair_counts[p] += delta
                if pair_counts[p] > 0 and p != pair:
                    heapq.heappush(heap, (-pair_counts[p], p))
            pair_counts.pop(pair, None)
        return cls(merges)

    # ---------------------------------------------------------------- encode / decode

    def _encode_chunk_uncached(self, chunk: str) -> tuple[int, ...]:
        ids = list(chunk.encode("utf-8"))
        while len(ids) >= 2:
            # Apply the earliest-learned merge present; merges learned later build on it.
            pair = min(zip(ids, ids[1:]), key=lambda p: self.merges.get(p, float("inf")))
            if pair not in self.merges:
                break
            ids = merge_pair(ids, pair, self.merges[pair])
        return tuple(ids)

    def encode(self, text: str) -> list[int]:
        """Text -> token ids (never produces <|endoftext|>; that string is encoded as text)."""
        ids: list[int] = []
        for chunk in self._split.findall(text):
            ids.extend(self._encode_chunk(chunk))
        return ids

    def encode_prompt(self, text: str) -> list[int]:
        """A prompt as the model reads it: <|endoftext|> first, then the text.

        Every training document follows an <|endoftext|>, so this makes a prompt the start of a
        fresh document (GPT-2's convention). The loops themselves need only one token.
        """
        if not text:
            raise UserError("The prompt is empty; give at least one character of text.")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: bytes that were not UTF-8 on the way in
            raise UserError("The prompt is not valid UTF-8 text.") from None
        return [EOS_ID] + self.encode(text)

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes one token stands for (may be part of a multi-byte character)."""
        return self.vocab[int(token_id)]

    def decode(self, ids: Iterable[int]) -> str:
        """Token ids -> text. Invalid UTF-8 (a cut-off multi-byte character) becomes U+FFFD."""
        return b"".join(self.vocab[int(i)] for i in ids).decode("utf-8", errors="replace")

    def token_str(self, token_id: int) -> str:
        """A single token as text, for display (e.g. 5321 -> ' Paris')."""
        return self.decode([token_id])

    # ---------------------------------------------------------------- save / load

    def save(self, path: str | Path) -> None:
        doc = {
            "format": "nanospec-bpe",
            "version": 1,
            "pattern": SPLIT_PATTERN,
            "special": {EOS_TEXT: EOS_ID},
            "merges": [list(p) for p in self.merges],
        }
        atomic_write(path, json.dumps(doc, separators=(",", ":")))

    @classmethod
    def load(cls, path: str | Path) -> "Tokenizer":
        path = Path(path)
        if not path.is_file():
            raise UserError(f"Tokenizer file not found: {path}.")
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            if (
                not isinstance(doc, dict)
                or doc.get("format") != "nanospec-bpe"
                or doc.get("version") != 1
            ):
                raise ValueError("unknown format")
            merges = [tuple(p) for p in doc["merges"]]
            for i, pair in enumerate(merges):  # each merge may only use ids that exist before it
                if len(pair) != 2 or not all(
                    type(t) is int and 0 <= t < FIRST_MERGE_ID + i and t != EOS_ID for t in pair
                ):
                    raise ValueError(f"merge {i} is {list(pair)}")
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise UserError(f"{path} is not a valid nanospec tokenizer file ({e}).") from None
        return cls(merges)


def tokenize_docs(tok: Tokenizer, docs: list[str]) -> np.ndarray:
    """Documents -> one long id stream, each document followed by <|endoftext|>."""
    ids: list[int] = []
    for doc in docs:
        ids.extend(tok.encode(doc))
        ids.append(tok.eos_id)
    return np.asarray(ids, dtype=np.int32)
