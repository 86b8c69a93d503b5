"""Every speedup explained: one paragraph a learner can read, from one bench report's numbers.

`nanospec bench` ends with it. For the speculative run that measured fastest (of those with a
cost model), it gives this machine's r(γ+1), c and α, the bound the cost model puts on the
decode speedup, E / (γc + r) (docs/design.md §6), the speedup measured, and which term limits
it most. Which term: each is set to its ideal in turn — r to 1 (a pass over γ + 1 tokens
costing what a one-token pass does), c to 0 (free drafting), α to 1 (every draft accepted) —
and the one whose ideal raises the bound most is named, with what the others would give.

    >>> row = {"method": "draft", "gamma": 7, "alpha": 0.92, "c": 0.086, "verify_over_ar": 1.87,
    ...        "expected_tokens_per_round": 6.04, "rounds_without_drafts": 0.0}
    >>> {k: round(v, 2) for k, v in what_if(row).items()}
    {'verify': 3.77, 'drafting': 3.23, 'acceptance': 3.24}
    >>> limit(row)
    'verify'

What this file deliberately leaves out: token-tree rows (bench has no cost model for them),
and any number the report does not hold: what r is on a GPU is said as the reason it would be
about 1, never as a measurement.
"""

from nanospec.measure.tables import NOISY

# subtle: the reason, not a measurement — this project has timed no GPU (docs/design.md §6).
ON_A_GPU = (
    "on a GPU it costs about 1, because a pass at batch 1 there is bound by reading the "
    "weights, and {n} tokens read them once, as one token does"
)


def round_cost(row: dict, r: float | None = None, c: float | None = None) -> float:
    """A round's cost in target steps, (1 − f)(γc + r) + f, with the row's own r and c unless
    given (f: the share of rounds that drafted nothing and cost one plain step)."""
    f, gm = row["rounds_without_drafts"], row["gamma"]
    r = row["verify_over_ar"] if r is None else r
    c = row["c"] if c is None else c
    return (1 - f) * (gm * c + r) + f


def bound(row: dict) -> float:
    """The cost model's decode speedup, E / round cost (bench's `pred decode`)."""
    return row["expected_tokens_per_round"] / round_cost(row)


def what_if(row: dict) -> dict:
    """{term: the bound with that term at its ideal}: r = 1, c = 0, α = 1."""
    f, gm = row["rounds_without_drafts"], row["gamma"]
    every = (1 - f) * (gm + 1) + f  # E at α = 1: all γ drafts and the bonus
    return {
        "verify": row["expected_tokens_per_round"] / round_cost(row, r=1.0),
        "drafting": row["expected_tokens_per_round"] / round_cost(row, c=0.0),
        "acceptance": every / round_cost(row),
    }


def limit(row: dict) -> str:
    """The term whose ideal raises the bound most: "verify", "drafting" or "acceptance"."""
    gains = what_if(row)
    return max(gains, key=gains.get)


def explain(report: dict) -> str:
    """The paragraph (see the module docstring): a pure function of a bench report."""
    rows = [r for r in report["rows"] if "predicted_decode_speedup" in r]
    if not rows:
        return (
            "Nothing here has a cost model to explain: only autoregressive decoding or token "
            "trees ran (bench predicts chains of drafts only)."
        )
    row = max(rows, key=lambda r: r["measured_speedup"])
    gm, r, c, a = row["gamma"], row["verify_over_ar"], row["c"], row["alpha"]
    e, n = row["expected_tokens_per_round"], gm + 1
    machine = report.get("machine", {})
    where = ", ".join(
        str(x)
        for x in (machine.get("cpu"), machine.get("cores") and f"{machine['cores']} cores")
        if x
    )
    gains = what_if(row)
    text = [
        f"Why {row['method']} at γ = {gm} gave {row['measured_speedup']:.2f}× here"
        f"{f' ({where})' if where else ''}: a round drafts {gm} tokens at c = {c:.3f} of a target "
        f"step each (γc = {gm * c:.2f}) and checks them in one target pass over {n} tokens, "
        f"which costs r = {r:.2f} one-token passes on this machine; at α = {a:.2f} a round "
        f"yields E = {e:.2f} tokens, so the cost model bounds the decode speedup at "
        f"E / (γc + r) = {e:.2f} / {round_cost(row):.2f} = {bound(row):.2f}×"
        + (
            f", {row['rounds_without_drafts']:.0%} of rounds drafting nothing at one step's cost"
            if row["rounds_without_drafts"] > 0
            else ""
        )
        + f", and the whole run, prefills counted, at {row['predicted_speedup']:.2f}×. It "
        f"measured {row['measured_speedup']:.2f}× end to end, {row['efficiency']:.2f} of that.",
    ]
    gpu = ON_A_GPU.format(n=n)
    top = limit(row)
    if top == "verify":
        text.append(
            f"What limits it most is the verify pass: it costs {r:.2f} one-token passes here; "
            f"{gpu}. At r = 1 these drafts would be bounded at {gains['verify']:.2f}× "
            f"(free drafting: {gains['drafting']:.2f}×; every draft accepted: "
            f"{gains['acceptance']:.2f}×)."
        )
    elif top == "drafting":
        text.append(
            f"What limits it most is drafting: γc = {gm * c:.2f} target steps a round, against "
            f"the {max(r - 1, 0):.2f} the verify pass costs beyond a plain step; free drafting "
            f"would bound it at {gains['drafting']:.2f}× (r = 1: {gains['verify']:.2f}×, every "
            f"draft accepted: {gains['acceptance']:.2f}×). The verify pass costs {r:.2f} "
            f"one-token passes here; {gpu}: there drafting would limit it all the more."
        )
    else:
        text.append(
            f"What limits it most is acceptance: at α = {a:.2f} a round yields {e:.2f} of the "
            f"{n} tokens it could; every draft accepted would bound it at "
            f"{gains['acceptance']:.2f}× (free drafting: {gains['drafting']:.2f}×, r = 1: "
            f"{gains['verify']:.2f}×): that takes a better drafter, not a faster machine. "
            f"The verify pass costs {r:.2f} one-token passes here; {gpu}."
        )
    roofline = report.get("roofline") or {}  # None where bench ran without one
    passes = {p["tokens"]: p for p in roofline.get("passes", []) if "r" in p}
    if n in passes and 1 in passes:
        text.append(
            f"By this machine's roofline, measured in the same run, the pass over {n} tokens "
            f"would cost {passes[n]['r_at_bound']:.2f} one-token passes if both ran at their "
            f"bounds; they ran at {passes[n]['of_bound']:.2f} and {passes[1]['of_bound']:.2f} "
            "of them."
        )
        if "matmuls_ms" in passes[n]:
            text.append(
                f"Its matmuls alone take {passes[n]['matmuls_ms']:.2f} of its "
                f"{passes[n]['measured_ms']:.2f} ms and, timed alone, cost "
                f"{passes[n]['r_matmuls']:.2f} times the one-token pass's: with everything "
                f"else free, r would be {passes[n]['r_matmuls']:.2f}."
            )
    if abs(report["ar"]["tpot_over_decode_probe"] - 1) > NOISY:
        text.append("The run was noisy (see above): take c and r loosely, and run it again.")
    return " ".join(text)
