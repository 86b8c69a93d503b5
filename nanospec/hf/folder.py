"""Read a Hugging Face GPT-2-family folder into the model nanospec already is.

The family: gpt2, distilgpt2, gpt2-medium/large/xl, or any model saved in that format.

A folder holds:

    config.json                       model_type "gpt2": sizes, gelu_new, layer_norm_epsilon
    model.safetensors                 or model.safetensors.index.json and its shards
    tokenizer.json                    or vocab.json + merges.txt (bpe.py reads both)
    tokenizer_config.json             optional: whether a start token is added

nanospec's model *is* GPT-2 (model.py), so reading one is renaming, not converting. HF names
carry a `transformer.` prefix (`transformer.h.0.attn.c_attn.weight` is our
`h.0.attn.c_attn.weight`); its Conv1D weights are (in, out), as Flax's kernels are, so nothing is
transposed. Three kinds of tensor are dropped: `lm_head.weight` (the output layer, tied to
`wte`: it must equal it), and `attn.bias` / `attn.masked_bias` (the causal mask, stored as a
buffer by older transformers; the cache builds its own).

Everything is checked before the model is built: a missing file, a config that is not GPT-2's,
a tensor of the wrong shape or a truncated file is one UserError sentence, and nothing is
half-loaded.

What this file deliberately leaves out: `pytorch_model.bin` (a pickle: it can run code when
loaded; `transformers` converts it with `save_pretrained(dir, safe_serialization=True)`), other
architectures (Llama's rotary positions and RMSNorm are a different model), untied output layers.
"""

import json
from pathlib import Path

import numpy as np

from nanospec.errors import UserError
from nanospec.model import ModelConfig

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
# GPT-2's GELU is the tanh approximation; HF names it both ways.
GELUS = ("gelu_new", "gelu_pytorch_tanh")
MASK_BUFFERS = (".attn.bias", ".attn.masked_bias")


def is_folder(path) -> bool:
    """Whether `path` looks like a Hugging Face model folder (it holds a config.json)."""
    return (Path(path) / CONFIG).is_file()


def read_json(path: Path) -> dict:
    if not path.is_file():
        raise UserError(f"{path.parent} has no {path.name}; a GPT-2 folder needs one.")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise UserError(f"{path} is not valid JSON.") from None
    if not isinstance(doc, dict):
        raise UserError(f"{path} is not a JSON object.")
    return doc


def read_config(folder: Path, name: str = "target") -> ModelConfig:
    """config.json -> ModelConfig, refusing anything nanospec's GPT-2 would compute differently."""
    path = folder / CONFIG
    c = read_json(path)
    if c.get("model_type") != "gpt2":
        raise UserError(
            f"{path} describes a {c.get('model_type')!r} model; nanospec runs the GPT-2 family "
            '(model_type "gpt2").'
        )
    sizes = {}
    for key, *old in (("vocab_size",), ("n_positions", "n_ctx"), ("n_layer",), ("n_head",),
                      ("n_embd",)):  # fmt: skip
        value = c.get(key, c.get(old[0]) if old else None)
        if type(value) is not int or value < 1:
            raise UserError(f"{path}: {key} must be a positive whole number, got {value!r}.")
        sizes[key] = value
    refusals = [
        (
            c.get("activation_function", "gelu_new") not in GELUS,
            "an activation other than gelu_new",
        ),
        (not c.get("tie_word_embeddings", True), "an output layer not tied to the embedding"),
        (c.get("n_inner") not in (None, 4 * sizes["n_embd"]), "an MLP not 4 times the width"),
        (not c.get("scale_attn_weights", True), "unscaled attention"),
        (c.get("scale_attn_by_inverse_layer_idx", False), "attention scaled by layer"),
        (sizes["n_embd"] % sizes["n_head"] != 0, "a width that the heads do not divide"),
    ]
    for refused, what in refusals:
        if refused:
            raise UserError(f"{path} asks for {what}, which nanospec's GPT-2 does not compute.")
    eps = c.get("layer_norm_epsilon", 1e-5)
    if not isinstance(eps, int | float) or not 0 < eps < 1:
        raise UserError(f"{path}: layer_norm_epsilon must be a small positive number, got {eps!r}.")
    return ModelConfig(
        name=name,
        vocab_size=sizes["vocab_size"],
        n_ctx=sizes["n_positions"],
        n_layer=sizes["n_layer"],
        n_head=sizes["n_head"],
        d_model=sizes["n_embd"],
        ln_eps=float(eps),
    )


def weight_files(folder: Path) -> list[Path]:
    """model.safetensors, or the shards model.safetensors.index.json names."""
    if (folder / WEIGHTS).is_file():
        return [folder / WEIGHTS]
    if not (folder / INDEX).is_file():
        pickled = any(folder.glob("pytorch_model*.bin"))
        also = " (nanospec does not read pytorch_model.bin: see docs/cli.md)" if pickled else ""
        raise UserError(f"{folder} has no {WEIGHTS} or {INDEX}{also}.")
    weight_map = read_json(folder / INDEX).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise UserError(f"{folder / INDEX} has no weight_map.")
    shards = sorted({str(f) for f in weight_map.values()})
    missing = [s for s in shards if not (folder / s).is_file() or "/" in s]
    if missing:
        raise UserError(f"{folder} is missing the shard {missing[0]} that {INDEX} names.")
    return [folder / s for s in shards]


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """One safetensors file as float32 numpy arrays (float16 and bfloat16 widened)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="flax") as f:
            return {k: np.asarray(f.get_tensor(k), dtype=np.float32) for k in f.keys()}
    except Exception as e:  # safetensors raises several kinds; all mean "not a valid file"
        raise UserError(
            f"{path} is not a readable safetensors file (truncated or corrupt: {type(e).__name__})."
        ) from None


def nanospec_tensors(tensors: dict[str, np.ndarray], where: Path) -> dict[str, np.ndarray]:
    """HF's names -> nanospec's (checkpoint.py's): the prefix off, the tied head and the mask
    buffers dropped."""
    out, head = {}, None
    for name, array in tensors.items():
        short = name.removeprefix("transformer.")
        if short == "lm_head.weight":
            head = array
        elif not short.endswith(MASK_BUFFERS):
            out[short] = array
    if head is not None:
        out.setdefault("wte.weight", head)  # a folder may keep the tied matrix under one name
        if head.shape != out["wte.weight"].shape or not np.array_equal(head, out["wte.weight"]):
            raise UserError(
                f"{where}: lm_head.weight differs from the token embedding; nanospec's GPT-2 "
                "ties them."
            )
    return out


def load_weights(folder: Path, cfg: ModelConfig):
    """(graphdef, params) of the GPT in `folder`, every name and shape checked first."""
    from flax import nnx

    from nanospec.checkpoint import load_tensors_into
    from nanospec.model import GPT

    tensors = {}
    for path in weight_files(folder):
        tensors.update(read_safetensors(path))
    graphdef, params = nnx.split(nnx.eval_shape(lambda: GPT(cfg, nnx.Rngs(0))))
    load_tensors_into(params, nanospec_tensors(tensors, folder), where=str(folder))
    return graphdef, params


def load_folder(folder, name: str = "target"):
    """(tokenizer, (cfg, graphdef, params)) of a GPT-2-family folder; `name` labels the model."""
    from nanospec.hf.bpe import GPT2Tokenizer

    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder} is not a folder; --{name} takes a Hugging Face model folder.")
    cfg = read_config(folder, name)
    tok = GPT2Tokenizer.load(folder)
    if tok.vocab_size != cfg.vocab_size:
        raise UserError(
            f"{folder}: the model has {cfg.vocab_size} token ids but its tokenizer has "
            f"{tok.vocab_size}."
        )
    graphdef, params = load_weights(folder, cfg)
    return tok, (cfg, graphdef, params)


def load_folders(ckpt_dir, names, target=None, draft=None, skip: bool = False):
    """(tokenizer, {name: (cfg, graphdef, params)}) for `names`, with the folders `target` and
    `draft` in place of the shipped models. The models a run pairs must share a tokenizer, so
    the shipped draft and heads go only with the shipped target: asked for beside a foreign
    target, they are refused in one sentence, or left out with `skip` (the demo's method
    switch then offers what can run)."""
    from nanospec.checkpoint import load_model, load_tokenizer
    from nanospec.heads.modules import KINDS, load_head
    from nanospec.hf.bpe import differs

    names = list(names)
    if target is not None:
        stuck = [n for n in names if n in KINDS or (n == "draft" and draft is None)]
        if stuck and not skip:
            raise UserError(
                f"The shipped {' and '.join(stuck)} read{'s' if len(stuck) == 1 else ''} "
                f"nanospec's own tokenizer, not {target}'s: "
                + (
                    "pass --draft FOLDER, a model that shares its tokenizer."
                    if stuck == ["draft"]
                    else "with --target, use ar or ngram, or draft or ssd with --draft FOLDER."
                )
            )
        names = [n for n in names if n not in stuck]
        tok, model = load_folder(target, "target")
        models = {"target": model}
        where = str(target)
    else:
        tok = load_tokenizer(ckpt_dir)
        models = {"target": load_model(ckpt_dir, "target")}
        models.update({n: load_head(ckpt_dir, n) for n in names if n in KINDS})
        where = "the shipped target"
    if "draft" in names:
        if draft is None:
            models["draft"] = load_model(ckpt_dir, "draft")
        else:
            draft_tok, models["draft"] = load_folder(draft, "draft")
            what = differs(tok, draft_tok)
            if what is not None:
                theirs = ", ".join(getattr(draft_tok, "files", ()))
                ours = ", ".join(getattr(tok, "files", ())) or "checkpoints/tokenizer.json"
                raise UserError(
                    f"{where} and {draft} do not share a tokenizer: they differ in {what} "
                    f"({ours} vs {theirs})."
                )
    return tok, models
