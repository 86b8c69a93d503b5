"""Small GPT-2-style tokenizers trained by the `tokenizers` library, written in HF's layouts.

No hub is reachable here, so the tests train their own: a byte-level BPE (GPT-2's pre-tokenizer
without a prefix space, the 256 byte characters as its first tokens) on `training_texts()`, and
write it as a Hugging Face folder holds it, either

    tokenizer.json                  the `tokenizers` file (legacy=False), or
    vocab.json + merges.txt         the older layout ("#version: 0.2" first, as GPT-2's), and
    tokenizer_config.json           whether a start token is added (add_bos_token)

subtle: BpeTrainer gives its special tokens the first ids, so <|endoftext|> comes out as id 0.
GPT-2 has it last (50256), so `write_tokenizer` renumbers the file: <|endoftext|> moves to the
last id and every other token moves down by one (merges name tokens by text, so they stay).

`reference(folder)` is the library's own tokenizer for a folder, the yardstick of the tests:
tokenizer.json as `Tokenizer.from_file` reads it, or vocab.json + merges.txt built the way
transformers' GPT2TokenizerFast converts them (its special tokens added, its template applied).
"""

import json
import random
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

EOS = "<|endoftext|>"

WORDS = (
    "the of and to in is was for on that with as it by at from his her they be this had not are "
    "but which have one were all their there been when who will more would some into time could "
    "capital France Paris Spain Madrid river mountain north south speculative decoding draft "
    "target token accept reject model sample probability"
).split()
UNICODE = (
    "café naïve déjà Straße Größe façade São Ελληνικά русский текст 日本語 中文 한국어 "
    "العربية עברית हिन्दी ไทย e\u0301 n\u0303 😀 👍🏽 👨\u200d👩\u200d👧 🇫🇷 🇯🇵 ∑ x² ≤ ∞ — … « » “ ”"
).split()
CODE = [
    "def f(x):\n    return x * 2\n",
    "for i in range(10):\n\tprint(i)\n",
    'if (a && b) { return "ok"; }',
    "x = {'k': [1, 2, 3]}  # note",
    "SELECT name FROM users WHERE id = 42;",
]


def training_texts(n: int = 300, seed: int = 0) -> list[str]:
    """`n` lines mixing English, other scripts, emoji, code and numbers, the same every call."""
    rng = random.Random(seed)
    lines = []
    for k in range(n):
        words = rng.choices(WORDS, k=rng.randint(3, 12))
        if k % 3 == 0:
            words += rng.choices(UNICODE, k=rng.randint(1, 4))
        if k % 5 == 0:
            words.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
            words.append(f"{rng.uniform(-100, 100):.3f}")
        if k % 7 == 0:
            words.append("don't we'll it's they've I'm you're she'd")
        rng.shuffle(words)
        line = " ".join(words)
        if k % 4 == 0:
            line += rng.choice(CODE)
        lines.append(line[:1].upper() + line[1:] + rng.choice([".", "!", "?", "\n", "  ", "\n\n"]))
    return lines


def _train(texts, vocab_size: int) -> dict:
    """A byte-level BPE trained on `texts`, as tokenizer.json's dict, <|endoftext|> at id 0."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return json.loads(tok.to_str())


def _eos_last(doc: dict) -> dict:
    """Renumber a trained file so that <|endoftext|> (id 0) has the last id, as in GPT-2."""
    vocab = doc["model"]["vocab"]
    assert vocab[EOS] == 0, "BpeTrainer is expected to put its special token first"
    last = len(vocab) - 1
    doc["model"]["vocab"] = {t: (last if t == EOS else i - 1) for t, i in vocab.items()}
    for entry in doc["added_tokens"]:
        entry["id"] = doc["model"]["vocab"][entry["content"]]
    return doc


def _template(eos_id: int) -> dict:
    start = {"SpecialToken": {"id": EOS, "type_id": 0}}
    return {
        "type": "TemplateProcessing",
        "single": [start, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [start, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {EOS: {"id": EOS, "ids": [eos_id], "tokens": [EOS]}},
    }  # fmt: skip


def write_tokenizer(folder, texts, vocab_size: int = 400, *, legacy: bool = False,
                    bos: bool = False) -> Path:  # fmt: skip
    """Train a byte-level BPE of `vocab_size` tokens on `texts` and write it into `folder`.

    <|endoftext|> is the last id (vocab size - 1). With `bos`, the folder says a start token
    (<|endoftext|>) is added: in tokenizer_config.json, and in tokenizer.json's template."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    doc = _eos_last(_train(texts, vocab_size))
    vocab = doc["model"]["vocab"]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}  # fmt: skip
    doc["post_processor"] = _template(vocab[EOS]) if bos else byte_level
    if legacy:
        (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        lines = [" ".join(m) if isinstance(m, list) else m for m in doc["model"]["merges"]]
        text = "#version: 0.2\n" + "".join(line + "\n" for line in lines)
        (folder / "merges.txt").write_text(text, encoding="utf-8")
    else:
        (folder / "tokenizer.json").write_text(
            json.dumps(doc, ensure_ascii=False), encoding="utf-8"
        )
    config = {"add_bos_token": bos, "bos_token": EOS, "eos_token": EOS, "unk_token": EOS,
              "model_max_length": 1024, "tokenizer_class": "GPT2Tokenizer"}  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def reference(folder) -> Tokenizer:
    """The `tokenizers` library's tokenizer for a folder `write_tokenizer` (or anyone) wrote."""
    folder = Path(folder)
    if (folder / "tokenizer.json").is_file():
        return Tokenizer.from_file(str(folder / "tokenizer.json"))
    # What transformers' GPT2TokenizerFast builds from vocab.json + merges.txt (its
    # convert_slow_tokenizer.GPT2Converter): the same BPE, <|endoftext|> added as special.
    bpe = models.BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt"))
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(EOS, special=True, normalized=False)])
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    if config.get("add_bos_token"):
        eos_id = tok.token_to_id(EOS)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{EOS} $A", pair=f"{EOS} $A $B:1", special_tokens=[(EOS, eos_id)]
        )
    return tok
