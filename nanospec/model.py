"""A GPT-2 style language model in Flax NNX, with an explicit KV cache.

Layout (exactly GPT-2's, so parameter names map 1:1 onto the GPT-2 family's tensors):
token embedding `wte` + learned position embedding `wpe`, then `n_layer` pre-LayerNorm blocks
(`ln_1` -> causal self-attention `attn.c_attn`/`attn.c_proj`, `ln_2` -> GELU MLP
`mlp.c_fc`/`mlp.c_proj`, each added to the residual stream), a final `ln_f`, and an output
layer tied to `wte`. See `checkpoint.py` for the name mapping.

One call shape serves every use:

    logits, hidden, cache = model(tokens, positions, cache)

- training / full recompute: `cache=None` (a fresh cache the size of the input is used);
- prefill: the (padded) prompt into an empty cache;
- decode: one token per row;
- verify: a block of γ+1 tokens in one pass (and a token tree, with `block_mask`).

`hidden` is the residual stream after block `layer` (default: the last block, before `ln_f`):
the features that Medusa, EAGLE and multi-token-prediction heads read.

What this file deliberately leaves out: dropout (our data is synthetic and plentiful), weight
decay masks (see training/lm.py), mixed precision, rotary embeddings (GPT-2 uses learned positions).
"""

import dataclasses
import math
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
from flax import nnx

from nanospec.cache import KVCache, attention_mask, init_cache, write_block
from nanospec.compat import ModuleList, get_value
from nanospec.machine import cores


@dataclass(frozen=True)
class ModelConfig:
    name: str = "target"  # a label for logs, traces and checkpoint files
    vocab_size: int = 2048  # BPE vocabulary (256 bytes + <|endoftext|> + merges)
    n_ctx: int = 256  # longest sequence: position embeddings (a run's cache: cache.capacity)
    n_layer: int = 6  # transformer blocks
    n_head: int = 6  # attention heads per block
    d_model: int = 384  # residual stream width; the MLP is 4x wider
    ln_eps: float = 1e-5  # LayerNorm epsilon, as in GPT-2

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @classmethod
    def target(cls, vocab_size: int = 2048) -> "ModelConfig":
        """The model whose distribution we must reproduce exactly (~11M parameters)."""
        return cls(name="target", vocab_size=vocab_size, n_layer=6, n_head=6, d_model=384)

    @classmethod
    def draft(cls, vocab_size: int = 2048) -> "ModelConfig":
        """A much cheaper guesser: learns the grammar, misses many facts (~0.7M parameters)."""
        return cls(name="draft", vocab_size=vocab_size, n_layer=2, n_head=4, d_model=128)

    @classmethod
    def tiny(cls, vocab_size: int = 64, n_ctx: int = 32) -> "ModelConfig":
        """For tests: compiles and runs in well under a second."""
        return cls(name="tiny", vocab_size=vocab_size, n_ctx=n_ctx, n_layer=2, n_head=2, d_model=32)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        return cls(**d)


SPLIT = 2  # one row's x @ W as this many products over slices of d_in (`one_row_dot`)


def one_row_dot(
    lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, out_sharding=None
):
    """x @ W as nnx.Linear asks for it (`lax.dot_general`), except for one row on a CPU of two
    or more cores: there a batch of SPLIT products, each row slice of W times the matching
    slice of x, then added.

    Why: XLA:CPU computes a one-row product (a matrix-vector product, every decode step's
    matmuls) with its own kernel on one core, and one core does not read the weights as fast
    as two. Written as a batch, the product is still XLA's own kernel (no library call in the
    compiled pass), which shares the batch between the cores. W's slices are a view of the
    same array (rows 0 … d_in/2, then the rest), not a copy. Measured with the shipped target
    on a 2-core EPYC, medians of three alternated bench runs: a one-token pass 0.75 of the
    time, autoregressive decoding 1.26× as fast; on one core the batch is slower, so it is not
    taken there (docs/results.md, "One row on two cores"). The partial sums are added in
    another order than one product adds them: a one-token pass's logits move by float32
    rounding, no more (tests/test_model.py). The tied output layer is an einsum, not a Linear:
    it stays one product."""
    (contract_l, contract_r), (batch_l, _) = dimension_numbers
    rows = math.prod(lhs.shape[:-1])
    if (
        rows != 1
        or out_sharding is not None  # flax 0.12 passes one (None unless sharded)
        or batch_l
        or tuple(contract_l) != (lhs.ndim - 1,)
        or tuple(contract_r) != (0,)
        or rhs.ndim != 2
        or rhs.shape[0] % SPLIT
        or jax.default_backend() != "cpu"
        or cores() < 2
    ):
        sharding = {} if out_sharding is None else {"out_sharding": out_sharding}  # jax ≥ 0.5
        return jax.lax.dot_general(
            lhs,
            rhs,
            dimension_numbers,
            precision,
            preferred_element_type=preferred_element_type,
            **sharding,
        )
    d_in, d_out = rhs.shape
    x = lhs.reshape(SPLIT, 1, d_in // SPLIT)  # the one row's slices, a batch of SPLIT
    w = rhs.reshape(SPLIT, d_in // SPLIT, d_out)  # W's row slices: a view, not a copy
    parts = jnp.einsum(
        "bti,bio->bto", x, w, precision=precision, preferred_element_type=preferred_element_type
    )
    return parts.sum(0).reshape(*lhs.shape[:-1], d_out)


def linear(rngs, d_in, d_out, std=0.02):
    return nnx.Linear(
        d_in, d_out, kernel_init=nnx.initializers.normal(std), dot_general=one_row_dot, rngs=rngs
    )


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.cfg = cfg
        self.c_attn = linear(rngs, cfg.d_model, 3 * cfg.d_model)  # q, k, v in one matmul
        # GPT-2 scales the init of residual projections by 1/sqrt(2 * n_layer).
        self.c_proj = linear(rngs, cfg.d_model, cfg.d_model, 0.02 / math.sqrt(2 * cfg.n_layer))

    def __call__(self, x, k_buf, v_buf, length, mask):
        B, T, C = x.shape
        H, Dh = self.cfg.n_head, self.cfg.head_dim
        q, k, v = jnp.split(self.c_attn(x), 3, axis=-1)  # each (B, T, C)
        # one (T, Dh) matrix per row and head, as the cache holds them (cache.py): (B·H, T, Dh)
        q, k, v = (a.reshape(B, T, H, Dh).swapaxes(1, 2).reshape(B * H, T, Dh) for a in (q, k, v))
        k_buf = write_block(k_buf, k, length)  # (B·H, S, Dh)
        v_buf = write_block(v_buf, v, length)
        scores = jnp.einsum("ntd,nsd->nts", q, k_buf) / math.sqrt(Dh)  # (B·H, T, S)
        scores = jnp.where(
            jnp.repeat(mask, H, axis=0), scores, -jnp.inf
        )  # each row's mask, H times
        weights = jax.nn.softmax(scores, axis=-1)
        y = jnp.einsum("nts,nsd->ntd", weights, v_buf).reshape(B, H, T, Dh)
        return self.c_proj(y.swapaxes(1, 2).reshape(B, T, C)), k_buf, v_buf


class MLP(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.c_fc = linear(rngs, cfg.d_model, 4 * cfg.d_model)
        self.c_proj = linear(rngs, 4 * cfg.d_model, cfg.d_model, 0.02 / math.sqrt(2 * cfg.n_layer))

    def __call__(self, x):
        return self.c_proj(jax.nn.gelu(self.c_fc(x), approximate=True))  # GPT-2's tanh GELU


class Block(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.ln_1 = nnx.LayerNorm(cfg.d_model, epsilon=cfg.ln_eps, rngs=rngs)
        self.attn = Attention(cfg, rngs)
        self.ln_2 = nnx.LayerNorm(cfg.d_model, epsilon=cfg.ln_eps, rngs=rngs)
        self.mlp = MLP(cfg, rngs)

    def __call__(self, x, k_buf, v_buf, length, mask):
        a, k_buf, v_buf = self.attn(self.ln_1(x), k_buf, v_buf, length, mask)
        x = x + a
        x = x + self.mlp(self.ln_2(x))
        return x, k_buf, v_buf


class GPT(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.cfg = cfg
        init = nnx.initializers.normal(0.02)
        self.wte = nnx.Embed(cfg.vocab_size, cfg.d_model, embedding_init=init, rngs=rngs)
        self.wpe = nnx.Embed(cfg.n_ctx, cfg.d_model, embedding_init=init, rngs=rngs)
        self.h = ModuleList([Block(cfg, rngs) for _ in range(cfg.n_layer)])
        self.ln_f = nnx.LayerNorm(cfg.d_model, epsilon=cfg.ln_eps, rngs=rngs)

    def empty_cache(self, batch: int, capacity: int | None = None) -> KVCache:
        c = self.cfg
        return init_cache(c.n_layer, c.n_head, c.head_dim, batch, capacity or c.n_ctx)

    def __call__(
        self, tokens, positions, cache: KVCache | None = None, *, block_mask=None, layer: int = -1
    ):
        """tokens, positions: (B, T) int. Returns logits (B, T, V), hidden (B, T, C), cache.

        The new tokens are appended at slots `cache.length ..`; the returned cache has
        `length + T`. Callers that over-write (a padded prompt, rejected drafts) roll it back.
        """
        B, T = tokens.shape
        if cache is None:
            cache = self.empty_cache(B, capacity=T)
        mask = attention_mask(cache.length, T, cache.capacity, block_mask)  # (B, T, S)
        # subtle: a block that runs past the context's end (cache.capacity's slack) carries
        # positions without an embedding; clamping keeps them finite, and no output at those
        # positions is ever used (a NaN there would leak into every query through 0 · NaN).
        positions = jnp.minimum(positions, self.cfg.n_ctx - 1)
        x = self.wte(tokens) + self.wpe(positions)  # (B, T, C)
        ks, vs, hidden = [], [], None
        for i, block in enumerate(self.h):
            x, k_buf, v_buf = block(x, cache.k[i], cache.v[i], cache.length, mask)
            ks.append(k_buf)
            vs.append(v_buf)
            if i == layer % self.cfg.n_layer:
                hidden = x
        # the output layer, tied to wte: wte · x reads wte as it lies (wte.attend's x · wteᵀ
        # made XLA:CPU transpose all 3 MB of it in every one-token pass)
        logits = jnp.einsum("vc,btc->btv", get_value(self.wte.embedding), self.ln_f(x))
        return logits, hidden, KVCache(tuple(ks), tuple(vs), cache.length + T)


@partial(jax.jit, static_argnames=("graphdef", "layer"))
def forward(graphdef, params, tokens, positions, cache=None, block_mask=None, layer: int = -1):
    """The model as a pure function of its parameters (what jitted loops call).

    Jitted itself, so that a call outside any loop (a test, a lesson, a probe) is one
    compiled program per shape, not one small program for every operation it runs; inside a
    jitted loop it is inlined like any other function."""
    return nnx.merge(graphdef, params)(tokens, positions, cache, block_mask=block_mask, layer=layer)


def count_params(params) -> int:
    return sum(x.size for x in jax.tree.leaves(params))
