"""What a side-by-side run of measure/peer.py records, and how it is summed up and printed.

A `Record` holds every run of one `Mode` (an engine doing one kind of run with one set of
weights), pass by pass; `summarize` makes each mode's row of the report (tokens/s, × nanospec,
acceptance, whether the greedy text agrees: peer.py's docstring says how each is counted), and
`show` prints the rows as a table.

What this file deliberately leaves out: running anything (peer.py, peer_llama.py).
"""

import statistics
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Mode:
    """One kind of run: an engine doing one thing with one set of weights."""

    engine: str  # "llama.cpp" or "nanospec"
    run: str  # "autoregressive" or "speculative"
    weights: str  # "float32" or "float16" (nanospec computes in float32)


NANO_AR = Mode("nanospec", "autoregressive", "float32")
NANO_SPEC = Mode("nanospec", "speculative", "float32")
MODES = (
    Mode("llama.cpp", "autoregressive", "float32"),
    Mode("llama.cpp", "speculative", "float32"),
    Mode("llama.cpp", "autoregressive", "float16"),
    NANO_AR,
    NANO_SPEC,
)


SLOW = 2.0  # a run over twice its prompt's median time shared its cores (Record.slow_runs)
BUSY = 0.1  # a mode with over this share of such runs: the report says the machine was busy


@dataclass
class Sample:
    """One run of one prompt."""

    tokens: int
    seconds: float
    text: bytes  # the generated part
    drafted: int = 0
    accepted: int = 0
    ids: list | None = None  # the generated ids, where the engine gives them (nanospec)


@dataclass
class Record:
    """Every run of one mode: samples[pass][prompt]; pass 0 is the warm-up."""

    samples: list = field(default_factory=list)

    def run_rates(self) -> list[list[float]]:
        """Tokens/s of each timed run, [pass][prompt] (the warm-up left out)."""
        return [[s.tokens / s.seconds for s in p] for p in self.samples[1:]]

    def pass_rates(self) -> list[float]:
        """Tokens/s of each timed pass, all its prompts together."""
        return [sum(s.tokens for s in p) / sum(s.seconds for s in p) for p in self.samples[1:]]

    def slow_runs(self) -> int:
        """Timed runs that took over SLOW times the median of their prompt's timed runs."""
        by_prompt = zip(*[[s.seconds for s in p] for p in self.samples[1:]])
        return sum(sum(t > SLOW * statistics.median(ts) for t in ts) for ts in by_prompt)


def agreement(reference: list[bytes], text: bytes, span: int) -> int | None:
    """The first of the `span` reference tokens (their bytes) that `text` does not continue
    with, or None when `text` begins with all `span` of them.

    >>> agreement([b"Par", b"is", b"."], b"Paris, France", 2), agreement([b"a", b"b"], b"ac", 2)
    (None, 1)
    """
    at = 0
    for i, piece in enumerate(reference[:span]):
        if text[at : at + len(piece)] != piece:
            return i
        at += len(piece)
    return None


def compared_span(ids: list[int], eos_id: int) -> int:
    """How many of nanospec's autoregressive tokens the texts are compared on: those before
    its first <|endoftext|> (all of them if none).

    >>> compared_span([5, 6, 256, 7], 256), compared_span([5, 6], 256)
    (2, 2)
    """
    return ids.index(eos_id) if eos_id in ids else len(ids)


def median_range(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(records: dict, tok) -> list[dict]:
    """One row per mode: tokens/s, × nanospec, acceptance, and whether the greedy texts agree."""
    reference = records[NANO_AR].samples[0]
    pieces = [[tok.token_bytes(t) for t in s.ids] for s in reference]
    spans = [compared_span(s.ids, tok.eos_id) for s in reference]
    rows = []
    for mode, rec in records.items():
        rates = rec.run_rates()
        base = records[NANO_SPEC if mode.run == "speculative" else NANO_AR].run_rates()
        ratios = [a / b for pa, pb in zip(rates, base) for a, b in zip(pa, pb)]
        first = next(
            (
                {"pass": p, "prompt": i, "token": at}
                for p, samples in enumerate(rec.samples)
                for i, s in enumerate(samples)
                if (at := agreement(pieces[i], s.text, spans[i])) is not None
            ),
            None,
        )
        runs = [s for samples in rec.samples for s in samples]
        drafted, accepted = sum(s.drafted for s in runs), sum(s.accepted for s in runs)
        rows.append(
            {
                "engine": mode.engine,
                "run": mode.run,
                "weights": mode.weights,
                "tokens_per_second": median_range([r for p in rates for r in p]),
                "tokens_per_second_per_run": rates,  # [pass][prompt]
                "tokens_per_second_per_pass": rec.pass_rates(),
                "over_nanospec": median_range(ratios),
                "slow_runs": rec.slow_runs(),
                "tokens_per_prompt": [s.tokens for s in rec.samples[0]],
                "acceptance_rate": accepted / drafted if drafted else None,
                "drafted": drafted,
                "accepted": accepted,
                "text_agrees": first is None,
                "first_difference": first,  # pass 0 is the warm-up
                "compared_tokens_per_prompt": spans,
                "texts": [s.text.decode("utf-8", "replace") for s in rec.samples[0]],
            }
        )
    return rows


def _text_cell(row: dict) -> str:
    if row["text_agrees"]:
        return f"agrees ({sum(row['compared_tokens_per_prompt'])} tokens)"
    d = row["first_difference"]
    return f"differs: prompt {d['prompt'] + 1}, token {d['token'] + 1}"


COLUMNS = ["engine, run", "weights", "tokens/s", "range", "× nanospec", "acceptance", "greedy text"]


def _cells(r: dict, gamma: int) -> list[str]:
    """One table row: the × nanospec and acceptance cells are empty where they mean nothing."""
    tps, x, acc = r["tokens_per_second"], r["over_nanospec"], r["acceptance_rate"]
    ratio = f"{x['median']:.2f}× ({x['min']:.2f}–{x['max']:.2f})"
    return [
        f"{r['engine']} {r['run']}" + (f" γ={gamma}" if r["run"] == "speculative" else ""),
        r["weights"],
        f"{tps['median']:,.0f}",
        f"{tps['min']:,.0f}–{tps['max']:,.0f}",
        "" if r["engine"] == "nanospec" else ratio,
        "" if acc is None else f"{acc:.1%}",
        _text_cell(r),
    ]


def show(console, report: dict) -> None:
    from nanospec.measure.tables import table

    title = (
        f"{report['workload']} prompts × {report['prompts']}, greedy, {report['tokens']} tokens, "
        f"{report['rounds']} passes, llama.cpp --threads {report['threads']}"
    )
    table(title, COLUMNS, [_cells(r, report["gamma"]) for r in report["rows"]], console)
    runs = report["rounds"] * report["prompts"]
    slow = ", ".join(
        f"{r['engine']} {r['run']} {r['weights']}: {r['slow_runs']}" for r in report["rows"]
    )
    console.print(f"runs over {SLOW:g}× their prompt's median time, of {runs}: {slow}")
    if any(r["slow_runs"] > BUSY * runs for r in report["rows"]):
        console.print(
            "[yellow]The machine was busy: llama.cpp's threads spin while they wait for one "
            "another, so a run that shares its cores stalls. Rerun on a quiet machine, or "
            "with --threads 1.[/yellow]"
        )
    ids = report["prompt_ids"]
    same = sum(p["same_ids"] for p in ids)
    console.print(f"prompt ids: llama.cpp's equal nanospec's on {same} of {len(ids)}")
    console.print(f"{report['llama_cpp']['version']}; {report['machine']['cpu']}")
