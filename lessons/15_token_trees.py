# %% [markdown]
# # Lesson 15 — Token trees: several drafts per position, one target pass
#
# **You will see** a tree of 8 drafts (two chains of 4 under one root) with the mask and
# positions that let the target score it in ONE pass; SpecInfer's rule trying siblings one
# after another, its output law computed exactly (it is p); a real round drawn node by node;
# then tokens per target pass for the tree and for chains, what a wide pass costs on this
# machine, and where, by the cost model, the tree pays.
#
# **It explains** `nanospec/trees/tree.py` (`Tree`, `sibling_laws`, `sibling_outcome`, the
# walk `verify_tree`), `nanospec/trees/grow.py` (sampled or top-k children) and
# `nanospec/trees/loop.py` (`TreeSpeculator`).
#
# A chain of γ drafts dies at its first rejection. A tree hedges: a node may have several
# children, and when one is rejected the next sibling gets a try. The target scores every node
# at once: each node attends only to itself and its ancestors, at position root + depth.
#
# Notation: lessons/NOTATION.md (one meaning per symbol, course-wide).

# %%
import itertools
import statistics

import jax
import jax.numpy as jnp
import numpy as np

from nanospec.cache import init_cache, rollback
from nanospec.compat import enable_x64  # jax.enable_x64, named as each JAX version names it
from nanospec.decode import make_loop
from nanospec.generate import pad_prompts
from nanospec.measure.probes import forward_probe, interleaved_samples
from nanospec.measure.workloads import workload_prompts
from nanospec.model import forward
from nanospec.sampling import SamplingParams
from nanospec.teach import bar, claim, console, figure, shipped, table
from nanospec.trees.trace import events_from_tree_step
from nanospec.trees.tree import Tree, sibling_laws, sibling_outcome

bundle = shipped("target", "draft")
tok, target = bundle.tok, bundle.models["target"]
cfg, graphdef, params = target
tree = Tree.from_branching((2, 1, 1, 1))  # `nanospec bench --tree 2,1,1,1`: 9 nodes, depth 4

# %% [markdown]
# ## The tree as the target sees it
#
# Node 0 is the last committed token (the root, at position L−1 when L tokens are committed);
# the drafts follow in breadth-first order. Row i of `tree.ancestor_mask` is what node i may
# attend to in the block (■), besides the committed text in the cache: the verify pass is an
# ordinary pass over 9 tokens with this mask in place of the causal one, so node 4 never sees
# node 1, a rival guess for the token before it.

# %%
table(
    "Tree.from_branching((2, 1, 1, 1))",
    ["node", "parent", "position", "attends to 0..8"],
    [
        [
            c,
            tree.parents[c] if c else "—",
            f"L−1+{tree.depth[c]}",
            " ".join("■" if s else "·" for s in tree.ancestor_mask[c]),
        ]
        for c in range(tree.size)
    ],
)

# %% [markdown]
# ## Siblings, one after another (tree.py's worked example)
#
# Under a parent where the target's law is p, child k is tested against ρ_k: ρ_0 = p, and each
# rejection replaces ρ by norm(max(0, ρ − q_k)), the residual of the sibling just rejected.
# Accept with min(1, ρ_k(x)/q_k(x)) as in lesson 04; if every child is rejected, draw from what
# is left. Top-2 siblings are point masses (q_k = one-hot) on tokens 0 and 1; p = [.5 .3 .2]:

# %%
fmt = lambda law: "  ".join(f"{float(x):.2f}" for x in law)
p3, onehots = jnp.array([0.5, 0.3, 0.2]), jnp.eye(3)[:2]
rhos, left = jax.jit(sibling_laws)(p3, onehots, jnp.ones(2, bool))
acc, _ = jax.jit(sibling_outcome)(p3, onehots, jnp.array([0, 1]))
table(
    "two siblings",
    ["sibling", "token", "tested against ρ", "accepted with"],
    [[k, k, fmt(rhos[k]), f"{float(acc[k]):.2f}"] for k in range(2)]
    + [["all rejected", "—", fmt(left), "draw from it"]],
)
console.print(
    "P(0) = .5, P(1) = .5·.6 = .3, P(2) = .5·.4 = .2: p again. A chain (sibling 0 "
    "alone) moves on half the time, the pair 80% of the time."
)

# %% [markdown]
# ## The law, by enumeration
#
# Lesson 04's p and q on five tokens. For every tuple of siblings, `sibling_outcome` gives
# a_k = P(sibling k accepted | the ones before it rejected) and the residual left at the end:
# P(y) = Σ_tuples P(tuple)·[Σ_k Π_{j<k}(1 − a_j)·a_k·1{x_k = y} + Π_j(1 − a_j)·left(y)],
# in float64. `grow.py` draws sampled siblings i.i.d. from q (with replacement: duplicates
# allowed) or takes q's top m as point masses. Then tree.py's warning: two siblings drawn
# WITHOUT replacement but tested as if each were drawn from q.

# %%
p = np.array([0.40, 0.25, 0.20, 0.10, 0.05])  # the target's law at the parent
q = np.array([0.10, 0.45, 0.05, 0.30, 0.10])  # the draft's law there
with enable_x64(True):
    outcomes = jax.jit(jax.vmap(sibling_outcome, in_axes=(None, 0, 0)))

    def leaving_law(p, xs, node_qs, weights):
        """Law of the token that leaves the parent: sibling tuples xs (n, m) with
        probabilities weights (n,), each sibling tested as drawn from node_qs (n, m, V)."""
        a, left = map(np.asarray, outcomes(jnp.asarray(p), jnp.asarray(node_qs), jnp.asarray(xs)))
        before = np.cumprod(np.c_[np.ones(len(xs)), 1 - a], axis=1)  # all earlier rejected
        law = (weights * before[:, -1]) @ left
        for k in range(xs.shape[1]):
            np.add.at(law, xs[:, k], weights * before[:, k] * a[:, k])
        return law

    def sampled(m):  # every tuple of m i.i.d. draws from q
        xs = np.array(list(itertools.product(range(5), repeat=m)))
        return leaving_law(p, xs, np.broadcast_to(q, (*xs.shape, 5)), q[xs].prod(1))

    def top(m):  # q's m likeliest tokens, each a point mass
        xs = np.argsort(-q)[None, :m]
        return leaving_law(p, xs, np.eye(5)[xs], np.ones(1))

    laws = {"sampled ×2": sampled(2), "sampled ×3": sampled(3), "top-2": top(2), "top-3": top(3)}
    p_w, q_w = np.array([0.0, 0.2, 0.8]), np.array([0.9, 0.1, 0.0])
    xs_w = np.array(list(itertools.permutations(range(3), 2)))
    w_w = q_w[xs_w[:, 0]] * q_w[xs_w[:, 1]] / (1 - q_w[xs_w[:, 0]])  # the 2nd: q without the 1st
    wrong = leaving_law(p_w, xs_w, np.broadcast_to(q_w, (*xs_w.shape, 3)), w_w)
gap = {name: float(np.abs(law - p).max()) for name, law in laws.items()}
table(
    "the token that leaves the parent",
    ["siblings", *(f"P({y})" for y in range(5)), "|P − p|"],
    [[name, *(f"{x:.4f}" for x in law), f"{gap[name]:.0e}"] for name, law in laws.items()]
    + [["target p", *(f"{x:.4f}" for x in p), ""]],
)
console.print(f"without replacement: p = {fmt(p_w)}, q = {fmt(q_w)} gives P = {fmt(wrong)}")
claim(
    max(gap.values()) < 1e-12,
    f"sampled and top-k siblings both leave with law p "
    f"(largest error {max(gap.values()):.0e}, float64)",
)
console.print(  # the worked example's fixed numbers: a fact, printed
    f"drawn without replacement but tested against q, token 1 comes out with probability "
    f"{wrong[1]:.2f} instead of 0.20: node_q must be the law each sibling was drawn from"
)

# %% [markdown]
# ## A real round
#
# The tree loop (`TreeSpeculator`, from `make_loop`) with the shipped draft model, SpecInfer's
# way: sampled siblings at T = 1, on 16 facts prompts of the benchmark, up to 48 tokens each
# (a row stops at <|endoftext|>). Beside it, round for round, a chain of γ = 8, whose target
# pass is as wide as the tree's (9 tokens). The step-wise driver (`loop.rounds`) hands over each
# round's trace and time.

# %%
T1, N = SamplingParams.make(1.0), 48
tokens, lengths = pad_prompts(
    [tok.encode_prompt(s) for s in workload_prompts("facts", 16)], cfg.n_ctx
)
running = {
    k: lp.rounds(params, dp, tokens, lengths, jax.random.key(0), T1, N)
    for k, (lp, dp) in {
        "tree": make_loop(bundle, "draft", tree=tree, top=False),
        "chain": make_loop(bundle, "draft", gamma=8),
    }.items()
}
done = {k: [] for k in running}  # (trace, seconds) of every round, the two loops interleaved
while running:
    for k in list(running):
        step = next(running[k], None)
        if step is None:
            del running[k]
        else:
            done[k].append((step.trace, step.seconds))

# %% [markdown]
# One round of the tree: every draft with q (its probability under the law it was drawn
# from), p (under the target's law at its parent) and what the walk did with it
# (`trees/trace.py`). We show a round where the first child was rejected and the second
# accepted, if the run had one.

# %%
first, second = tree.children[0, :2]
picks = [
    (i, b)
    for i, (t, _) in enumerate(done["tree"])
    for b in np.flatnonzero(np.asarray(t.live) & (np.asarray(t.path)[:, 1] == second))
]
i, b = (picks or [(0, 0)])[0]
events = [e for e in events_from_tree_step(done["tree"][i][0], tok, i, tree) if e["row"] == b]
nodes = {n["node"]: n for e in events if e["type"] == "tree" for n in e["nodes"]}
extra = next(e for e in events if e["type"] in ("resample", "bonus"))


def draw(c, indent=""):
    kids = [k for k in tree.children[c] if k >= 0]
    for j, k in enumerate(kids):
        n, end = nodes[k], j == len(kids) - 1
        console.print(
            f"{indent}{'└── ' if end else '├── '}{k} {n['text']!r:12} "
            f"q {n['q']:.2f}  p {n['p']:.2f}  {n['verdict']}",
            markup=False,
        )
        draw(k, indent + ("    " if end else "│   "))


root = tok.token_str(int(done["tree"][i][0].tokens[b, 0]))
console.print(f"round {i + 1} of prompt {b}, root {root!r}", markup=False)
draw(0)
console.print(f"and then the {extra['type']} token {extra['text']!r}", markup=False)

# %% [markdown]
# ## Tokens per target pass
#
# Every round is one target pass. A third row comes free: node 1 and its descendants are a
# chain of 4, drawn from the same laws and tested first, against p, by the same rule. So in
# each round that chain alone would have accepted what the tree did when the path went through
# node 1, and nothing otherwise. (Rounds are counted per row: 16 rows, up to 48 tokens each.)
#
# The claim compares the chain's mean with the tree's, z standard errors apart. Were the chain
# no better, z > 3.09 would happen one run in 1,000 (one-sided, rounds taken as independent;
# they are not quite — a row's rounds share its prompt — and where they are correlated the
# standard error is understated and that rate higher). The rounds are random, fixed by the
# seed on one machine but not across machines (other rounding, other draws). In the authors'
# runs over 24 seeds (not repeated here), z ran from 4.5 to 8.4, mean 6.9: the lowest of the
# 24 stood 1.4 above 3.09.

# %%
rows = lambda k, f: np.concatenate([np.asarray(f(t))[np.asarray(t.live)] for t, _ in done[k]])
n_tree, via = rows("tree", lambda t: t.n_accepted), rows("tree", lambda t: t.path[:, 1])
tree_tok, branch_tok = n_tree + 1, np.where(via == first, n_tree, 0) + 1
chain_tok = rows("chain", lambda t: t.verdict.n_accepted) + 1
per_pass = {  # tokens per target pass, measured
    "chain γ=4 (first branch)": branch_tok.mean(),
    "tree 2,1,1,1": tree_tok.mean(),
    "chain γ=8": chain_tok.mean(),
}
width = dict(zip(per_pass, (5, 9, 9)))  # tokens in the target pass
table(
    f"tokens per target pass, T = 1 ({len(tree_tok)} tree and {len(chain_tok)} chain rounds)",
    ["drafts", "in the pass", "tokens per pass", ""],
    [[k, width[k], f"{e:.2f}", bar(e, 9, 20)] for k, e in per_pass.items()],
)
console.print(
    f"the second child saved {int(np.sum(tree_tok > branch_tok))} of {len(tree_tok)} rounds"
)
z = (chain_tok.mean() - tree_tok.mean()) / np.sqrt(
    tree_tok.var() / len(tree_tok) + chain_tok.var() / len(chain_tok)
)
claim(
    z > 3.09,
    f"at equal node budget the chain wins: {chain_tok.mean():.2f} tokens per pass "
    f"against the tree's {tree_tok.mean():.2f}, z = {z:.1f} > 3.09 standard errors apart",
)

# %% [markdown]
# Why: this draft agrees with the target so often that drafts 5 to 8 in line are worth far
# more than a second branch at the first token, as the line below prints. A second sample
# from q rarely lands where the residual has its mass (where q under-proposed), so the hedge
# seldom pays.

# %%
tok4, tok_tree, tok8 = per_pass.values()
console.print(
    f"drafts 5 to 8 in line add {tok8 - tok4:.2f} tokens per pass (chain γ=8 less chain γ=4); "
    f"a second branch of 4 nodes adds {tok_tree - tok4:.2f} (the tree less chain γ=4)"
)

# %% [markdown]
# ## What a wide pass costs
#
# A tree pass is a pass over n tokens with another mask: here the same program on other data,
# since attention is computed densely and the mask only picks which scores count. Timed to
# show it: 8 passes over this tree (its mask, its positions) and then 8 causal passes over 9
# tokens, 16 times (`interleaved_samples`), each pair compared, so whatever else the machine
# is doing slows both alike. Then, as in lesson 01, `forward_probe` gives r(n), a pass over n
# tokens in one-token passes (docs/design.md §6). r is the machine's: near 1 where a pass
# costs mostly its fixed part (lesson 01), as on an accelerator; growing with n where the
# arithmetic per token counts, as on a CPU. Drafting aside, a round costs r(n) and yields its
# tokens per pass: their ratio is the predicted speedup over autoregressive decoding. The three
# probes are timed 15 times round-robin; each r(n) in the table is the median over those 15
# repeats of the repeat's n-token time over its one-token time, and the verdict divides the
# table's r(9) by its r(5). Each repeat also gives its own r(9)/r(5): half the interquartile
# range of those 15 is the probe's noise. The crossover is noisy too — it rests on the few
# rounds the second child saved — so it comes with its standard error, and where the two lie
# within the probe's noise plus two standard errors of each other, the verdict is
# "unresolved", not a winner.


# %%
def probe(mask, offsets, context=64):
    """forward_probe(target, 9) with `mask` (None: causal) and positions context + offsets,
    and 8 passes a call instead of 32, so that the pairs come close together."""

    @jax.jit
    def loop(params, cache, tok):
        def body(i, carry):  # each pass feeds on the last one's argmax: nothing to hoist
            cache, tok = carry
            logits, _, cache = forward(
                graphdef, params, tok, context + offsets[None], cache, block_mask=mask
            )
            return rollback(cache, cache.length - 9), jnp.argmax(logits, -1).astype(jnp.int32)

        return jax.lax.fori_loop(0, 8, body, (cache, tok))

    cache = init_cache(cfg.n_layer, cfg.n_head, cfg.head_dim, 1, cfg.n_ctx)
    cache, tok = rollback(cache, jnp.array([context])), jnp.zeros((1, 9), jnp.int32)
    return lambda: loop(params, cache, tok)


as_tree = probe(jnp.asarray(tree.ancestor_mask), jnp.asarray(tree.depth))
pairs = interleaved_samples({"tree": as_tree, "causal": probe(None, jnp.arange(9))}, repeats=16)
same = statistics.median(t / c for t, c in zip(pairs["tree"], pairs["causal"]))  # pair by pair
console.print(
    f"a pass over the tree took {same:.2f}× a causal pass over its 9 tokens: the same "
    "program, so what the ratio shows is the timing's noise (measured, not asserted)"
)
samples = interleaved_samples({n: forward_probe(target, n) for n in (1, 5, 9)}, repeats=15)
per_repeat = {n: [x / y for x, y in zip(samples[n], samples[1])] for n in samples}
r = {n: statistics.median(v) for n, v in per_repeat.items()}  # repeat by repeat, as lesson 09
table(
    "predicted speedup, drafting aside: tokens per pass / r(n)",
    ["drafts", "r(n) here", "here", "r(n) = 1"],
    [
        [k, f"{r[width[k]]:.2f}", f"{e / r[width[k]]:.2f}×", f"{e:.2f}×"]
        for k, e in per_pass.items()
    ],
)
crossover, here = tok_tree / tok4, r[9] / r[5]  # the table's r(9) over its r(5)
# The crossover's standard error: the tree's and the first branch's tokens come from the same
# rounds, so the ratio's error is that of their mean difference, over the branch's mean.
saved = tree_tok - branch_tok
cross_se = saved.std(ddof=1) / np.sqrt(len(saved)) / tok4
q1, _, q3 = statistics.quantiles([a / b for a, b in zip(per_repeat[9], per_repeat[5])], n=4)
noise = (q3 - q1) / 2  # half the interquartile range of each repeat's own r(9)/r(5)
verdict = (
    "unresolved: the gap is inside the noise of the probe and the crossover"
    if abs(here - crossover) <= noise + 2 * cross_se
    else f"here it {'wins' if here < crossover else 'loses'}"
)
console.print(
    f"drafting aside, the tree beats the chain of its depth where r(9)/r(5) < "
    f"{crossover:.3f} ± {cross_se:.3f} (the crossover and its standard error, from the "
    f"{int(np.sum(saved > 0))} rounds the second child saved); on this machine the table's "
    f"r(9)/r(5) is "
    f"{here:.3f}, the probe's noise ±{noise:.3f} (over {len(per_repeat[9])} repeats), so "
    f"{verdict} (measured, not asserted)"
)
# Drafting counted: the tree's draft model makes 5 passes a round (4 over its nodes, 1 over
# the kept path), the chain of 4's makes 4. Where every pass costs the same at any width
# (r(n) = 1, and a draft pass c target passes), the tree wins where (5c + 1) / tok_tree <
# (4c + 1) / tok4, that is c < (crossover − 1) / (5 − 4 · crossover).
depth_c = lambda x: max(0.0, (x - 1) / (5 - 4 * x)) if 4 * x < 5 else float("inf")
lo, hi = depth_c(crossover - 2 * cross_se), depth_c(crossover + 2 * cross_se)
console.print(
    f"drafting counted, where a pass costs the same at any width the tree beats the chain of "
    f"its depth only where a draft pass costs less than c = {depth_c(crossover):.3f} target "
    f"passes ({lo:.3f} to {hi:.3f} over the crossover's ± 2 standard errors; its 5 draft "
    "passes a round against the chain's 4)"
)
figure(
    "15_token_trees",
    lambda ax: (
        ax.plot(
            x := np.linspace(1, max(1.5, 1.1 * here), 50),
            crossover / x,
            label="tree / chain of 4 (5-token pass)",
        ),
        ax.axhline(tok_tree / tok8, color="C1", label="tree / chain of 8 (same pass)"),
        ax.axhline(1, color="gray", lw=0.8),
        ax.axvline(here, ls=":", color="k", label="this machine"),
        ax.set_xlabel("r(9) / r(5): the tree's pass over the 4-chain's"),
        ax.set_ylabel("tree's predicted speed over the chain's"),
        ax.legend(),
    ),
)

# %% [markdown]
# ## On the clock, against the chain of 8
#
# Here r cancels: both loops pass over 9 tokens, and per pass the chain brings more tokens on
# any machine (the z claim). Only drafting can reverse that. Per round the tree's draft model
# makes 4 passes over its 9 nodes, and after verification one more over a block of 5 (the path
# it kept, padded), which runs with the verify pass and is timed in the table's verify column;
# the chain's draft model makes 8 short ones. Where a draft pass costs the same at any width,
# that is 5 against 8, and the tree wins where a draft pass costs more than the share of a
# target pass printed below; where width costs, as on a CPU, its wide draft passes eat the
# saving. The two loops above ran round by round, interleaved: these are this machine's times,
# printed, not asserted.

# %%
clock = {}  # per loop: seconds drafting and verifying a round, seconds per token
for k, rounds in done.items():
    d, v = (sum(s[f] for _, s in rounds) for f in ("draft_s", "verify_s"))
    emitted = sum(int(np.sum(t.n_emitted)) for t, _ in rounds)
    clock[k] = d / len(rounds), v / len(rounds), (d + v) / emitted
table(
    "the two loops on this machine's clock (16 rows a round)",
    ["loop", "drafting ms a round", "verify ms a round", "ms per token"],
    [[k, f"{1e3 * d:.1f}", f"{1e3 * v:.1f}", f"{1e3 * t:.2f}"] for k, (d, v, t) in clock.items()],
)
slower = clock["tree"][2] / clock["chain"][2]
share = (tok8 - tok_tree) / (8 * tok_tree - 5 * tok8) if 8 * tok_tree > 5 * tok8 else float("inf")
console.print(
    f"where a pass costs the same at any width, for the target (r(n) = 1) and the draft "
    f"model alike, the tree would win where a draft pass costs more than c = {share:.2f} "
    f"target passes; on this machine it takes {slower:.2f}× the chain's "
    f"time per token, so here it {'loses' if slower > 1 else 'wins'} (measured, not "
    "asserted)"
)

# %% [markdown]
# ## What to take away
#
# The walk is exact however the siblings are grown, as long as each one is tested against the
# law it was really drawn from. Whether a tree pays is arithmetic on two measured things:
# tokens per pass, which the models fix on any machine, and what the passes cost, which the
# machine fixes. Against a chain whose pass is as wide, a draft this good makes depth beat
# hedging, and only a round of drafting that costs the tree less than the chain's can win it
# the clock: draft passes dear enough, and no dearer for being wide, that its 5 undercut the
# chain's 8 (above the share of a target pass printed above). Against the chain of its
# own depth, drafting aside, it wins where a pass over 9 tokens costs at most the crossover
# times one over 5, as where both cost about one pass; counting drafting, its 5 draft passes
# against that chain's 4 must also cost less than the second child's gain: a draft pass under
# the c printed above, where this draft model's c on this CPU is 0.11 to 0.16
# (docs/results.md, the `c` column at γ = 4 on its three workloads; an accelerator has its
# own). Trees belong with
# drafters that cannot go deeper and cost little (Medusa's 4 heads, lesson 12) and with
# hardware where width is free.
