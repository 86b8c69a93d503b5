"""Trace events: what happened in every round, as JSON lines — and the metrics drawn from them.

The loop returns fixed-shape arrays (`StepTrace`); `events_from_step` turns them into events on
the host, after the fact — never by callbacks from inside jit. Schema 2, one JSON object per line,
each with "schema", "type", and for per-row events "round" (0-based) and "row":

  run_start  prompt, prompt_tokens, method, gamma, temperature, top_k, top_p, seed, target, drafter
  compile    ms: seconds spent compiling (×1000) before round 0 — never inside a round's times
  draft      index (1..γ), position, token, text, q = q(x), q_top = [[id, text, prob], ...]
  verify     p = [p(x₁) .. p(x_γ)], p_top = one top list per position 1..γ+1
  accept     index, position, token, text, p, q, u, ratio        (u < p/q)
  reject     index, position, token, text, p, q, u, ratio        (u ≥ p/q: the first rejection)
  discard    index, position, token, text                        (after a rejection, never judged)
  resample   position, token, text, residual, p, q, top: the token's probability under the
             residual norm(max(0, p − q)) it was drawn from, under the target (p) and the draft
             (q) at that position, and the residual's most likely tokens
  bonus      position, token, text, p, top (of p_{γ+1}, the law it was drawn from)
  round_end  accepted, drafted, emitted (ids), emitted_text, length, draft_ms, verify_ms

  run_end    summary (= summarize(all earlier events))

A token-tree run's run_start also has `tree` (each node's parent) and `siblings`, and its
rounds have one `tree` event in place of draft/verify/accept/reject/discard (trees/trace.py).

An SSD round (ssd/loop.py) starts with one more event per row, before its drafts:

  ssd        hit (the drafts were ready in the cache), source ("cache" or "backup"),
             outcome [k, t*] (how the round ended), cache = the branches pre-drafted for the
             NEXT round, [[k, t*, text], ...]

and its run_start also has `fanout` (F_0..F_γ), `saguaro_c` and `backup` ("neural" / "fast").

A round may draft fewer than γ: prompt lookup with no match drafts none, nor does any round
that has no room left before the context's end, and that round is just verify (over the one
position), bonus (drawn from p₁) and round_end with drafted = 0. An autoregressive run
(method "ar", gamma 0) is made of such rounds only: one per token.

Schema 2 (this one) labels the resampled token's numbers; schema 1 called the residual's
probability `p`. `read_jsonl` reads both, renaming schema 1's as it reads.

`summarize(events)` computes every metric once, with the names serving engines use:
draft acceptance rate = accepted / drafted; mean acceptance length = 1 + accepted / rounds
(it counts the residual-or-bonus token); per-position acceptance rate (position i accepted, over
all rounds); acceptance histogram (rounds that accepted 0..γ drafts); tokens per target call
(generated tokens / verify passes; autoregressive decoding scores exactly 1).
"""

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from nanospec.errors import UserError
from nanospec.fileio import atomic_write

SCHEMA = 2
READS = (1, 2)  # schemas read_jsonl accepts


def top_list(tok, ids, probs) -> list:
    return [
        [int(i), tok.token_str(int(i)), round(float(p), 6)] for i, p in zip(ids, probs) if p > 0
    ]


def run_start(
    tok,
    prompt: str,
    prompt_ids: list[int],
    method: str,
    gamma: int,
    temperature: float,
    top_k: int,
    top_p: float,
    seed: int,
    target: str,
    drafter: str,
    batch: int = 1,
) -> dict:
    return {
        "schema": SCHEMA,
        "type": "run_start",
        "prompt": prompt,
        "prompt_tokens": prompt_ids,
        "prompt_token_text": [tok.token_str(t) for t in prompt_ids],
        "method": method,
        "gamma": gamma,
        "temperature": temperature,
        "top_k": top_k,
        "top_p": top_p,
        "seed": seed,
        "target": target,
        "drafter": drafter,
        "batch": batch,
    }


def events_from_step(trace, tok, round_idx: int, timings: dict | None = None) -> list[dict]:
    """One round's StepTrace (device arrays) -> its events, row by row, in reading order.
    (A loop's `events` calls this; an SSD round's hook adds its `ssd` events, ssd/loop.py.)"""
    t = to_numpy(trace)
    v = t["verdict"]
    B = t["drafts"].shape[0]
    timings = timings or {}
    events: list[dict] = []
    for b in range(B):
        if not t["live"][b]:
            continue
        head = {"schema": SCHEMA, "round": round_idx, "row": b}
        start = int(t["start"][b])
        n = int(v["n_accepted"][b])
        gamma = int(t["n_draft"][b])  # drafts proposed this round (prompt lookup: 0 or γ)
        for i in range(gamma):
            x = int(t["drafts"][b, i])
            events.append(
                {
                    **head,
                    "type": "draft",
                    "index": i + 1,
                    "position": start + i,
                    "token": x,
                    "text": tok.token_str(x),
                    "q": float(v["q_x"][b, i]),
                    "q_top": top_list(tok, t["q_top"][0][b, i], t["q_top"][1][b, i]),
                }
            )
        events.append(
            {
                **head,
                "type": "verify",
                "p": [float(x) for x in v["p_x"][b, :gamma]],
                "p_top": [
                    top_list(tok, t["p_top"][0][b, j], t["p_top"][1][b, j])
                    for j in range(gamma + 1)
                ],
            }
        )
        for i in range(gamma):
            x = int(t["drafts"][b, i])
            base = {
                **head,
                "index": i + 1,
                "position": start + i,
                "token": x,
                "text": tok.token_str(x),
            }
            if i > n:
                events.append({**base, "type": "discard"})
                continue
            p, q, u = float(v["p_x"][b, i]), float(v["q_x"][b, i]), float(v["u"][b, i])
            events.append(
                {
                    **base,
                    "type": "accept" if i < n else "reject",
                    "p": p,
                    "q": q,
                    "u": u,
                    "ratio": p / q if q > 0 else float("inf"),
                }
            )
        y = int(v["token"][b])
        extra = {**head, "position": start + n, "token": y, "text": tok.token_str(y)}
        if v["is_bonus"][b]:
            extra.update(type="bonus", p=float(t["token_prob"][b]))
        else:
            extra.update(
                type="resample",
                residual=float(t["token_prob"][b]),
                p=float(t["token_p"][b]),
                q=float(t["token_q"][b]),
            )
        extra["top"] = top_list(tok, t["extra_top"][0][b], t["extra_top"][1][b])
        events.append(extra)
        k = int(t["n_emitted"][b])
        emitted = [int(x) for x in t["emitted"][b, :k]]
        events.append(
            {
                **head,
                "type": "round_end",
                "accepted": n,
                "drafted": gamma,
                "emitted": emitted,
                "emitted_text": tok.decode(emitted),
                "length": start + k,
                "draft_ms": 1e3 * timings.get("draft_s", 0.0),
                "verify_ms": 1e3 * timings.get("verify_s", 0.0),
            }
        )
    return events


def _upgrade(e: dict) -> dict:
    """A schema 1 event as schema 2: its resample event's `p` was the residual's probability
    (the target's and the draft's were not recorded)."""
    if e["schema"] == 1 and e.get("type") == "resample":
        e = {**e, "residual": e.get("p"), "p": None, "q": None}
    return {**e, "schema": SCHEMA}


def to_numpy(trace) -> dict:
    d = {k: getattr(trace, k) for k in trace._fields}
    out = {}
    for k, x in d.items():
        if hasattr(x, "_fields"):
            out[k] = {f: np.asarray(getattr(x, f)) for f in x._fields}
        elif isinstance(x, tuple):
            out[k] = tuple(np.asarray(a) for a in x)
        else:
            out[k] = np.asarray(x)
    return out


def metrics(hist: list[int], generated: int, drafted: int | None = None) -> dict:
    """The acceptance metrics from the acceptance histogram (rounds that accepted 0..γ drafts).

    Everything follows from it: rounds = Σ hist, accepted = Σ k·hist[k], drafted = γ·rounds
    (unless given: a drafter that may propose fewer than γ counts what it proposed), and
    draft i was accepted in every round that accepted at least i drafts.

    `per_position_acceptance[i]` is that share of ALL rounds — P(drafts 1..i+1 accepted) — not
    the rate once reached (P(draft i+1 | drafts 1..i accepted)), which is the ratio of two
    neighbours: [.5, .5] below means draft 2 was always accepted once draft 1 was.

    >>> m = metrics([1, 0, 1], generated=4)   # γ = 2: one round accepted 0, one accepted 2
    >>> m["acceptance_rate"], m["mean_acceptance_length"], m["per_position_acceptance"]
    (0.5, 2.0, [0.5, 0.5])
    """
    gamma, rounds = len(hist) - 1, sum(hist)
    accepted = sum(k * h for k, h in enumerate(hist))
    drafted = gamma * rounds if drafted is None else drafted
    return {
        "rounds": rounds,
        "drafted": drafted,
        "accepted": accepted,
        "generated_tokens": generated,
        "acceptance_rate": accepted / drafted if drafted else 0.0,
        "mean_acceptance_length": 1 + accepted / rounds if rounds else 0.0,
        "per_position_acceptance": [
            sum(hist[i + 1 :]) / rounds if rounds else 0.0 for i in range(gamma)
        ],
        "acceptance_histogram": list(hist),
        "tokens_per_target_call": generated / rounds if rounds else 0.0,
        "target_calls_saved": generated - rounds,
    }


def summarize(events: Iterable[dict]) -> dict:
    """Every metric of a run, computed once from its events."""
    events = list(events)
    ends = [e for e in events if e.get("type") == "round_end"]
    gamma = max(
        [e["drafted"] for e in ends] + [e["gamma"] for e in events if e.get("type") == "run_start"],
        default=0,
    )
    hist = [0] * (gamma + 1)
    for e in ends:
        hist[e["accepted"]] += 1
    summary = {
        **metrics(
            hist,
            generated=sum(len(e["emitted"]) for e in ends),
            drafted=sum(e["drafted"] for e in ends),
        ),
        "draft_ms": sum(e["draft_ms"] for e in ends),
        "verify_ms": sum(e["verify_ms"] for e in ends),
    }
    cache = [e["hit"] for e in events if e.get("type") == "ssd" and e["round"] > 0]
    if cache:  # SSD: the share of rounds whose drafts were ready in the cache, each row's
        summary["cache_hit_rate"] = sum(cache) / len(cache)  # first (no cache yet) left out
    return summary


def compile_event(seconds: float) -> dict:
    return {"schema": SCHEMA, "type": "compile", "ms": 1e3 * seconds}


def run_end(events: list[dict]) -> dict:
    return {"schema": SCHEMA, "type": "run_end", "summary": summarize(events)}


def write_jsonl(path: str | Path, events: list[dict]) -> None:
    atomic_write(path, "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events))


def read_jsonl(path: str | Path) -> list[dict]:
    """Read a trace; a missing file, a broken line or another schema is one clear UserError."""
    path = Path(path)
    if path.is_dir():
        raise UserError(
            f"{path} is a folder; give a trace file (.jsonl) written by "
            f"`nanospec generate --trace` or the demo's w key."
        )
    if not path.is_file():
        raise UserError(f"Trace file not found: {path}.")
    events = []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            e = json.loads(line)
        except ValueError:
            raise UserError(f"{path} line {n} is not valid JSON (truncated trace?).") from None
        if not isinstance(e, dict) or e.get("schema") not in READS:
            raise UserError(
                f"{path} line {n} has schema {e.get('schema') if isinstance(e, dict) else None}"
                f"; this nanospec reads schemas {' and '.join(map(str, READS))}."
            )
        events.append(_upgrade(e))
    if not events or events[0].get("type") != "run_start":
        raise UserError(f"{path} does not start with a run_start event; is it a nanospec trace?")
    return events
