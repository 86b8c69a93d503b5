"""Draft heads that read the target's own features: Medusa, EAGLE and multi-token prediction.

A separate draft model re-reads the text with a small brain of its own. These heads instead sit
*on top of the target* and reuse what it already computed in the verify pass: its hidden
features, its token embedding and its output layer (frozen, shared — the heads add only a
few small matrices). Three designs, from least to most conditioning on the drafted tokens:

- **Medusa** (Cai et al., 2024): K independent heads on the last feature f_t = ln_f(h_t);
  head k is one residual block, f + SiLU(W_k f), read by the target's output layer, and
  predicts the token k+1 steps ahead. All K drafts come from ONE feature, in parallel — cheap,
  but head 3 cannot know what heads 1 and 2 guessed.
- **EAGLE** (Li et al., 2024): one transformer layer that runs autoregressively at the
  *feature* level. Its input at position i is [f_i ; embed(token i+1)] (fused by one linear
  layer); its output is the predicted next feature f̂_{i+1}, which the target's output layer
  turns into the law of token i+2. Drafting feeds f̂ and the sampled token back in. Accepted
  tokens are re-read with the target's *real* features, so errors do not accumulate.
- **MTP** (multi-token prediction, DeepSeek-V3 style): K sequential modules; module k combines
  the previous depth's representation with the embedding of the next token,
  proj([LN(h^{k-1}_i) ; LN(embed(token i+k))]), adds an MLP block, and predicts token i+k+1.
  Like EAGLE it conditions on the drafted tokens; unlike EAGLE each depth has its own weights
  and (here) no attention, so it needs no cache of its own.

Two choices keep a draft step cheap, since on a CPU its cost is mostly reading weights: EAGLE's
layer and the MTP modules are half the target's width (projected back into the target's feature
space; MTP's matter most, as each depth's weights are read cold every round), and every
head can draft from a *draft vocabulary* (`HeadConfig.draft_vocab`, FR-Spec style): only those
rows of the output layer are read, and the target, through the residual, still emits the rest.

`HeadConfig` travels in the checkpoint's metadata; weights are saved like the models
(float16 safetensors, GPT-2 style names, sha256 in MANIFEST).

What this file deliberately leaves out: Medusa's separate per-head output layers (ours share
the target's), EAGLE's dynamic draft trees (trees/tree.py verifies static trees), training (see
training/heads.py) and the drafting loops (see heads/drafters.py).
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

from nanospec.cache import KVCache, attention_mask, init_cache
from nanospec.checkpoint import load_tensors_into, read_weights, verify_file, write_weights
from nanospec.compat import ModuleList
from nanospec.errors import UserError
from nanospec.model import Block, ModelConfig, linear

KINDS = ("medusa", "eagle", "mtp")


@dataclass(frozen=True)
class HeadConfig:
    kind: str  # "medusa", "eagle" or "mtp"
    d_model: int = 384  # the target's feature width (heads live in its space)
    vocab_size: int = 2048  # the target's vocabulary
    n_ctx: int = 256  # the target's context (EAGLE's position table and cache)
    depth: int = 4  # Medusa heads / MTP modules: the most tokens one round can draft
    n_head: int = 6  # EAGLE's attention heads
    mlp_mult: int = 4  # MTP modules' MLP width over their width (EAGLE's block is GPT-2's: 4)
    width: int = 0  # EAGLE's layer / MTP modules' own width (0: d_model); projected back to d_model
    draft_vocab: tuple = ()  # the head drafts among these token ids only (FR-Spec); (): all

    def __post_init__(self):  # from JSON metadata the vocabulary arrives as a list
        object.__setattr__(self, "draft_vocab", tuple(int(t) for t in self.draft_vocab))

    @property
    def name(self) -> str:
        return self.kind

    @classmethod
    def for_target(cls, kind: str, target: ModelConfig, depth: int = 4) -> "HeadConfig":
        if kind not in KINDS:
            raise UserError(f"Unknown head kind {kind!r}; choose one of {', '.join(KINDS)}.")
        # EAGLE's layer and the MTP modules are half the target's width: a draft step's cost
        # on a CPU is mostly reading weights. At full width EAGLE (2.2M parameters) cost
        # 0.17-0.29 of a target step in place, too dear for its acceptance to pay; MTP is
        # worse off, as each depth has its own weights, read from memory afresh every round
        # (the target's pass in between evicts them): at full width (3.6M parameters, MLPs
        # 2x) a module step cost 0.137 of a target step, at half width (1.5M) 0.105, for
        # 2-5% fewer tokens per round (README, "Every way to draft").
        return cls(
            kind,
            target.d_model,
            target.vocab_size,
            target.n_ctx,
            depth,
            target.n_head,
            mlp_mult=2 if kind == "mtp" else 4,
            width=target.d_model // 2 if kind in ("eagle", "mtp") else 0,
        )

    def block_config(self) -> ModelConfig:
        """EAGLE's one layer is a GPT-2 block, `width` wide (64-dimensional attention heads)."""
        width = self.width or self.d_model
        n_head = self.n_head if width == self.d_model else max(1, width // 64)
        return ModelConfig(
            name="eagle",
            vocab_size=self.vocab_size,
            n_ctx=self.n_ctx,
            n_layer=1,
            n_head=n_head,
            d_model=width,
        )


class MedusaHeads(nnx.Module):
    def __init__(self, hc: HeadConfig, rngs: nnx.Rngs):
        # Zero init: every head starts as the target's own next-token head, then learns to
        # look further ahead (as Medusa does).
        self.res = ModuleList(
            [
                nnx.Linear(hc.d_model, hc.d_model, kernel_init=nnx.initializers.zeros, rngs=rngs)
                for _ in range(hc.depth)
            ]
        )

    def __call__(self, f):
        """f (..., C) normalised target feature -> (..., K, C), one feature per head."""
        return jnp.stack([f + jax.nn.silu(lin(f)) for lin in self.res], axis=-2)


class EagleHead(nnx.Module):
    def __init__(self, hc: HeadConfig, rngs: nnx.Rngs):
        bc = hc.block_config()
        self.cfg = bc
        W = bc.d_model
        self.fc = linear(rngs, 2 * hc.d_model, W)  # [feature ; token embedding] -> W
        self.wpe = nnx.Embed(hc.n_ctx, W, embedding_init=nnx.initializers.normal(0.02), rngs=rngs)
        self.block = Block(bc, rngs)
        # A narrower layer projects its output back into the target's feature space.
        self.out = linear(rngs, W, hc.d_model) if W != hc.d_model else None

    def empty_cache(self, batch: int, capacity: int | None = None) -> KVCache:
        return init_cache(1, self.cfg.n_head, self.cfg.head_dim, batch, capacity or self.cfg.n_ctx)

    def __call__(self, f, emb, positions, cache: KVCache | None = None, block_mask=None):
        """f, emb (B, T, C): feature at position i and embedding of token i+1 -> f̂_{i+1}.

        Same cache contract as the model: the T new pairs go to slots `length ..`; a tree of
        pairs passes its ancestor matrix as `block_mask`.
        """
        x, cache = self.trunk(f, emb, positions, cache, block_mask)
        return self.project(x), cache

    def trunk(self, f, emb, positions, cache: KVCache | None = None, block_mask=None):
        """The layer alone: (B, T, width) before the projection back to the target's space."""
        return self.layer(self.fc(jnp.concatenate([f, emb], axis=-1)), positions, cache, block_mask)

    def layer(self, x, positions, cache: KVCache | None = None, block_mask=None):
        """From the fused input x = fc([f ; emb]) (B, T, width) on: positions, the block."""
        B, T, _ = x.shape
        if cache is None:
            cache = init_cache(1, self.cfg.n_head, self.cfg.head_dim, B, T)
        mask = attention_mask(cache.length, T, cache.capacity, block_mask)  # (B, T, S)
        positions = jnp.minimum(positions, self.cfg.n_ctx - 1)  # past the end: padding (model.py)
        x, k, v = self.block(x + self.wpe(positions), cache.k[0], cache.v[0], cache.length, mask)
        return x, KVCache((k,), (v,), cache.length + T)

    def project(self, x):
        """(..., width) -> the predicted feature f̂ (..., C) in the target's space."""
        return self.out(x) if self.out is not None else x


class MTPModule(nnx.Module):
    def __init__(self, hc: HeadConfig, rngs: nnx.Rngs):
        C, W = hc.d_model, hc.width or hc.d_model
        self.ln_h = nnx.LayerNorm(C, rngs=rngs)
        self.ln_e = nnx.LayerNorm(C, rngs=rngs)
        self.proj = linear(rngs, 2 * C, W)
        self.ln_2 = nnx.LayerNorm(W, rngs=rngs)
        self.c_fc = linear(rngs, W, hc.mlp_mult * W)
        self.c_proj = linear(rngs, hc.mlp_mult * W, W)
        # A narrower module projects back into the target's space (as EAGLE's layer does).
        self.out = linear(rngs, W, C) if W != C else None
        self.ln_out = nnx.LayerNorm(C, rngs=rngs)  # before the shared output layer

    def __call__(self, h, emb):
        """h (..., C) previous depth's representation, emb (..., C) -> (h^k, feature for logits)."""
        x = self.proj(jnp.concatenate([self.ln_h(h), self.ln_e(emb)], axis=-1))
        x = x + self.c_proj(jax.nn.gelu(self.c_fc(self.ln_2(x)), approximate=True))
        if self.out is not None:
            x = self.out(x)
        return x, self.ln_out(x)


class MTPHeads(nnx.Module):
    def __init__(self, hc: HeadConfig, rngs: nnx.Rngs):
        self.layers = ModuleList([MTPModule(hc, rngs) for _ in range(hc.depth)])


def build(hc: HeadConfig, seed: int = 0) -> nnx.Module:
    return {"medusa": MedusaHeads, "eagle": EagleHead, "mtp": MTPHeads}[hc.kind](hc, nnx.Rngs(seed))


# ------------------------------------------------------------------ checkpoints


def save_head(ckpt_dir: str | Path, hc: HeadConfig, params, info: dict | None = None) -> Path:
    """Write `<kind>.safetensors` atomically and record it (and how it was made) in MANIFEST."""
    return write_weights(
        ckpt_dir, f"{hc.name}.safetensors", params, {"head": json.dumps(asdict(hc))}, info
    )


def load_head(ckpt_dir: str | Path, kind: str):
    """Load `<kind>.safetensors` -> (HeadConfig, graphdef, params), sha256-checked."""
    path = verify_file(ckpt_dir, f"{kind}.safetensors")
    tensors, fields = read_weights(path, "head", what="nanospec head checkpoint")
    try:
        hc = HeadConfig(**fields)
    except Exception as e:
        raise UserError(
            f"{path} is not a valid nanospec head checkpoint ({type(e).__name__})."
        ) from None
    graphdef, params = nnx.split(
        nnx.eval_shape(lambda: build(hc))
    )  # shapes only: see load_model_file
    load_tensors_into(params, tensors, where=str(path))
    return hc, graphdef, params
