"""GPT-2's byte-level BPE, read from a Hugging Face folder and applied by hand.

nanospec's own tokenizer (tokenizer.py) and GPT-2's are the same algorithm with different
bookkeeping. GPT-2 keeps its vocabulary as *text*: every byte is first given a visible character
(`bytes_to_unicode`: a space is "Ġ", a newline "Ċ"), and a token is the string of its bytes'
characters, so the bytes b" Paris" are stored as "ĠParis". Merges are pairs of such strings,
ranked by their place in the file. Encoding is GPT-2's classic `bpe()`:

1. split the text on the added tokens (<|endoftext|> inside a text becomes its one id),
2. cut every other piece into chunks with GPT-2's regex (SPLIT_PATTERN, shared with tokenizer.py),
3. start each chunk as its UTF-8 bytes and merge the adjacent pair of lowest rank, everywhere it
   occurs, until no adjacent pair has a rank.

Worked example: with the merges "Ġ P" (rank 0), "a r" (rank 1) and "ĠP ar" (rank 2), the chunk
" Par" is the bytes Ġ P a r -> ĠP a r -> ĠP ar -> ĠPar: one token.

A folder holds tokenizer.json (the `tokenizers` library's file; read first when present) or the
older vocab.json + merges.txt, and optionally tokenizer_config.json (the end-of-text token, and
whether a start token is added). `tokenizer_files` goes the other way: the tokenizer files of a
folder, for either tokenizer, which `tokenizers` and transformers load as they are. `differs`
says whether two tokenizers are the same one, as a target and its draft must be.

What this file deliberately leaves out: normalizers, ByteLevel's prefix space, BPE dropout,
`ignore_merges`, added tokens that strip spaces or match whole words only (each is refused in one
sentence, so no folder is tokenized differently without a word), and added_tokens.json.
"""

import json
from functools import lru_cache
from pathlib import Path

import regex

from nanospec.errors import UserError
from nanospec.hf.bpe_files import (
    config_token,
    read_json,
    read_merges_txt,
    read_tokenizer_json,
    read_vocab,
)
from nanospec.tokenizer import EOS_TEXT, SPLIT_PATTERN, Tokenizer, merge_pair

TOKENIZER_JSON = "tokenizer.json"
VOCAB_JSON = "vocab.json"
MERGES_TXT = "merges.txt"
CONFIG_JSON = "tokenizer_config.json"
# The special tokens transformers' GPT2Tokenizer registers from tokenizer_config.json.
SPECIAL_KEYS = ("unk_token", "bos_token", "eos_token", "pad_token")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map from each byte to the character that stands for it in the vocabulary files.

    The files are text, and a merge is a line "a b", so no byte may be a character that prints
    as nothing (a control code) or as a space. The 188 printable bytes stand for themselves; the
    other 68 are moved, in order, to the characters 256, 257, ...

    >>> m = bytes_to_unicode()
    >>> m[ord("A")], m[ord(" ")], m[ord("\\n")], m[0]
    ('A', 'Ġ', 'Ċ', 'Ā')
    """
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)}
    printable |= {*range(ord("®"), ord("ÿ") + 1)}
    out, moved = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + moved)
            moved += 1
    return out


BYTE_CHAR = bytes_to_unicode()
CHAR_BYTE = {c: b for b, c in BYTE_CHAR.items()}


def token_text(data: bytes) -> str:
    """Raw bytes as a vocabulary string: b" Paris" -> "ĠParis"."""
    return "".join(BYTE_CHAR[b] for b in data)


# ------------------------------------------------------------------ the tokenizer


class GPT2Tokenizer:
    """A GPT-2 byte-level BPE: the same public face as nanospec.tokenizer.Tokenizer.

    vocab:    id -> raw bytes (an added token's are the UTF-8 of its text)
    merges:   (bytes, bytes) pairs in rank order
    added:    added token text -> (id, whether special); split off before the BPE
    eos_id:   the end-of-text token; bos_id: the start token encode_prompt adds, or None
    files:    the tokenizer files read, by name, for error messages
    """

    def __init__(self, vocab: dict[str, int], merges: list[tuple[str, str]],
                 added: dict[str, tuple[int, bool]], eos_id: int, bos_id: int | None = None,
                 files: tuple[str, ...] = (), where: str = "the tokenizer"):  # fmt: skip
        ids = dict(vocab)  # every token text -> id, the added tokens included
        for text, (i, _) in added.items():
            if ids.setdefault(text, i) != i:
                raise UserError(
                    f"{where}: the added token {text!r} has two ids, {i} and {ids[text]}."
                )
        self.vocab: dict[int, bytes] = {}
        texts: dict[int, str] = {}
        for text, i in ids.items():
            if i in texts:
                raise UserError(f"{where}: the id {i} is given to {texts[i]!r} and to {text!r}.")
            if text in added:
                self.vocab[i] = text.encode("utf-8")
            elif all(c in CHAR_BYTE for c in text):
                self.vocab[i] = bytes(CHAR_BYTE[c] for c in text)
            else:
                raise UserError(f"{where}: the token {text!r} is not byte-level text.")
            texts[i] = text
        missing = [b for b in range(256) if BYTE_CHAR[b] not in vocab]
        if missing:
            raise UserError(f"{where}: no token stands for the byte {missing[0]:#04x} alone.")
        gap = next((i for i in range(len(self.vocab)) if i not in self.vocab), None)
        if gap is not None:
            raise UserError(f"{where}: no token has the id {gap}; ids must run 0, 1, 2, ...")
        self._byte_ids = [vocab[BYTE_CHAR[b]] for b in range(256)]

        # A merge (a, b) -> a+b, by ids; its rank decides which pair is merged first.
        self._rank: dict[tuple[int, int], int] = {}
        self._merged: dict[tuple[int, int], int] = {}
        self.merges: list[tuple[bytes, bytes]] = []
        for rank, (a, b) in enumerate(merges):
            for text in (a, b, a + b):
                if text not in vocab:
                    raise UserError(
                        f"{where}: merge {rank + 1} ({a!r}, {b!r}) needs {text!r}, which is not "
                        "in the vocabulary."
                    )
            pair = (vocab[a], vocab[b])
            self._rank[pair], self._merged[pair] = rank, vocab[a + b]  # a later duplicate wins
            self.merges.append((self.vocab[pair[0]], self.vocab[pair[1]]))

        for what, i in (("end-of-text", eos_id), ("start", bos_id)):
            if i is not None and i not in self.vocab:
                raise UserError(f"{where}: the {what} token's id {i} is not in the vocabulary.")
        self.eos_id, self.bos_id = eos_id, bos_id
        self.added = dict(added)
        self.files = tuple(files)
        self._split = regex.compile(SPLIT_PATTERN)
        # Longest first, so that where two added tokens start at one place the longer one wins.
        longest_first = sorted(added, key=len, reverse=True)
        self._split_added = regex.compile("(" + "|".join(map(regex.escape, longest_first)) + ")")
        # Chunks repeat constantly ("Ġthe", "Ġof"), so memoise their encodings per instance.
        self._encode_chunk = lru_cache(maxsize=1 << 16)(self._bpe)

    @classmethod
    def load(cls, folder: str | Path) -> "GPT2Tokenizer":
        """The tokenizer of a Hugging Face folder: tokenizer.json, or vocab.json + merges.txt.

        A start token is added when tokenizer_config.json says add_bos_token, or when
        tokenizer.json's template puts a special token before the text."""
        folder = Path(folder)
        config_path = folder / CONFIG_JSON
        config = read_json(config_path) if config_path.is_file() else {}
        if not isinstance(config, dict):
            raise UserError(f"{config_path} is not a JSON object.")
        if (folder / TOKENIZER_JSON).is_file():
            files = [TOKENIZER_JSON]
            vocab, merges, added, start = read_tokenizer_json(folder / TOKENIZER_JSON)
        elif (folder / VOCAB_JSON).is_file() and (folder / MERGES_TXT).is_file():
            files = [VOCAB_JSON, MERGES_TXT]
            vocab = read_vocab(read_json(folder / VOCAB_JSON), folder / VOCAB_JSON)
            merges, start = read_merges_txt(folder / MERGES_TXT), None
            # transformers' GPT2Tokenizer makes its unk, bos, eos (all <|endoftext|> unless the
            # config says otherwise) and pad tokens special, so text can name them.
            defaults = {"unk_token": EOS_TEXT, "bos_token": EOS_TEXT, "eos_token": EOS_TEXT}
            named = [
                config_token(config.get(k, defaults.get(k)), config_path) for k in SPECIAL_KEYS
            ]
            added = {t: (vocab[t], True) for t in named if t is not None and t in vocab}
        else:
            raise UserError(
                f"{folder} has no tokenizer: it needs tokenizer.json, or vocab.json and merges.txt."
            )
        files += [CONFIG_JSON] if config_path.is_file() else []
        legacy = files[0] == VOCAB_JSON
        where = f"{folder} ({VOCAB_JSON}, {MERGES_TXT})" if legacy else str(folder / TOKENIZER_JSON)
        ids = {**vocab, **{t: i for t, (i, _) in added.items()}}
        eos = config_token(config.get("eos_token"), config_path) or EOS_TEXT
        if eos not in ids:
            raise UserError(
                f"{where} has no end-of-text token {eos!r}; nanospec ends texts with one."
            )
        if config.get("add_bos_token") is True:
            bos = config_token(config.get("bos_token"), config_path) or EOS_TEXT
            if bos not in ids:
                raise UserError(f"{where} has no start token {bos!r}, which {CONFIG_JSON} adds.")
            start = ids[bos]
        return cls(vocab, merges, added, ids[eos], start, tuple(files), where)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)  # ids run 0..len-1 (checked when loading)

    # ---------------------------------------------------------------- encode / decode

    def _bpe(self, chunk: str) -> tuple[int, ...]:
        ids = [self._byte_ids[b] for b in chunk.encode("utf-8")]
        while len(ids) >= 2:
            # The pair of lowest rank merges first, everywhere it occurs (GPT-2's `bpe()`).
            pair = min(zip(ids, ids[1:]), key=lambda p: self._rank.get(p, float("inf")))
            if pair not in self._rank:
                break
            ids = merge_pair(ids, pair, self._merged[pair])
        return tuple(ids)

    def encode(self, text: str) -> list[int]:
        """Text -> token ids; an added token's text (e.g. <|endoftext|>) becomes its one id."""
        ids: list[int] = []
        # subtle: added tokens are cut out before GPT-2's regex sees the text, so in
        # "a <|endoftext|>" the space before the token is a chunk of its own (as in `tokenizers`).
        pieces = self._split_added.split(text) if self.added else [text]
        for k, piece in enumerate(pieces):
            if k % 2:  # split() returns the captured separators at odd places
                ids.append(self.added[piece][0])
                continue
            for chunk in self._split.findall(piece):
                ids.extend(self._encode_chunk(chunk))
        return ids

    def encode_prompt(self, text: str) -> list[int]:
        """A prompt as the model reads it: the start token first when the folder adds one
        (GPT-2's own folders add none), then the text."""
        if not text:
            raise UserError("The prompt is empty; give at least one character of text.")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: bytes that were not UTF-8 on the way in
            raise UserError("The prompt is not valid UTF-8 text.") from None
        return ([self.bos_id] if self.bos_id is not None else []) + self.encode(text)

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes one token stands for (may be part of a multi-byte character)."""
        return self.vocab[int(token_id)]

    def decode(self, ids) -> str:
        """Token ids -> text. Invalid UTF-8 (a cut-off multi-byte character) becomes U+FFFD."""
        return b"".join(self.vocab[int(i)] for i in ids).decode("utf-8", errors="replace")

    def token_str(self, token_id: int) -> str:
        """A single token as text, for display (e.g. 6342 -> ' Paris')."""
        return self.decode([token_id])


# ------------------------------------------------------------------ comparing and writing


def _parts(tok) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]], int]:
    """(id -> bytes, merges as byte pairs in rank order, eos id) of either tokenizer class."""
    if isinstance(tok, Tokenizer):  # nanospec's own: merges by id pairs, ranked by new id
        by_rank = sorted(tok.merges, key=tok.merges.get)
        return tok.vocab, [(tok.vocab[a], tok.vocab[b]) for a, b in by_rank], tok.eos_id
    return tok.vocab, tok.merges, tok.eos_id


def differs(a, b) -> str | None:
    """None when two tokenizers encode alike by construction (the same id -> bytes vocabulary,
    the same merges in the same order, the same end-of-text token), else what differs, as in
    "the merges"."""
    (vocab_a, merges_a, eos_a), (vocab_b, merges_b, eos_b) = _parts(a), _parts(b)
    if vocab_a != vocab_b:
        return "the vocabulary"
    if merges_a != merges_b:
        return "the merges"
    if eos_a != eos_b:
        return "the end-of-text token"
    return None


def tokenizer_files(tok, bos: bool, *, model_max_length: int) -> dict[str, str]:
    """tokenizer.json, tokenizer_config.json and special_tokens_map.json (name -> text) for
    either tokenizer class, with its ids kept exactly. With `bos`, the start token (the
    end-of-text token, unless `tok` has its own) is added before every text."""
    vocab, merges, eos_id = _parts(tok)
    added = {i: (text, special) for text, (i, special) in getattr(tok, "added", {}).items()}
    eos = vocab[eos_id].decode("utf-8")
    added[eos_id] = (eos, True)
    texts = {i: added[i][0] if i in added else token_text(data) for i, data in vocab.items()}
    if len(set(texts.values())) != len(texts):
        raise UserError("Two token ids stand for the same text; tokenizer.json cannot hold them.")
    start_id = tok.bos_id if getattr(tok, "bos_id", None) is not None else eos_id
    start = texts[start_id]

    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}  # fmt: skip
    if bos:

        def start_token(type_id):
            return {"SpecialToken": {"id": start, "type_id": type_id}}

        def sequence(name, type_id):
            return {"Sequence": {"id": name, "type_id": type_id}}

        post = {
            "type": "TemplateProcessing",
            "single": [start_token(0), sequence("A", 0)],
            "pair": [start_token(0), sequence("A", 0), start_token(1), sequence("B", 1)],
            "special_tokens": {start: {"id": start, "ids": [start_id], "tokens": [start]}},
        }
    else:
        post = byte_level
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": text,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": special,
            }
            for i, (text, special) in sorted(added.items())
        ],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": post,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {texts[i]: i for i in sorted(texts)},
            # "a b" lines, as GPT-2's own file has them: every `tokenizers` version reads these.
            "merges": [f"{token_text(a)} {token_text(b)}" for a, b in merges],
        },
    }
    specials = {"bos_token": start, "eos_token": eos, "unk_token": eos}
    config = {
        "add_bos_token": bos,
        "add_prefix_space": False,
        # transformers would otherwise "tidy" spaces before punctuation when decoding.
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "model_max_length": model_max_length,
        "tokenizer_class": "GPT2Tokenizer",
        **specials,
    }
    return {
        TOKENIZER_JSON: json.dumps(doc, indent=2, ensure_ascii=False),
        CONFIG_JSON: json.dumps(config, indent=2, ensure_ascii=False),
        "special_tokens_map.json": json.dumps(specials, indent=2, ensure_ascii=False),
    }
