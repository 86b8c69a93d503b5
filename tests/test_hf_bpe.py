"""Tests for nanospec.hf.bpe: GPT-2's byte-level BPE, written by hand, against `tokenizers`.

- known answers: the byte-to-character map, the module docstring's " Par" merge by merge;
- equivalence: the ids equal those of the `tokenizers` library (the reference) for tokenizers
  it trained, in both of Hugging Face's layouts, with and without a start token, on hand-picked
  hard texts (scripts, combining marks, emoji sequences, whitespace runs, code, numbers,
  <|endoftext|> inside text) and on hypothesis' texts; nanospec's own tokenizer written out by
  `tokenizer_files` encodes in the library as it does in nanospec, and reads back unchanged;
- invariants: decode(encode(s)) == s, the start token comes exactly when a folder asks for it,
  `differs` names what two tokenizers do not share;
- errors: every broken tokenizer file is a UserError of one line.
"""

import doctest
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nanospec
import nanospec.hf.bpe
from nanospec.checkpoint import load_tokenizer
from nanospec.errors import UserError
from nanospec.hf.bpe import BYTE_CHAR, GPT2Tokenizer, bytes_to_unicode, differs, tokenizer_files
from tests.hf_tokenizers import EOS, reference, training_texts, write_tokenizer

LAYOUTS = {  # name -> (legacy, bos)
    "json": (False, False),
    "json-bos": (False, True),
    "legacy": (True, False),
    "legacy-bos": (True, True),
}
HARD_TEXTS = [
    "The capital of France is Paris.",
    "café naïve déjà vu, Straße, São Paulo",
    "e\u0301 a\u0308\u0301 combining marks",  # decomposed accents
    "日本語のテキスト、中文文本。한국어",
    "العربية: مرحبا بالعالم",
    "emoji 😀😀 👍🏽 👨\u200d👩\u200d👧\u200d👦 🏳\ufe0f\u200d🌈 🇫🇷🇯🇵",
    "   leading spaces",
    "trailing spaces   ",
    "  \n\n  ",
    "tabs\tand\t\ttabs\n\tindent",
    "\r\nwindows\r\nlines\r\n",
    "def f(x):\n    return {'a': [1, 2, 3]}  # comment\n",
    "if (a && b) { x += 1; } // c",
    "3.14159 and 1234567890123456789 and -0.5e10 and 1,000,000",
    "don't can't we'll it's they've I'm you're she'd 'S 'LL",
    f"one{EOS}two",
    f"{EOS}",
    f"a {EOS} b{EOS}{EOS}c",
    "<|endoftext| almost <|endoftext",
    "\x00\x01\x7f\x85\xa0\u2028\u3000",
    "x",
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The same training text in the four ways a folder can hold it."""
    texts = training_texts()
    root = tmp_path_factory.mktemp("tokenizers")
    return {
        name: write_tokenizer(root / name, texts, legacy=legacy, bos=bos)
        for name, (legacy, bos) in LAYOUTS.items()
    }


@pytest.fixture(scope="module")
def pairs(folders):
    """name -> (nanospec's tokenizer, the library's) for each folder."""
    return {name: (GPT2Tokenizer.load(f), reference(f)) for name, f in folders.items()}


@pytest.fixture(scope="module")
def shipped():
    return load_tokenizer(nanospec.SHIPPED)


def write(folder, files: dict[str, str]):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


# ------------------------------------------------------------------ known answers


def test_docstrings():
    assert doctest.testmod(nanospec.hf.bpe).failed == 0


def test_byte_map_is_a_bijection_keeping_printable_bytes():
    m = bytes_to_unicode()
    assert len(set(m.values())) == 256
    assert all(m[b] == chr(b) for b in b"Hello,world!~")
    assert [m[b] for b in b" \n\t"] == ["Ġ", "Ċ", "ĉ"]
    assert max(map(ord, m.values())) == 256 + 67  # 68 bytes moved, to 256..323


def test_worked_example_from_the_docstring():
    vocab = {BYTE_CHAR[b]: b for b in range(256)}
    vocab |= {"ĠP": 256, "ar": 257, "ĠPar": 258, EOS: 259}
    tok = GPT2Tokenizer(vocab, [("Ġ", "P"), ("a", "r"), ("ĠP", "ar")], {EOS: (259, True)}, 259)
    assert tok.encode(" Par") == [258]
    assert tok.encode(" Pa") == [256, ord("a")]
    assert tok.encode(f" Par{EOS}") == [258, 259]
    assert tok.token_bytes(258) == b" Par" and tok.token_str(258) == " Par"
    assert tok.merges == [(b" ", b"P"), (b"a", b"r"), (b" P", b"ar")]


def test_fixture_puts_endoftext_last_like_gpt2(pairs):
    for tok, ref in pairs.values():
        assert tok.eos_id == tok.vocab_size - 1 == ref.token_to_id(EOS) == 399
        assert tok.vocab[tok.eos_id] == EOS.encode()


# ------------------------------------------------------------------ the library's ids


@pytest.mark.parametrize("name", LAYOUTS)
@pytest.mark.parametrize("text", HARD_TEXTS)
def test_ids_equal_the_library(pairs, name, text):
    tok, ref = pairs[name]
    assert tok.encode(text) == ref.encode(text, add_special_tokens=False).ids
    assert tok.encode_prompt(text) == ref.encode(text).ids  # the start token, if any, too


@pytest.mark.parametrize("name", LAYOUTS)
def test_training_texts_equal_the_library(pairs, name):
    tok, ref = pairs[name]
    for text in training_texts():
        assert tok.encode_prompt(text) == ref.encode(text).ids


# Texts hypothesis draws from: any text, with GPT-2's awkward pieces mixed in more often than
# chance would put them there. subtle: not characters this Python's Unicode leaves unassigned.
# The `regex` package that nanospec splits with (as GPT-2's own encoder does) and the Rust
# `tokenizers` each carry their own Unicode version, and a character one of them knows as a
# letter (U+3D000, say, is one to regex 2026.11) the other counts as punctuation: they split
# it apart from a following "'s" differently, and neither is wrong.
ASSIGNED = st.characters(exclude_categories=["Cn", "Cs"])  # Cs: as st.text() leaves out
PIECES = st.sampled_from([EOS, " ", "  ", "\n", "\t", "'s", "'ll", "\u200d", "\u0301", "🇫", "1"])
TEXTS = st.one_of(
    st.text(ASSIGNED), st.lists(st.one_of(st.text(ASSIGNED, max_size=5), PIECES)).map("".join)
)


@settings(max_examples=200, deadline=None)
@given(text=TEXTS)
def test_any_text_equals_the_library_and_round_trips(pairs, text):
    for tok, ref in pairs.values():
        ids = tok.encode(text)
        assert ids == ref.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids) == text


def test_both_merge_formats_read_alike(folders, pairs, tmp_path):
    """tokenizers >= 0.20 writes merges as ["a", "b"]; GPT-2's own file has "a b" strings."""
    doc = json.loads((folders["json"] / "tokenizer.json").read_text(encoding="utf-8"))
    assert isinstance(doc["model"]["merges"][0], list)
    doc["model"]["merges"] = [" ".join(m) for m in doc["model"]["merges"]]
    write(tmp_path, {"tokenizer.json": json.dumps(doc)})
    tok, ref = GPT2Tokenizer.load(tmp_path), reference(tmp_path)
    assert differs(tok, pairs["json"][0]) is None
    for text in HARD_TEXTS:
        assert tok.encode(text) == ref.encode(text).ids == pairs["json"][0].encode(text)


# ------------------------------------------------------------------ special tokens


@pytest.mark.parametrize("name", LAYOUTS)
def test_endoftext_inside_text_is_its_one_id(pairs, name):
    """transformers' GPT2Tokenizer makes <|endoftext|> special even where only vocab.json and
    merges.txt say it exists; without that, the legacy layouts would spell it out in pieces."""
    tok, ref = pairs[name]
    a, b = tok.encode("a"), tok.encode("b")
    assert tok.encode(f"a{EOS}b") == a + [tok.eos_id] + b == ref.encode(f"a{EOS}b").ids[-3:]
    assert tok.added == {EOS: (tok.eos_id, True)}


def test_the_two_layouts_are_one_tokenizer(pairs):
    new, old = pairs["json"][0], pairs["legacy"][0]
    assert differs(new, old) is None
    assert new.vocab == old.vocab
    for text in HARD_TEXTS:
        assert new.encode(text) == old.encode(text)
    assert new.files == ("tokenizer.json", "tokenizer_config.json")
    assert old.files == ("vocab.json", "merges.txt", "tokenizer_config.json")


@pytest.mark.parametrize("name", LAYOUTS)
def test_encode_prompt_adds_the_start_token_exactly_when_asked(pairs, name):
    tok, _ = pairs[name]
    with_bos = LAYOUTS[name][1]
    assert tok.bos_id == (tok.eos_id if with_bos else None)
    start = [tok.eos_id] if with_bos else []
    assert tok.encode_prompt("Paris") == start + tok.encode("Paris")
    with pytest.raises(UserError, match="empty"):
        tok.encode_prompt("")
    with pytest.raises(UserError, match="UTF-8"):
        tok.encode_prompt("bad \udc80 byte")


def test_template_alone_adds_the_start_token(folders, tmp_path):
    """A tokenizer.json whose template adds a start token, with no tokenizer_config.json."""
    write(
        tmp_path,
        {"tokenizer.json": (folders["json-bos"] / "tokenizer.json").read_text(encoding="utf-8")},
    )
    tok = GPT2Tokenizer.load(tmp_path)
    assert tok.bos_id == tok.eos_id and tok.files == ("tokenizer.json",)


# ------------------------------------------------------------------ nanospec's own tokenizer


@pytest.mark.parametrize("bos", [True, False])
def test_shipped_tokenizer_written_out_encodes_the_same_in_the_library(shipped, bos, tmp_path):
    write(tmp_path, tokenizer_files(shipped, bos=bos, model_max_length=256))
    ref = reference(tmp_path)
    assert ref.get_vocab_size() == shipped.vocab_size
    for text in [t for t in HARD_TEXTS if EOS not in t] + training_texts(60):
        want = shipped.encode_prompt(text) if bos else shipped.encode(text)
        assert ref.encode(text).ids == want
        assert ref.decode(want, skip_special_tokens=False) == (EOS if bos else "") + text
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["add_bos_token"] is bos and config["model_max_length"] == 256
    assert config["eos_token"] == EOS


def test_shipped_tokenizer_reads_back_unchanged(shipped, tmp_path):
    write(tmp_path, tokenizer_files(shipped, bos=True, model_max_length=256))
    back = GPT2Tokenizer.load(tmp_path)
    assert back.vocab == shipped.vocab and back.vocab_size == shipped.vocab_size
    assert differs(shipped, back) is None and differs(back, shipped) is None
    assert back.eos_id == back.bos_id == shipped.eos_id
    for text in [t for t in HARD_TEXTS if EOS not in t]:
        assert back.encode_prompt(text) == shipped.encode_prompt(text)


@pytest.mark.parametrize("name", LAYOUTS)
def test_a_folder_written_out_reads_back_unchanged(pairs, name, tmp_path):
    tok, ref = pairs[name]
    write(tmp_path, tokenizer_files(tok, bos=tok.bos_id is not None, model_max_length=1024))
    back, back_ref = GPT2Tokenizer.load(tmp_path), reference(tmp_path)
    assert differs(tok, back) is None and back.bos_id == tok.bos_id
    for text in HARD_TEXTS:
        assert back_ref.encode(text).ids == ref.encode(text).ids == back.encode_prompt(text)


# ------------------------------------------------------------------ differs


def test_differs_names_what_is_not_shared(pairs, shipped, tmp_path):
    tok = pairs["json"][0]
    assert differs(tok, tok) is None and differs(shipped, shipped) is None
    assert differs(tok, shipped) == "the vocabulary"

    other = GPT2Tokenizer.load(write_tokenizer(tmp_path / "other", training_texts(seed=1)))
    assert differs(tok, other) == "the vocabulary"

    # The same tokens, two merges swapped: every token still exists, the ranks differ.
    doc = json.loads(tokenizer_files(tok, bos=False, model_max_length=1024)["tokenizer.json"])
    merges = doc["model"]["merges"]
    merges[0], merges[1] = merges[1], merges[0]
    swapped = GPT2Tokenizer.load(write(tmp_path / "swapped", {"tokenizer.json": json.dumps(doc)}))
    assert differs(tok, swapped) == "the merges"

    files = tokenizer_files(tok, bos=False, model_max_length=1024)
    files["tokenizer_config.json"] = json.dumps({"eos_token": "Ġthe"})
    other_eos = GPT2Tokenizer.load(write(tmp_path / "eos", files))
    assert differs(tok, other_eos) == "the end-of-text token"


# ------------------------------------------------------------------ broken files


def _edit_json(name, change):
    def edit(folder):
        doc = json.loads((folder / name).read_text(encoding="utf-8"))
        change(doc)
        (folder / name).write_text(json.dumps(doc), encoding="utf-8")

    return edit


def _model(change):
    return _edit_json("tokenizer.json", lambda doc: change(doc["model"]))


def _set(key, value):
    return _edit_json("tokenizer.json", lambda doc: doc.__setitem__(key, value))


def _write(name, text):
    return lambda folder: (folder / name).write_text(text, encoding="utf-8")


def _drop_eos(doc):
    del doc["model"]["vocab"][EOS]
    doc["added_tokens"] = []


def _eos_after_text(doc):
    doc["post_processor"]["single"] = doc["post_processor"]["single"][::-1]


BROKEN = {  # case -> (layout, how to break it, a phrase of the message)
    "no files": ("json", lambda f: (f / "tokenizer.json").unlink(), "has no tokenizer"),
    "no merges.txt": ("legacy", lambda f: (f / "merges.txt").unlink(), "has no tokenizer"),
    "not json": ("json", _write("tokenizer.json", "{oops"), "not valid JSON"),
    "not utf-8": ("json", lambda f: (f / "tokenizer.json").write_bytes(b"\xff\xfe"), "JSON"),
    "a list": ("json", _write("tokenizer.json", "[]"), "no tokenizer model"),
    "wordpiece": ("json", _model(lambda m: m.update(type="WordPiece")), "not BPE"),
    "dropout": ("json", _model(lambda m: m.update(dropout=0.1)), "dropout"),
    "ignore_merges": ("json", _model(lambda m: m.update(ignore_merges=True)), "ignore_merges"),
    "merge of unknown": ("json", _model(lambda m: m["merges"].append(["Ġ", "zzq"])), "'zzq'"),
    "merge result unknown": ("json", _model(lambda m: m["merges"].append(["q", "q"])), "'qq'"),
    "merge not a pair": ("json", _model(lambda m: m["merges"].append("a b c")), "not a pair"),
    "whitespace pre": ("json", _set("pre_tokenizer", {"type": "Whitespace"}), "not ByteLevel"),
    "no pre": ("json", _set("pre_tokenizer", None), "not ByteLevel"),
    "prefix space": (
        "json",
        _set("pre_tokenizer", {"type": "ByteLevel", "add_prefix_space": True}),
        "add_prefix_space to True",
    ),
    "no regex": (
        "json",
        _set("pre_tokenizer", {"type": "ByteLevel", "use_regex": False}),
        "use_regex to False",
    ),
    "normalizer": ("json", _set("normalizer", {"type": "NFC"}), "normalizes"),
    "duplicate id": ("json", _model(lambda m: m["vocab"].update(zzq=5)), "the id 5 is given"),
    "id gap": ("json", _model(lambda m: m["vocab"].pop("Ġthe")), "no token has the id"),
    "id not a number": ("json", _model(lambda m: m["vocab"].update(zzq="7")), "whole number"),
    "missing byte": ("json", _model(lambda m: m["vocab"].pop("Ā")), "byte 0x00"),
    "not byte-level": ("json", _model(lambda m: m["vocab"].update({"日": 400})), "byte-level"),
    "added token id": (
        "json",
        _edit_json("tokenizer.json", lambda d: d["added_tokens"][0].update(id=3)),
        "two ids",
    ),
    "added lstrip": (
        "json",
        _edit_json("tokenizer.json", lambda d: d["added_tokens"][0].update(lstrip=True)),
        "sets lstrip",
    ),
    "no eos": ("json", _edit_json("tokenizer.json", _drop_eos), "no end-of-text token"),
    "eos after text": ("json-bos", _edit_json("tokenizer.json", _eos_after_text), "template"),
    "config not json": ("json", _write("tokenizer_config.json", "nope"), "not valid JSON"),
    "config a list": ("json", _write("tokenizer_config.json", "[]"), "not a JSON object"),
    "unknown bos": (
        "json",
        _write("tokenizer_config.json", '{"add_bos_token": true, "bos_token": "<s>"}'),
        "no start token '<s>'",
    ),
    "vocab.json not json": ("legacy", _write("vocab.json", ""), "not valid JSON"),
    "vocab.json a list": ("legacy", _write("vocab.json", "[1]"), "no vocabulary"),
    "merges.txt bad line": ("legacy", _write("merges.txt", "#version: 0.2\nĠ t h\n"), "merge 1"),
    "merges.txt not utf-8": (
        "legacy",
        lambda f: (f / "merges.txt").write_bytes(b"#version: 0.2\n\xff \xfe\n"),
        "not UTF-8",
    ),
}


@pytest.mark.parametrize("case", BROKEN)
def test_broken_files_are_one_sentence(folders, case, tmp_path):
    layout, breaks, phrase = BROKEN[case]
    for f in folders[layout].iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    breaks(tmp_path)
    with pytest.raises(UserError) as err:
        GPT2Tokenizer.load(tmp_path)
    message = str(err.value)
    assert phrase in message and "\n" not in message, message
    assert message.endswith("."), message
