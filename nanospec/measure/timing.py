"""Running and timing `nanospec bench`'s programs (bench.py plans the runs, reads the report).

Three phases: every program is compiled and run once on every prompt, counting acceptances;
everything to be timed goes into one round-robin pool (probes.py times it); the medians become
per-step costs (`Costs`), the quantities bench.py's performance model is written in.
"""

import statistics
from dataclasses import dataclass

import jax
from rich.console import Console

from nanospec.measure.probes import (
    FORWARD_CALLS,
    decode_probe,
    forward_probe,
    interleaved_samples,
    paired_latency,
    paired_median_differences,
    round_probe,
)
from nanospec.measure.roofline import roofline_probes, stand
from nanospec.measure.workloads import workload_prompts
from nanospec.model import ModelConfig

PAIRED_REPEATS = 3  # c's pairs are timed this many times as often as everything else


def full_models(bundle) -> dict:
    """The bundle's whole models (target, draft), not the heads: {name: (cfg, graphdef, params)}."""
    return {name: m for name, m in bundle.models.items() if isinstance(m[0], ModelConfig)}


def warm_up(programs: dict, prompts: list, seed: int, console: Console) -> tuple[dict, dict]:
    """Compile and run every program on every prompt once: (acceptance histograms, (drafted,
    rejected rounds)), each summed over the prompts, per speculative run."""
    hists: dict = {}
    counts: dict = {}  # (drafted, rejected rounds) per run
    with console.status("warming up, counting acceptances…"):
        for (m, gm), fn in programs.items():
            for i, (tk, ln) in enumerate(prompts):
                _, stats = jax.block_until_ready(fn(tk, ln, jax.random.key(seed + i)))
                if m != "ar":
                    h = stats.hist.sum(0).tolist()
                    hists[(m, gm)] = [a + b for a, b in zip(hists.get((m, gm), [0] * len(h)), h)]
                    d, r = counts.get((m, gm), (0, 0))
                    counts[(m, gm)] = (d + int(stats.drafted.sum()), r + int(stats.rejected.sum()))
    return hists, counts


def probe_pool(
    bundle,
    programs: dict,
    prompts: list,
    runs: list,
    sp,
    tokens: int,
    workload: str,
    seed: int,
    roofline_mb: float,
) -> tuple[dict, dict, dict]:
    """(probes, pairs, work): every timed thing in one round-robin pool — the workload runs,
    whole and to their first token, the decode loops behind T_ar (and the draft model's
    prefill), the forward passes behind r, and the roofline's probes (with `roofline_mb` MiB of
    buffer), whose bytes or FLOPs a call are `work` — and, per (method, γ), the drafting round
    beside its target pass."""
    probes = {
        k: (
            lambda fn=fn: [
                fn(tk, ln, jax.random.key(seed + i)) for i, (tk, ln) in enumerate(prompts)
            ]
        )
        for k, fn in programs.items()
    }
    probes.update(
        {
            ("first", *k): (
                lambda fn=fn: [
                    fn(tk, ln, jax.random.key(seed + i), 1) for i, (tk, ln) in enumerate(prompts)
                ]
            )
            for k, fn in programs.items()
        }
    )
    probe_prompt = bundle.tok.encode_prompt(workload_prompts(workload, 1)[0])
    for name, model in full_models(bundle).items():
        for n in (1, tokens):
            probes[("decode", name, n)] = decode_probe(model, probe_prompt, n)
    target = bundle.models["target"]
    forwards = {block: forward_probe(target, block) for block in {1} | {gm + 1 for _, gm in runs}}
    probes.update({("forward", block): fn for block, fn in forwards.items()})
    # The machine's limits, timed in the same pool as the passes they bound (roofline.py).
    roof, work = roofline_probes(target[0], sorted(forwards), roofline_mb)
    probes.update(roof)
    # c is a small difference of two larger times: each drafting round is timed right beside
    # the bare target pass it contains, and (being cheap) more often than the runs.
    pairs = {
        run: (
            round_probe(target, *bundle.drafter(run[0]), probe_prompt, run[1], sp),
            forwards[run[1] + 1],
        )
        for run in runs
    }
    return probes, pairs, work


def time_pool(probes: dict, pairs: dict, repeats: int, console: Console) -> tuple[dict, dict]:
    """(samples, drafting): seconds per pass of every probe, and the median drafting seconds of
    every pair (its round minus its target pass)."""
    with console.status("timing…"):
        samples = interleaved_samples(probes, repeats)
        drafting = paired_median_differences(pairs, PAIRED_REPEATS * repeats)
    return samples, drafting


@dataclass(frozen=True)
class Costs:
    """What the timed passes say, in the units of the performance model (see bench.py)."""

    samples: dict  # probe key -> seconds, one per pass
    drafting: dict  # (method, γ) -> median seconds of its drafting rounds, target pass removed
    med: dict  # probe key -> median seconds
    step: dict  # model name -> seconds per decode step (prefill cancels out)
    n_prompts: int
    n_total: int  # tokens generated by one run over every prompt
    prefill_s: float  # what the autoregressive runs spent outside decode steps
    draft_prefill: dict  # draft model name -> seconds of its prefill, over every prompt

    @classmethod
    def from_samples(
        cls, samples: dict, drafting: dict, names, tokens: int, n_prompts: int
    ) -> "Costs":
        """Medians, and from them the per-step costs of the whole models `names` (target among them)."""
        med = {k: statistics.median(v) for k, v in samples.items()}
        step = {
            name: max(med[("decode", name, tokens)] - med[("decode", name, 1)], 1e-9) / (tokens - 1)
            for name in names
        }  # seconds per decode step: prefill cancels out
        n_total = tokens * n_prompts
        # What the autoregressive runs spent outside decode steps (prefill, dispatch): speculation
        # pays it too, plus the draft model's own prefill, so an end-to-end prediction must include it.
        prefill_s = max(med[("ar", 0)] - n_total * step["target"], 0.0)
        draft_prefill = {
            name: n_prompts * max(med[("decode", name, 1)] - step[name], 0.0)
            for name in names
            if name != "target"
        }
        return cls(samples, drafting, med, step, n_prompts, n_total, prefill_s, draft_prefill)

    @property
    def t_ar(self) -> float:
        """Seconds per autoregressive decode step of the target."""
        return self.step["target"]

    @property
    def ar_time(self) -> float:
        """Median seconds of the autoregressive run over every prompt."""
        return self.med[("ar", 0)]

    def roofline(self, cfg, work: dict, large_mb: float) -> dict:
        """Where the target's decode step and timed passes stand against this machine's limits
        (roofline.stand; `work` and `large_mb` as probe_pool made the roofline's probes)."""
        t_pass = {k[1]: self.med[k] / FORWARD_CALLS for k in self.med if k[0] == "forward"}
        return stand(cfg, cfg.n_ctx, self.med, work, self.t_ar, t_pass, large_mb)

    def latency(self, k) -> dict:
        """Run k's TTFT, TPOT and speedups, paired with the autoregressive runs of the same passes."""
        return paired_latency(
            self.samples[k],
            self.samples[("first", *k)],
            self.samples[("ar", 0)],
            self.samples[("first", "ar", 0)],
            self.n_prompts,
            self.n_total - self.n_prompts,
        )
