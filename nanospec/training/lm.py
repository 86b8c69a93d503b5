"""Training the shipped models from scratch with optax (`nanospec train ...`).

Recipe (nanoGPT's, scaled down): AdamW (β = 0.9, 0.95; weight decay on matrices only), linear
warmup then cosine decay to 10% of the peak learning rate, gradient clipping at global norm 1,
random 256-token windows of the tokenized corpus. The batch for step s depends only on
(seed, s), so a run resumed from its last checkpoint sees exactly the batches it would have seen:
training is deterministic under a seed, interrupted or not.

What this file deliberately leaves out: data parallelism, mixed precision, gradient
accumulation, dropout — none of them pay off for ~10M parameters on two CPU cores.
"""

import io
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from nanospec.checkpoint import record_file, save_model
from nanospec.corpus import CorpusConfig, build_corpus
from nanospec.errors import UserError
from nanospec.fileio import atomic_write
from nanospec.machine import cores
from nanospec.model import GPT, ModelConfig, count_params, forward
from nanospec.tokenizer import Tokenizer, tokenize_docs


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 2000  # optimiser steps
    batch_size: int = 8  # sequences per step
    seq_len: int = 256  # tokens per sequence (at most the model's n_ctx)
    lr: float = 1e-3  # peak learning rate
    warmup: int = 200  # linear warmup steps
    weight_decay: float = 0.1  # AdamW decay, applied to 2-D weights only
    grad_clip: float = 1.0  # clip the global gradient norm
    eval_every: int = 250  # validation loss every this many steps
    eval_batches: int = 8  # validation batches per evaluation
    ckpt_every: int = 250  # save a resumable training state every this many steps
    seed: int = 0  # parameter init and batch order

    @classmethod
    def preset(cls, name: str) -> "TrainConfig":
        """The exact recipes of the shipped checkpoints (see checkpoints/MANIFEST)."""
        presets = {
            "target": cls(steps=2600, batch_size=8, lr=1e-3),
            "draft": cls(steps=3000, batch_size=8, lr=2e-3),
            "tiny": cls(
                steps=60,
                batch_size=4,
                seq_len=32,
                lr=3e-3,
                warmup=10,
                eval_every=30,
                eval_batches=2,
                ckpt_every=30,
            ),
        }
        if name not in presets:
            raise UserError(f"Unknown model preset {name!r}; choose one of {sorted(presets)}.")
        return presets[name]


def model_config(name: str, vocab_size: int) -> ModelConfig:
    makers = {
        "target": ModelConfig.target,
        "draft": ModelConfig.draft,
        "tiny": lambda v: ModelConfig.tiny(vocab_size=v),
    }
    if name not in makers:
        raise UserError(f"Unknown model preset {name!r}; choose one of {sorted(makers)}.")
    return makers[name](vocab_size)


def get_batch(data: np.ndarray, batch_size: int, seq_len: int, seed: int, step: int):
    """Random windows; inputs x and next-token targets y, both (B, T). Depends on (seed, step)."""
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(data) - seq_len - 1, size=batch_size)
    x = np.stack([data[s : s + seq_len] for s in starts])  # (B, T)
    y = np.stack([data[s + 1 : s + seq_len + 1] for s in starts])  # (B, T)
    return jnp.asarray(x), jnp.asarray(y)


def loss_fn(graphdef, params, x, y):
    positions = jnp.broadcast_to(jnp.arange(x.shape[1]), x.shape)  # (B, T)
    logits, _, _ = forward(graphdef, params, x, positions)  # (B, T, V)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def make_optimizer(tc: TrainConfig) -> optax.GradientTransformation:
    warmup = min(tc.warmup, tc.steps // 2)  # short runs (tests, --steps) still decay
    schedule = optax.warmup_cosine_decay_schedule(0.0, tc.lr, warmup, tc.steps, tc.lr * 0.1)
    decay_mask = lambda params: jax.tree.map(lambda p: p.ndim >= 2, params)
    return optax.chain(
        optax.clip_by_global_norm(tc.grad_clip),
        optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=tc.weight_decay, mask=decay_mask),
    )


def _save_state(path: Path, step: int, params, opt_state, log: dict) -> None:
    leaves = jax.tree.leaves((params, opt_state))
    arrays = {f"leaf_{i}": np.asarray(x) for i, x in enumerate(leaves)}
    buf = io.BytesIO()
    np.savez(buf, step=step, log=json.dumps(log), **arrays)
    atomic_write(path, buf.getvalue())


def _load_state(path: Path, params, opt_state):
    with np.load(path) as z:
        treedef = jax.tree.structure((params, opt_state))
        leaves = [jnp.asarray(z[f"leaf_{i}"]) for i in range(treedef.num_leaves)]
        params, opt_state = jax.tree.unflatten(treedef, leaves)
        return int(z["step"]), params, opt_state, json.loads(str(z["log"]))


def train(
    model_name: str,
    ckpt_dir: str | Path,
    work_dir: str | Path,
    tc: TrainConfig,
    corpus: CorpusConfig = CorpusConfig(),
    command: str = "",
    resume: bool = True,
    quiet: bool = False,
) -> dict:
    """Train one model preset on the corpus and save it to `ckpt_dir/<name>.safetensors`."""
    ckpt_dir, work_dir = Path(ckpt_dir), Path(work_dir)
    tok = Tokenizer.load(ckpt_dir / "tokenizer.json")
    cfg = model_config(model_name, tok.vocab_size)
    if tc.seq_len > cfg.n_ctx:
        raise UserError(f"seq_len {tc.seq_len} exceeds the model's context of {cfg.n_ctx}.")
    train_docs, val_docs = build_corpus(corpus)
    train_ids, val_ids = tokenize_docs(tok, train_docs), tokenize_docs(tok, val_docs)

    graphdef, params = nnx.split(GPT(cfg, nnx.Rngs(tc.seed)))
    opt = make_optimizer(tc)
    opt_state = opt.init(params)
    state_path = work_dir / f"{cfg.name}.state.npz"
    step, log = 0, {"train_loss": [], "val_loss": [], "wall_s": 0.0}
    if resume and state_path.is_file():
        step, params, opt_state, log = _load_state(state_path, params, opt_state)
    train_step, validate = compile_steps(graphdef, opt, val_ids, tc)
    params = _run_steps(
        cfg.name,
        tc,
        train_ids,
        train_step,
        validate,
        state_path,
        quiet,
        step,
        params,
        opt_state,
        log,
    )

    info = {
        "config": cfg.to_dict(),
        "params": count_params(params),
        "train": asdict(tc),
        "corpus": asdict(corpus),
        "train_tokens_in_corpus": int(len(train_ids)),
        "tokens_seen": tc.steps * tc.batch_size * tc.seq_len,
        "wall_seconds": round(log["wall_s"], 1),
        "final_train_loss": log["train_loss"][-1][1],
        "final_val_loss": log["val_loss"][-1][1],
        "val_loss_curve": log["val_loss"],
        "command": command,
        "machine": machine(),
    }
    save_model(ckpt_dir, cfg, params, info)
    return info


def compile_steps(
    graphdef, opt: optax.GradientTransformation, val_ids: np.ndarray, tc: TrainConfig
):
    """(train_step, validate): one jitted optimiser step, and the mean validation loss over
    tc.eval_batches fixed batches."""

    @jax.jit
    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(lambda p: loss_fn(graphdef, p, x, y))(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    eval_loss = jax.jit(lambda p, x, y: loss_fn(graphdef, p, x, y))

    def validate(params) -> float:
        losses = [
            eval_loss(params, *get_batch(val_ids, tc.batch_size, tc.seq_len, 10**6, i))
            for i in range(tc.eval_batches)
        ]
        return float(np.mean(losses))

    return train_step, validate


def _progress_bar(name: str, quiet: bool) -> Progress:
    """Training's progress bar: steps, recent and validation loss, tokens per second, time left."""
    return Progress(
        TextColumn(f"[bold]{name}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn("loss {task.fields[loss]:.3f} val {task.fields[val]:.3f}"),
        TextColumn("{task.fields[tps]:,.0f} tok/s"),
        TimeRemainingColumn(),
        disable=quiet,
    )


def _run_steps(
    name: str,
    tc: TrainConfig,
    train_ids: np.ndarray,
    train_step,
    validate,
    state_path: Path,
    quiet: bool,
    step: int,
    params,
    opt_state,
    log: dict,
):
    """Train from `step` to tc.steps: validate and log every tc.eval_every steps, save the
    resumable state every tc.ckpt_every (and at the end). Returns the params; `log` fills in place."""
    tokens_per_step = tc.batch_size * tc.seq_len
    progress = _progress_bar(name, quiet)
    recent: list[float] = []
    with progress:
        task = progress.add_task(
            "train", total=tc.steps, completed=step, loss=float("nan"), val=float("nan"), tps=0.0
        )
        t_last = time.perf_counter()
        while step < tc.steps:
            x, y = get_batch(train_ids, tc.batch_size, tc.seq_len, tc.seed, step)
            params, opt_state, loss = train_step(params, opt_state, x, y)
            step += 1
            recent.append(float(loss))  # one host sync per step keeps the progress bar honest
            now = time.perf_counter()
            log["wall_s"] += now - t_last
            progress.update(
                task,
                completed=step,
                loss=np.mean(recent[-20:]),
                tps=tokens_per_step / max(now - t_last, 1e-9),
            )
            t_last = now
            if step % tc.eval_every == 0 or step == tc.steps:
                log["train_loss"].append([step, float(np.mean(recent[-50:]))])
                log["val_loss"].append([step, validate(params)])
                progress.update(task, val=log["val_loss"][-1][1])
                progress.console.print(  # a plain log line too, for runs piped to a file
                    f"step {step}: train loss {log['train_loss'][-1][1]:.3f}, "
                    f"val loss {log['val_loss'][-1][1]:.3f}, {log['wall_s']:.0f}s",
                    highlight=False,
                )
                t_last = time.perf_counter()  # validation time is not training time
            if step % tc.ckpt_every == 0 or step == tc.steps:
                _save_state(state_path, step, params, opt_state, log)
    return params


def train_tokenizer(
    ckpt_dir: str | Path,
    vocab_size: int = 2048,
    corpus: CorpusConfig = CorpusConfig(),
    command: str = "",
) -> Tokenizer:
    """Learn the shared BPE from the training split and save `ckpt_dir/tokenizer.json`."""
    t0 = time.perf_counter()
    train_docs, _ = build_corpus(corpus)
    tok = Tokenizer.train(train_docs, vocab_size)
    tok.save(Path(ckpt_dir) / "tokenizer.json")
    record_file(
        ckpt_dir,
        "tokenizer.json",
        {
            "vocab_size": tok.vocab_size,
            "corpus": asdict(corpus),
            "wall_seconds": round(time.perf_counter() - t0, 1),
            "command": command,
        },
    )
    return tok


def machine() -> str:
    """The machine a run trained on, as MANIFEST records it: "cpu, 2 cores"."""
    return f"{jax.devices()[0].platform}, {cores()} cores"
