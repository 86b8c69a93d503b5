"""Tests for nanospec.tokenizer: the byte-level BPE.

- known answers: the classic "aaabdaaabac" worked example, merge by merge, and `merge_pair`'s cases;
- equivalence: the incremental trainer learns exactly the merges of a naive from-scratch BPE
  (recount every pair after every merge), and encoding equals "apply every merge in order";
- invariants: any Unicode string round-trips losslessly, encode never emits <|endoftext|>,
  training is deterministic, save/load keeps every encoding;
- errors: a missing, garbled or foreign tokenizer file is a `UserError` with a clear sentence.
"""

import doctest
import json
import random
from collections import Counter

import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nanospec.tokenizer
from nanospec.errors import UserError
from nanospec.tokenizer import EOS_TEXT, FIRST_MERGE_ID, SPLIT_PATTERN, Tokenizer, merge_pair

# A small corpus mixing scripts, so learned tokens include pieces of multi-byte characters.
MIXED = [
    "The capital of France is Paris. The capital of Spain is Madrid. Paris, Paris, Paris!",
    "Größe, Straße, café, naïve — déjà vu. Ελληνικά και русский текст.",
    "日本語のテキスト、中文文本。한국어 텍스트도 있어요.",
    "emoji 😀😀 👍🏽 👨‍👩‍👧 🇫🇷🇫🇷 and math ∑ x² ≤ ∞",
    "def f(x):\n\treturn x  +  1\r\n\n\n    # spaces   and\ttabs\n",
    "numbers 12345 3.14159 2024-01-01 <|endoftext|> after the separator",
]

# Strings chosen to be awkward for a byte-level tokenizer; hypothesis glues them together.
AWKWARD = [
    "\x00",
    "\n",
    "\r\n",
    "\t",
    "   ",
    " \n ",
    "\u2028",
    "\ufeff",
    "\u00a0",
    "e\u0301",
    "\u0301",
    "Z\u0351\u0364\u0350",  # combining marks, also with no base letter
    "😀",
    "👍🏽",
    "👨‍👩‍👧",
    "🇫🇷",
    "\U0010ffff",
    "\ud7ff",
    "\ue000",
    EOS_TEXT,
    "<|endoftext",
    "|>",
    " Paris",
    "'s",
    "'ll",
    "123",
    "x²",
]
unicode_text = st.one_of(
    st.text(),  # arbitrary code points (hypothesis leaves out lone surrogates: not valid UTF-8)
    st.lists(st.one_of(st.sampled_from(AWKWARD), st.text(max_size=3)), max_size=20).map("".join),
)


@pytest.fixture(scope="module")
def mixed_tok() -> Tokenizer:
    return Tokenizer.train(MIXED, vocab_size=400)


# ------------------------------------------------------------------ a naive reference BPE


def naive_merge(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if ids[i : i + 2] == list(pair):
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def naive_train(texts, vocab_size):
    """BPE the slow, obvious way: every chunk occurrence kept, every pair recounted each step."""
    chunks = [list(c.encode("utf-8")) for t in texts for c in regex.findall(SPLIT_PATTERN, t)]
    merges = []
    while len(merges) < vocab_size - FIRST_MERGE_ID:
        counts = Counter(p for ids in chunks for p in zip(ids, ids[1:]))
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))  # most frequent; ties: smallest pair
        merges.append(best)
        chunks = [naive_merge(ids, best, FIRST_MERGE_ID + len(merges) - 1) for ids in chunks]
    return merges


def naive_encode(merges, text):
    """Apply every merge, in the order learned, to every chunk."""
    out = []
    for c in regex.findall(SPLIT_PATTERN, text):
        ids = list(c.encode("utf-8"))
        for i, pair in enumerate(merges):
            ids = naive_merge(ids, pair, FIRST_MERGE_ID + i)
        out.extend(ids)
    return out


# ------------------------------------------------------------------ known answers


def test_merge_docstring_example():
    results = doctest.testmod(nanospec.tokenizer)
    assert results.attempted >= 1 and results.failed == 0


@pytest.mark.parametrize(
    "ids, pair, expected",
    [
        ([1, 2, 1, 2, 3], (1, 2), [9, 9, 3]),
        ([1, 1, 1], (1, 1), [9, 1]),  # non-overlapping, left to right
        ([1, 1, 1, 1], (1, 1), [9, 9]),
        ([3, 1, 2], (1, 2), [3, 9]),  # pair at the very end
        ([2, 1], (1, 2), [2, 1]),  # order matters
        ([1], (1, 2), [1]),
        ([], (1, 2), []),
        ([1, 2, 2], (2, 2), [1, 9]),
    ],
)
def test_merge_replaces_non_overlapping_pairs_left_to_right(ids, pair, expected):
    assert merge_pair(ids, pair, 9) == expected


def test_training_on_aaabdaaabac_learns_the_textbook_merges():
    # Worked by hand (it is the Wikipedia BPE example): bytes a=97 b=98 c=99 d=100.
    #   a a a b d a a a b a c   (a,a) occurs 4 times (overlaps count) -> 257 = "aa"
    #   257 a b d 257 a b a c   (257,a) and (a,b) both occur twice; smaller pair wins -> 258 = "ab"
    #   257 258 d 257 258 a c   (257,258) occurs twice -> 259 = "aaab"
    #   259 d 259 a c           every pair once: smallest is (a,c) -> 260 ...
    tok = Tokenizer.train(["aaabdaaabac"], vocab_size=260)
    assert tok.merges == {(97, 97): 257, (97, 98): 258, (257, 258): 259}
    assert tok.encode("aaabdaaabac") == [259, 100, 259, 97, 99]
    assert tok.token_bytes(259) == b"aaab"
    assert tok.vocab_size == 260


def test_training_stops_when_no_pair_is_left():
    # Continuing the example: (a,c)->260, then (d,259)->261, (259,261)->262, (262,260)->263.
    tok = Tokenizer.train(["aaabdaaabac"], vocab_size=10_000)
    assert list(tok.merges.items())[3:] == [
        ((97, 99), 260),
        ((100, 259), 261),
        ((259, 261), 262),
        ((262, 260), 263),
    ]
    assert tok.encode("aaabdaaabac") == [263]
    assert tok.vocab_size == 264


def test_ties_go_to_the_smallest_pair():
    # "ab" and " cd" are two chunks; every pair occurs once, and (32, 99) = (" ", "c") is smallest.
    tok = Tokenizer.train(["ab cd"], vocab_size=258)
    assert tok.merges == {(32, 99): 257}


def test_merges_never_cross_chunk_boundaries():
    # "a a a a" splits into "a", " a", " a", " a": the pair (a, " ") is never counted.
    tok = Tokenizer.train(["a a a a"], vocab_size=300)
    assert tok.merges == {(32, 97): 257}


def test_vocab_size_257_means_raw_bytes():
    tok = Tokenizer.train(MIXED, vocab_size=257)
    assert tok.merges == {}
    assert tok.encode("héllo") == list("héllo".encode())


@pytest.mark.parametrize("vocab_size", [0, 100, 256])
def test_vocab_size_below_257_is_a_user_error(vocab_size):
    with pytest.raises(UserError, match="at least 257"):
        Tokenizer.train(MIXED, vocab_size=vocab_size)


def test_paris_with_its_leading_space_is_one_token():
    tok = Tokenizer.train(["The capital of France is Paris."] * 50, vocab_size=400)
    (paris,) = tok.encode(" Paris")
    assert tok.token_str(paris) == " Paris"
    assert tok.token_bytes(paris) == b" Paris"
    assert tok.encode("The capital of France is Paris.")[-2:] == [paris, ord(".")]


def test_token_str_of_special_and_partial_tokens(mixed_tok):
    assert mixed_tok.token_str(mixed_tok.eos_id) == EOS_TEXT
    assert mixed_tok.token_str(ord("A")) == "A"
    assert mixed_tok.token_bytes(0xC3) == b"\xc3"  # half of a two-byte character...
    assert mixed_tok.token_str(0xC3) == "\ufffd"  # ...is shown as U+FFFD, not an exception


# ------------------------------------------------------------------ equivalence


CORPORA = {
    "aaabdaaabac": ["aaabdaaabac"],
    "repeats": ["aaaa aaaa aaaaaaa", "abababab ab ab"],
    "mixed": MIXED,
    "facts": [
        "The capital of France is Paris. The capital of Spain is Madrid.",
        "Repeat after me: the quick brown fox. The quick brown fox.",
        "def capital_of(country):\n    return capitals[country]\n",
    ],
}


@pytest.mark.parametrize("name", CORPORA)
def test_training_equals_naive_bpe(name):
    texts = CORPORA[name]
    tok = Tokenizer.train(texts, vocab_size=257 + 60)
    assert list(tok.merges) == naive_train(texts, vocab_size=257 + 60)
    for text in texts:
        assert tok.encode(text) == naive_encode(list(tok.merges), text)


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(st.text(alphabet="aab c\n", max_size=40), max_size=4),
    n_merges=st.integers(0, 25),
)
def test_training_equals_naive_bpe_on_random_corpora(texts, n_merges):
    # A tiny alphabet makes ties, overlapping pairs ("aaa") and exhaustion common.
    tok = Tokenizer.train(texts, vocab_size=FIRST_MERGE_ID + n_merges)
    merges = naive_train(texts, vocab_size=FIRST_MERGE_ID + n_merges)
    assert list(tok.merges) == merges
    for text in texts + ["".join(texts[::-1])]:
        assert tok.encode(text) == naive_encode(merges, text)


# ------------------------------------------------------------------ invariants


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=unicode_text)
def test_any_unicode_text_round_trips(mixed_tok, text):
    assert mixed_tok.decode(mixed_tok.encode(text)) == text


@settings(max_examples=100, deadline=None)
@given(text=unicode_text)
def test_encode_never_emits_eos(mixed_tok, text):
    assert mixed_tok.eos_id not in mixed_tok.encode(text + EOS_TEXT)


def test_endoftext_text_is_encoded_as_text(mixed_tok):
    ids = mixed_tok.encode(EOS_TEXT)
    assert mixed_tok.eos_id not in ids and len(ids) > 1
    assert mixed_tok.decode(ids) == EOS_TEXT
    assert mixed_tok.decode([mixed_tok.eos_id]) == EOS_TEXT  # the id itself decodes to it too


def test_a_prompt_starts_a_fresh_document(mixed_tok):
    assert mixed_tok.encode_prompt("Paris") == [mixed_tok.eos_id] + mixed_tok.encode("Paris")
    with pytest.raises(UserError, match="empty"):
        mixed_tok.encode_prompt("")


def test_awkward_strings_round_trip(mixed_tok):
    for s in AWKWARD + ["".join(AWKWARD), "", "\x00" * 5, " " * 17, "\n\n\n \t \n"]:
        assert mixed_tok.decode(mixed_tok.encode(s)) == s, repr(s)


def test_every_token_id_is_below_vocab_size(mixed_tok):
    ids = mixed_tok.encode("".join(MIXED))
    assert max(ids) < mixed_tok.vocab_size
    assert len(mixed_tok.vocab) == mixed_tok.vocab_size


def test_training_is_deterministic():
    a = Tokenizer.train(MIXED, vocab_size=400)
    b = Tokenizer.train(MIXED, vocab_size=400)
    shuffled = MIXED[:]
    random.Random(0).shuffle(shuffled)
    c = Tokenizer.train(shuffled, vocab_size=400)  # document order cannot matter either
    assert list(a.merges.items()) == list(b.merges.items()) == list(c.merges.items())


# ------------------------------------------------------------------ save / load


def test_save_load_round_trip_keeps_every_encoding(mixed_tok, tmp_path):
    path = tmp_path / "tokenizer.json"
    mixed_tok.save(path)
    doc = json.loads(path.read_text(encoding="utf-8"))  # a valid JSON file
    assert doc["format"] == "nanospec-bpe" and doc["version"] == 1
    assert len(doc["merges"]) == mixed_tok.vocab_size - FIRST_MERGE_ID
    loaded = Tokenizer.load(path)
    assert list(loaded.merges.items()) == list(mixed_tok.merges.items())
    assert loaded.vocab == mixed_tok.vocab
    for text in MIXED + AWKWARD:
        assert loaded.encode(text) == mixed_tok.encode(text)
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer.json"]  # no temp files left


def test_loading_a_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="not found"):
        Tokenizer.load(tmp_path / "nope.json")


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"this is not json",
        b"\xff\xfe\x00garbage",  # not even UTF-8
        b'{"format": "nanospec-bpe", "version": 1',  # truncated
        b'{"format": "tiktoken", "version": 1, "merges": []}',  # someone else's format
        b'{"format": "nanospec-bpe", "version": 2, "merges": []}',  # a future version
        b'{"format": "nanospec-bpe", "version": 1}',  # merges missing
    ],
    ids=["empty", "text", "binary", "truncated", "foreign", "version", "no-merges"],
)
def test_loading_a_bad_file_is_a_user_error(tmp_path, content):
    path = tmp_path / "tokenizer.json"
    path.write_bytes(content)
    with pytest.raises(UserError, match="not a valid nanospec tokenizer file"):
        Tokenizer.load(path)


@pytest.mark.parametrize(
    "doc",
    [
        [1, 2],
        {"format": "nanospec-bpe", "version": 1, "merges": [[999, 1000]]},
        {"format": "nanospec-bpe", "version": 1, "merges": [[1]]},
    ],
    ids=["list", "unknown-ids", "not-pairs"],
)
def test_loading_well_formed_json_of_the_wrong_shape_is_a_user_error(tmp_path, doc):
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UserError):
        Tokenizer.load(path)
