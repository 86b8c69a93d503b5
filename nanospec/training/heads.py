"""Training the draft heads on the frozen target (`nanospec train heads`).

All three head families learn from the same thing — what the target itself would say — so one
training run serves them all: each step runs the frozen target ONCE over a batch of corpus
windows (hidden features h, laws p = softmax(logits)) and every head takes its own optimiser
step on its own loss. The losses are distillation (soft cross-entropy against the target's law,
which is what maximises acceptance, rather than the corpus's next token):

    Medusa  head k at position i      vs p at i+k      (the token k+1 ahead)
    EAGLE   f̂_{i+1} from (f_i, x_{i+1}) vs p at i+1, plus a smooth-L1 pull of f̂ towards the real
            feature f_{i+1}; a second, "test-time" pass feeds its own f̂ back in as the input
            feature (as drafting will), so it learns to read its own guesses
    MTP     module k at position i    vs p at i+k, chained through modules 1..k

Optimisers, schedule and batches follow training/lm.py (AdamW, warmup + cosine, clipping per head).
The target is never updated (its parameters are not differentiated).

What this file deliberately leaves out: feature noise schedules, per-head loss weights
(every head and depth counts equally), and caching features on disk.
"""

import dataclasses
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from nanospec.checkpoint import load_model, load_tokenizer
from nanospec.corpus import CorpusConfig, build_corpus
from nanospec.heads.modules import KINDS, HeadConfig, build, save_head
from nanospec.model import count_params, forward
from nanospec.training.lm import TrainConfig, get_batch, machine, make_optimizer, tokenize_docs

EAGLE_FEATURE_WEIGHT = 1.0  # smooth-L1 on features next to the (soft) cross-entropy, as EAGLE


@dataclass(frozen=True)
class HeadsTrainConfig:
    steps: int = 2000  # optimiser steps (each is one frozen-target pass + every head's update)
    batch_size: int = 8  # windows per step
    # Windows as long as the target's context: EAGLE has attention and a position table, and
    # trained on 128-token windows it met positions 128-255 only when drafting (untrained
    # position rows, longer attention spans); its tokens per round on the repetitive
    # workload, whose long prompts draft mostly past 128, were 12-24% lower (README).
    seq_len: int = 256  # tokens per window (the target's n_ctx)
    lr: float = 2e-3  # peak learning rate (every head)
    depth: int = 4  # Medusa heads and MTP modules
    draft_vocab_min_count: int = 1  # heads draft only tokens seen this often in training (0: all)
    eval_every: int = 200  # validation losses every this many steps
    seed: int = 0

    def optimizer_config(self) -> TrainConfig:
        return TrainConfig(
            steps=self.steps,
            batch_size=self.batch_size,
            seq_len=self.seq_len,
            lr=self.lr,
            warmup=min(100, self.steps // 4),
            seed=self.seed,
        )


def _soft_ce(logits, p):
    return optax.softmax_cross_entropy(logits, p).mean()


def medusa_loss(heads, target, f, p):
    """f (B, T, C) normalised features, p (B, T, V) target laws."""
    K, T = len(heads.res), f.shape[1]
    feats = heads(f)  # (B, T, K, C)
    return (
        sum(_soft_ce(target.wte.attend(feats[:, : T - k - 1, k]), p[:, k + 1 :]) for k in range(K))
        / K
    )


def eagle_loss(head, target, f, x, p):
    B, T, _ = f.shape
    emb = target.wte(x)  # (B, T, C)
    pos = jnp.broadcast_to(jnp.arange(T - 1), (B, T - 1))
    out1, _ = head(f[:, :-1], emb[:, 1:], pos)  # f̂_{i+1} for i = 0..T-2
    loss1 = _soft_ce(target.wte.attend(out1), p[:, 1:])
    loss1 += EAGLE_FEATURE_WEIGHT * optax.huber_loss(out1, f[:, 1:]).mean()
    # "Test-time" pass: pair i now carries the head's own f̂_i instead of the real f_i.
    out2, _ = head(out1[:, :-1], emb[:, 2:], pos[:, 1:])  # f̂'_{i+1} for i = 1..T-2
    loss2 = _soft_ce(target.wte.attend(out2), p[:, 2:])
    loss2 += EAGLE_FEATURE_WEIGHT * optax.huber_loss(out2, f[:, 2:]).mean()
    return (loss1 + loss2) / 2


def mtp_loss(heads, target, h, x, p):
    """h (B, T, C) raw target hidden; module k (1-based) at i reads token i+k, predicts p at i+k."""
    T, total = h.shape[1], 0.0
    emb = target.wte(x)
    for k, module in enumerate(heads.layers, start=1):
        h, out = module(h[:, : T - k], emb[:, k:])  # (B, T-k, C)
        total += _soft_ce(target.wte.attend(out), p[:, k:])
    return total / len(heads.layers)


def target_view(tgraph, tparams, x):
    """The frozen target over a batch: raw hidden h, normalised f = ln_f(h), laws p."""
    positions = jnp.broadcast_to(jnp.arange(x.shape[1]), x.shape)
    logits, h, _ = forward(tgraph, tparams, x, positions)
    target = nnx.merge(tgraph, tparams)
    h = jax.lax.stop_gradient(h)
    return target, h, target.ln_f(h), jax.nn.softmax(jax.lax.stop_gradient(logits), axis=-1)


def losses(graphdefs, params, tgraph, tparams, x):
    """{kind: loss} for every head in `params`, from one frozen target pass."""
    target, h, f, p = target_view(tgraph, tparams, x)
    heads = {k: nnx.merge(graphdefs[k], params[k]) for k in params}
    loss = {
        "medusa": lambda m: medusa_loss(m, target, f, p),
        "eagle": lambda m: eagle_loss(m, target, f, x, p),
        "mtp": lambda m: mtp_loss(m, target, h, x, p),
    }
    return {k: loss[k](heads[k]) for k in heads}


def corpus_vocabulary(ids: np.ndarray, vocab_size: int, min_count: int = 1) -> tuple:
    """The token ids seen at least `min_count` times in `ids`, sorted; () for min_count 0.

    This is a draft vocabulary in the manner of FR-Spec (Zhao et al., 2025), which drafts among
    frequent tokens only, to shrink the output layer each draft step reads. Here the training
    corpus uses 1,398 of the tokenizer's 2,048 ids (the rest are BPE merges that only occur
    inside longer tokens), so the cut is free: measured on the benchmark workloads, no head
    accepts less. FR-Spec's top-1,024 cut was measured too: it saved a little more draft time
    but EAGLE's tokens per round fell by up to 7% (on code) — not worth it.
    """
    if min_count == 0:
        return ()
    counts = np.bincount(ids, minlength=vocab_size)
    return tuple(int(t) for t in np.flatnonzero(counts >= min_count))


def train_heads(
    ckpt_dir: str | Path,
    hc_train: HeadsTrainConfig = HeadsTrainConfig(),
    corpus: CorpusConfig = CorpusConfig(),
    command: str = "",
    quiet: bool = False,
    evaluate=None,
    target: str = "target",
    kinds=KINDS,
) -> dict:
    """Train Medusa, EAGLE and MTP heads (or some of them: `kinds`) on the shipped target;
    save them next to it. A head's result does not depend on which others train beside it
    (same init, same batches, its own loss and optimiser).

    `evaluate(kind) -> dict` (optional) measures each saved head's acceptance for MANIFEST.
    """
    ckpt_dir = Path(ckpt_dir)
    tok = load_tokenizer(ckpt_dir)
    tcfg, tgraph, tparams = load_model(ckpt_dir, target)
    train_docs, val_docs = build_corpus(corpus)
    train_ids, val_ids = tokenize_docs(tok, train_docs), tokenize_docs(tok, val_docs)
    tc = hc_train.optimizer_config()

    kinds = tuple(kinds)
    vocab = corpus_vocabulary(train_ids, tcfg.vocab_size, hc_train.draft_vocab_min_count)
    configs = {
        k: dataclasses.replace(HeadConfig.for_target(k, tcfg, hc_train.depth), draft_vocab=vocab)
        for k in kinds
    }
    graphdefs, params = {}, {}
    for k in kinds:
        graphdefs[k], params[k] = nnx.split(build(configs[k], hc_train.seed))
    opt = make_optimizer(tc)  # the same transformation, one state per head: clipping per head
    train_step, validate = compile_head_steps(graphdefs, tgraph, tparams, opt, kinds, val_ids, tc)
    params, log, wall = _run_steps(
        hc_train,
        tc,
        kinds,
        train_ids,
        train_step,
        validate,
        params,
        {k: opt.init(params[k]) for k in kinds},
        quiet,
    )

    infos = {}
    for k in kinds:
        info = head_info(
            k, configs[k], params[k], vocab, log, wall, hc_train, corpus, kinds, command
        )
        save_head(ckpt_dir, configs[k], params[k], info)
        infos[k] = info
    if evaluate is not None:
        for k in kinds:
            infos[k]["acceptance_on_validation"] = evaluate(k)
            save_head(ckpt_dir, configs[k], params[k], infos[k])
    return infos


def compile_head_steps(
    graphdefs: dict,
    tgraph,
    tparams,
    opt: optax.GradientTransformation,
    kinds: tuple,
    val_ids: np.ndarray,
    tc: TrainConfig,
):
    """(train_step, validate): one jitted step of every head's optimiser on its own loss, from
    one frozen target pass; and every head's mean validation loss over 8 fixed batches."""

    @jax.jit
    def train_step(params, opt_states, x):
        def total(params):
            ls = losses(graphdefs, params, tgraph, tparams, x)
            return sum(ls.values()), ls

        grads, ls = jax.grad(total, has_aux=True)(params)
        new_params, new_states = {}, {}
        for k in kinds:  # independent losses: each head's gradient is only its own loss's
            updates, new_states[k] = opt.update(grads[k], opt_states[k], params[k])
            new_params[k] = optax.apply_updates(params[k], updates)
        return new_params, new_states, ls

    eval_losses = jax.jit(lambda params, x: losses(graphdefs, params, tgraph, tparams, x))

    def validate(params) -> dict:
        per = [
            eval_losses(params, get_batch(val_ids, tc.batch_size, tc.seq_len, 10**6, i)[0])
            for i in range(8)
        ]
        return {k: float(np.mean([d[k] for d in per])) for k in kinds}

    return train_step, validate


def _run_steps(
    hc_train: HeadsTrainConfig,
    tc: TrainConfig,
    kinds: tuple,
    train_ids: np.ndarray,
    train_step,
    validate,
    params: dict,
    opt_states: dict,
    quiet: bool,
):
    """Every step, validating (and printing a line, unless quiet) every hc_train.eval_every:
    (params, log of validation losses, wall seconds)."""
    log = {"val": [], "wall_s": 0.0}
    t0 = time.perf_counter()
    recent = []
    for step in range(1, tc.steps + 1):
        x, _ = get_batch(train_ids, tc.batch_size, tc.seq_len, tc.seed + 1, step)
        params, opt_states, ls = train_step(params, opt_states, x)
        recent.append({k: float(v) for k, v in ls.items()})
        if step % hc_train.eval_every == 0 or step == tc.steps:
            log["wall_s"] = time.perf_counter() - t0
            val = validate(params)
            log["val"].append([step, val])
            if not quiet:
                train_avg = {k: np.mean([r[k] for r in recent[-50:]]) for k in kinds}
                print(
                    f"step {step}/{tc.steps} ({log['wall_s']:.0f}s): "
                    + ", ".join(f"{k} train {train_avg[k]:.3f} val {val[k]:.3f}" for k in kinds),
                    flush=True,
                )
    return params, log, time.perf_counter() - t0


def head_info(
    kind: str,
    config: HeadConfig,
    params,
    vocab: tuple,
    log: dict,
    wall: float,
    hc_train: HeadsTrainConfig,
    corpus: CorpusConfig,
    kinds: tuple,
    command: str,
) -> dict:
    """What MANIFEST records about one trained head: config, size, recipe, losses, provenance."""
    config = {
        **asdict(config),
        "draft_vocab": f"{len(vocab)} ids, those seen in the "
        "training corpus (the list is in the file's metadata)"
        if vocab
        else "all",
    }
    return {
        "kind": kind,
        "config": config,
        "params": count_params(params),
        "reuses_from_target": "wte (embedding and tied output layer), ln_f",
        "train": asdict(hc_train),
        "corpus": asdict(corpus),
        "objective": "distillation: soft cross-entropy against the frozen target's law"
        + (", + smooth-L1 feature regression, 2-pass test-time input" if kind == "eagle" else ""),
        "final_val_loss": log["val"][-1][1][kind],
        "val_loss_curve": [[s, v[kind]] for s, v in log["val"]],
        "wall_seconds": round(wall, 1),
        "trained_together_with": list(kinds),
        "command": command,
        "machine": machine(),
    }


def acceptance_probe(
    ckpt_dir: str | Path, method: str, gamma: int = 4, n_prompts: int = 8, new_tokens: int = 48
) -> dict:
    """Greedy acceptance of one drafter on fresh (never trained on) facts prompts, for MANIFEST."""
    from nanospec.decode import Bundle, needs
    from nanospec.generate import pad_prompts
    from nanospec.measure.workloads import workload_prompts
    from nanospec.sampling import GREEDY
    from nanospec.speculative import Speculator
    from nanospec.trace import metrics

    bundle = Bundle.load(ckpt_dir, needs(method))
    tcfg, tgraph, tparams = bundle.models["target"]
    prompts = workload_prompts("facts", n_prompts, seed=1)
    tokens, lengths = pad_prompts([bundle.tok.encode_prompt(p) for p in prompts], tcfg.n_ctx)
    drafter, dparams = bundle.drafter(method)
    spec = Speculator(graphdef=tgraph, cfg=tcfg, drafter=drafter, gamma=gamma, eos_id=-1)
    state, stats = spec.run(
        tparams, dparams, tokens, lengths, jax.random.key(0), GREEDY, new_tokens
    )
    m = metrics(*stats.counters(state))
    return {
        "workload": "facts (bench seed 1: fresh documents)",
        "prompts": n_prompts,
        "new_tokens_per_prompt": new_tokens,
        "gamma": gamma,
        "temperature": 0,
        "acceptance_rate": round(m["acceptance_rate"], 4),
        "mean_acceptance_length": round(m["mean_acceptance_length"], 4),
    }
