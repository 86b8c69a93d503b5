"""Write a model as a Hugging Face GPT-2 folder: `nanospec export-hf --model target --out DIR`.

The folder is what `transformers.AutoModelForCausalLM.from_pretrained(DIR)` and
`AutoTokenizer.from_pretrained(DIR)` load as they are, so the shipped models also run in
Hugging Face's assisted generation, in vLLM, or through llama.cpp's converters, without nanospec:

    config.json               model_type "gpt2", architectures ["GPT2LMHeadModel"], the sizes
    model.safetensors         float32, HF's names: `transformer.` + checkpoint.py's names
    tokenizer.json            a `tokenizers` byte-level BPE (bpe.py writes it), and
    tokenizer_config.json,    its settings: the shipped models read <|endoftext|> first, so
    special_tokens_map.json   the folder says a start token is added
    generation_config.json    <|endoftext|> ends a text

The weights are the shipped float16 values widened to float32, so the logits are the shipped
model's. The output layer is not written: GPT-2's `lm_head` is tied to `wte`, and transformers
ties it on load, as it does for its own gpt2 folder.

The folder appears whole or not at all: it is written beside `--out` under a temporary name,
then renamed.

What this file deliberately leaves out: float16 export (float32 keeps the logits exact),
vocab.json + merges.txt (tokenizer.json says the same and more), model cards.
"""

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from nanospec.errors import UserError


def hf_config(cfg, eos_id: int) -> dict:
    """config.json for a ModelConfig: transformers' GPT2Config with nanospec's sizes."""
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg.vocab_size,
        "n_positions": cfg.n_ctx,
        # GPT2Config's older name for the same size; GPT-2's own config.json carries both, and
        # llama.cpp's converter (convert_hf_to_gguf.py) reads this one
        "n_ctx": cfg.n_ctx,
        "n_embd": cfg.d_model,
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "n_inner": None,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": cfg.ln_eps,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "tie_word_embeddings": True,
        "use_cache": True,
        "bos_token_id": eos_id,
        "eos_token_id": eos_id,
        "dtype": "float32",
    }


def folder_files(cfg, params, tok, bos: bool) -> dict[str, bytes]:
    """Every file of the folder, by name: a model (cfg, params) and its tokenizer."""
    from safetensors.numpy import save

    from nanospec.checkpoint import state_to_tensors
    from nanospec.hf.bpe import tokenizer_files

    tensors = {f"transformer.{k}": v for k, v in state_to_tensors(params, np.float32).items()}
    eos = tok.eos_id
    generation = {"bos_token_id": eos, "eos_token_id": eos, "pad_token_id": eos}
    files = {
        "config.json": json.dumps(hf_config(cfg, eos), indent=2),
        "generation_config.json": json.dumps(generation, indent=2),
        **tokenizer_files(tok, bos=bos, model_max_length=cfg.n_ctx),
    }
    out = {name: text.encode("utf-8") + b"\n" for name, text in files.items()}
    out["model.safetensors"] = save(tensors, metadata={"format": "pt"})
    return out


def write_folder(out, files: dict[str, bytes]) -> Path:
    """`files` as the folder `out`, all or nothing: written under a temporary name beside it,
    then renamed. `out` must not exist, or be an empty folder."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} already exists and is not an empty folder; give a new one.")
    if not out.parent.is_dir():
        raise UserError(f"Cannot write {out}: the folder {out.parent} does not exist.")
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
            os.chmod(tmp / name, 0o644)
        os.chmod(tmp, 0o755)  # mkdtemp makes a private folder; a model folder is for everyone
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def export(ckpt_dir, model: str, out) -> Path:
    """The shipped `model` ("target" or "draft") as a Hugging Face GPT-2 folder at `out`."""
    from nanospec.checkpoint import load_model, load_tokenizer

    tok = load_tokenizer(ckpt_dir)
    cfg, _, params = load_model(ckpt_dir, model)
    return write_folder(out, folder_files(cfg, params, tok, bos=True))
