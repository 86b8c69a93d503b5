"""Speculative speculative decoding (ssd/loop.py) outside the statistics: fan-outs, the cache's keys
and lookup by hand, SSD against ordinary speculation round for round at temperature 0, and
`nanospec generate --method ssd` as a user meets it. (The laws: tests/statistical/test_ssd.py;
greedy identity on the shipped models: tests/statistical/test_greedy_identity.py.)"""

import doctest
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nanospec.measure.ssd_hits
import nanospec.ssd.fanout
import nanospec.ssd.loop
from nanospec.decode import Bundle, make_loop
from nanospec.drafters import DraftModel
from nanospec.errors import UserError
from nanospec.generate import bucket, pad_prompts
from nanospec.measure.bench import plan_runs
from nanospec.rounds import generated
from nanospec.sampling import GREEDY, SamplingParams
from nanospec.speculative import Speculator
from nanospec.ssd.fanout import (
    SHIPPED_ALPHA_BETA,
    SSDOptions,
    geometric_fanout,
    parse_fanout,
    uniform_fanout,
)
from nanospec.ssd.loop import SSDSpeculator, lookup, outcome_keys
from nanospec.trace import read_jsonl, summarize
from nanospec.trees.tree import Tree
from tests.statistical.laws import PROMPT, PROMPT_B, tiny_pair
from tests.test_generate_cli import run

GAMMA = 3


def test_doctests():
    assert doctest.testmod(nanospec.ssd.loop).failed == 0
    assert doctest.testmod(nanospec.ssd.fanout).failed == 0
    assert doctest.testmod(nanospec.measure.ssd_hits).failed == 0


def test_geometric_fanout_spends_the_budget_and_covers_every_k():
    for budget in range(4, 30):
        for alpha in (0.1, 0.5, 0.9):
            for beta in (0.3, 1.0, 3.0):
                f = geometric_fanout(budget, alpha, beta, GAMMA)
                assert sum(f) == budget and min(f) >= 1 and len(f) == GAMMA + 1
    # A high α moves the budget to the bonus (k = γ), a low one to k = 0.
    assert geometric_fanout(20, 0.95, 0.5, GAMMA)[-1] > geometric_fanout(20, 0.95, 0.5, GAMMA)[0]
    assert geometric_fanout(20, 0.2, 0.5, GAMMA)[0] > geometric_fanout(20, 0.2, 0.5, GAMMA)[-1]
    with pytest.raises(UserError, match="cannot cover"):
        geometric_fanout(3, 0.5, 1.0, GAMMA)


def test_geometric_reads_the_shipped_alpha_not_the_acceptance_rate():
    """`geometric:B` splits by the i.i.d. model's α̂ (lesson 08), not by the acceptance rate
    (accepted / drafted: 0.787 greedy and 0.811 at T = 1 on the shipped pair), which
    understates it; at the shipped α̂ (about 0.92) the bonus (k = γ) gets the most branches."""
    for name, temperature in (("greedy", 0.0), ("sampled", 1.0)):
        alpha, beta = SHIPPED_ALPHA_BETA[name]
        assert alpha > 0.85 and beta > 0  # the acceptance rates, 0.787 and 0.811, would fail
        f = parse_fanout("geometric:10", 4, temperature)
        assert f == geometric_fanout(10, alpha, beta, 4) and f[-1] == max(f)


@pytest.mark.parametrize(
    "text,message", [("x", "whole numbers"), ("1,2", "needs 4"), ("geometric:2", "cannot cover")]
)
def test_a_bad_fanout_is_one_sentence(text, message):
    with pytest.raises(UserError, match=message):
        parse_fanout(text, GAMMA)


def test_outcome_keys_leave_the_rejected_draft_out_and_rank_by_logits():
    # γ = 1, V = 4. At k = 0 the draft x₁ = 2 was the likeliest: the keys are the next two.
    logits = jnp.array([[[0.0, 3.0, 5.0, 1.0], [4.0, 0.0, 1.0, 2.0]]])  # (1, γ+1, V)
    keys = outcome_keys(logits, jnp.array([[2]]), np.array([0, 0, 1]), np.array([0, 1, 0]))
    assert keys.tolist() == [[1, 3, 0]]  # k = 0: tokens 1 and 3; k = γ (the bonus): token 0


def test_lookup_needs_both_k_and_the_token():
    branch_k = np.array([0, 0, 1])
    t = jnp.array([[7, 8, 7], [7, 8, 7]])
    hit, branch = lookup(branch_k, t, jnp.array([[1, 7], [1, 8]]))
    assert hit.tolist() == [True, False] and int(branch[0]) == 2


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


def _rounds(loop, pair, sp, n_rows=64, max_new=10):
    (cfg, _, p), draft = pair
    rows = [PROMPT if i % 2 else PROMPT_B for i in range(n_rows)]
    tokens, lengths = pad_prompts(rows, cfg.n_ctx)
    return list(loop.rounds(p, draft[2], tokens, lengths, jax.random.key(4), sp, max_new))


def test_at_temperature_0_ssd_has_exactly_the_rounds_of_ordinary_speculation(pair):
    """Greedy drafts are a function of the committed text, so a hit's cached drafts must be the
    very drafts the draft model would make now: same drafts, same acceptances, round for
    round. A cache whose branch continued another text (looked up by k alone, or built from
    the wrong context) fails this."""
    (cfg, g, _), draft = pair
    fixed = dict(
        graphdef=g, cfg=cfg, drafter=DraftModel(draft[1], draft[0]), gamma=GAMMA, eos_id=-1
    )
    sd = _rounds(Speculator(**fixed), pair, GREEDY)
    ssd = _rounds(SSDSpeculator(**fixed, fanout=uniform_fanout(2, GAMMA)), pair, GREEDY)
    assert len(sd) == len(ssd)
    hits = 0
    for a, b in zip(sd, ssd):
        live = np.asarray(a.trace.live)
        assert np.array_equal(live, np.asarray(b.trace.live))
        assert np.array_equal(np.asarray(a.trace.drafts)[live], np.asarray(b.trace.drafts)[live])
        assert np.array_equal(np.asarray(a.trace.emitted)[live], np.asarray(b.trace.emitted)[live])
        hits += int(np.sum(np.asarray(b.trace.cached)))
    assert hits > 0, "no round was drafted from the cache"
    lengths = sd[0].trace.start  # round 1 starts at the prompt's end
    assert generated(sd[-1].state, lengths) == generated(ssd[-1].state, lengths)


def test_fused_and_step_wise_ssd_agree_and_count_their_hits(pair):
    (cfg, g, p), draft = pair
    loop = SSDSpeculator(
        graphdef=g,
        cfg=cfg,
        drafter=DraftModel(draft[1], draft[0]),
        gamma=GAMMA,
        eos_id=-1,
        fanout=(2, 1, 1, 1),
        saguaro_c=0.6,
        backup="fast",
    )
    sp = SamplingParams.make(1.0)
    steps = _rounds(loop, pair, sp)
    tokens, lengths = pad_prompts([PROMPT if i % 2 else PROMPT_B for i in range(64)], cfg.n_ctx)
    state, stats = loop.run(p, draft[2], tokens, lengths, jax.random.key(4), sp, 10)
    assert generated(state, lengths) == generated(steps[-1].state, lengths)
    hits = sum(int(np.sum(np.asarray(r.trace.cached))) for r in steps)
    assert stats.cached_rounds() == hits == steps[-1].stats.cached_rounds() > 0


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(fanout=(1, 1)), "one count per k"),
        (dict(fanout=(1, 1, 1, 9)), "exceeds"),
        (dict(fanout=(1,) * 4, saguaro_c=0.0), "Saguaro"),
        (dict(fanout=(1,) * 4, backup="other"), "Unknown backup"),
    ],
)
def test_bad_ssd_settings_are_refused(pair, kwargs, message):
    (cfg, g, _), draft = pair
    with pytest.raises(UserError, match=message):
        SSDSpeculator(
            graphdef=g,
            cfg=cfg,
            drafter=DraftModel(draft[1], draft[0]),
            gamma=GAMMA,
            eos_id=-1,
            **kwargs,
        )


def test_generate_ssd_traces_where_every_round_drafted_from(capsys, tiny_ckpt_dir, tmp_path):
    path = tmp_path / "ssd.jsonl"
    args = [
        "generate",
        "--prompt",
        "The capital of",
        "--method",
        "ssd",
        "--temperature",
        "0",
        "--max-new-tokens",
        "12",
        "--fanout",
        "2",
        "--saguaro-c",
        "0.5",
        "--backup",
        "fast",
    ]
    code, out, err = run(capsys, tiny_ckpt_dir, *args, "--trace", str(path))
    assert code == 0, err
    events = read_jsonl(path)
    assert events[0]["fanout"] == [2] * 5 and events[0]["backup"] == "fast"
    rounds = [e for e in events if e["type"] == "ssd"]
    ends = [e for e in events if e["type"] == "round_end"]
    assert len(rounds) == len(ends) and not rounds[0]["hit"]  # round 1 has no cache yet
    assert all(len(e["cache"]) == 10 and e["source"] in ("cache", "backup") for e in rounds)
    for e, end in zip(rounds, ends):  # the outcome is how the round ended
        assert (
            e["outcome"] == [end["accepted"], end["emitted"][-1]]
            or len(end["emitted"]) < end["accepted"] + 1
        )  # cut short at max_new
    code, out, err = run(capsys, tiny_ckpt_dir, *args, "--json")
    stats = json.loads(out)["stats"]
    assert stats["cache_hit_rate"] == pytest.approx(summarize(events)["cache_hit_rate"], abs=1e-4)
    code, out, err = run(
        capsys,
        tiny_ckpt_dir,
        "generate",
        "--prompt",
        "The capital of",
        "--json",
        "--temperature",
        "0",
        "--max-new-tokens",
        "12",
    )
    assert json.loads(out)["tokens"] == [t for e in ends for t in e["emitted"]]
    code, out, err = run(capsys, tiny_ckpt_dir, *args, "--show")
    lines = [line for line in out.splitlines() if line.startswith("round")]
    assert "◆ the drafts were ready in the cache" in out and "cache hit rate" in out
    assert "q is Saguaro's law q' (the draft's q with the cached guesses scaled by C = 0.5)" in out
    assert [line.split()[3] for line in lines] == ["◆" if e["hit"] else "◇" for e in rounds]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--method", "draft", "--fanout", "2"], "--fanout set speculative speculative decoding"),
        (["--method", "ssd", "--fanout", "1,2"], "γ = 4 needs 5"),
        (["--method", "ssd", "--saguaro-c", "1.5"], "--saguaro-c must be in (0, 1]"),
        (["--method", "ssd", "--tree", "2,1"], "drop --tree"),
    ],
)
def test_bad_ssd_flags_are_one_sentence(capsys, tiny_ckpt_dir, args, message):
    code, out, err = run(capsys, tiny_ckpt_dir, "generate", "--prompt", "x", *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_bench_runs_ssd_chains_and_skips_its_trees(tiny_ckpt_dir):
    bundle = Bundle.load(tiny_ckpt_dir, ["target", "draft"])
    runs, tree_runs, skipped = plan_runs(bundle, ["ssd"], [2], {"2,1": Tree.from_branching((2, 1))})
    assert runs == [("ssd", 2)] and tree_runs == []
    assert skipped == [
        {
            "method": "ssd",
            "tree": "2,1",
            "reason": "ssd pre-drafts a chain for each outcome it guesses",
        }
    ]


def test_the_memory_plan_and_the_demo_size_caches_for_ssds_branches(tiny_ckpt_dir):
    """SSD's rows hold a draft cache per branch, and its round writes 2γ+1 slots: a memory plan
    that forgot the branches would overrun its budget, a demo cache sized for γ+1 would clamp."""
    from nanospec.cache import capacity
    from nanospec.samples import plan_chunks
    from viz.live import LiveRun
    from viz.settings import Settings

    bundle = Bundle.load(tiny_ckpt_dir, ["target", "draft"])
    budget = 2**24
    plan = lambda method, block, **ssd: plan_chunks(
        make_loop(bundle, method, ssd=SSDOptions(**ssd))[0].kv_models(), 10**6, block, 64, budget
    )
    draft, ssd, ar = plan("draft", 4), plan("ssd", 4, fanout="2"), plan("ar", 1)
    assert ssd.rows < draft.rows < ar.rows
    run = LiveRun(bundle, Settings(method="ssd", gamma=3, max_new=8))
    assert run.loop.block == 7
    n_ctx = bundle.models["target"][0].n_ctx
    assert run.loop.capacity == capacity(n_ctx, bucket(len(run.prompt_ids), n_ctx), 8, 7)
