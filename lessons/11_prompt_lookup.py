# %% [markdown]
# # Lesson 11 — Prompt lookup: drafting by copying
#
# **You will see** prompt lookup find the last few tokens of a text earlier in the same text
# and propose what followed them there; then the loop drafting that way on text that repeats
# itself and on text that does not — tokens per target pass on each — and at T = 0 the very
# text that autoregressive greedy decoding writes.
#
# **It explains** `nanospec/drafters.py`: `lookup` and `PromptLookup` (its `draft_length`:
# rounds that propose nothing).
#
# Text often says things again: a table read back row by row, a refrain, a quotation. Then
# the best guess for what comes next is what came next *last time*, and finding it needs no
# model at all. The drafter looks for the longest suffix of the text (up to 5 tokens, down to
# 1) that occurred before, takes its earliest occurrence, and copies the γ tokens that
# followed it. The drafts are not sampled, so their law is a point mass, q = one-hot(x): the
# verify rule accepts x with probability p(x), and on a rejection resamples from p with x
# removed — exact at every temperature. At T = 0, p is a point mass too: a draft is kept
# exactly when it is the target's own greedy choice.
#
# Notation: lessons/NOTATION.md (one meaning per symbol, course-wide).

# %%
import jax
import jax.numpy as jnp
import numpy as np

from nanospec.decode import make_loop
from nanospec.drafters import lookup
from nanospec.generate import pad_prompts
from nanospec.measure.positions import NEAR_TIE, text_features
from nanospec.measure.workloads import workload_prompts
from nanospec.rounds import generated
from nanospec.sampling import GREEDY
from nanospec.teach import bar, claim, console, figure, shipped, table
from nanospec.trace import metrics

bundle = shipped("target")
tok = bundle.tok
cfg, graphdef, params = bundle.models["target"]
GAMMA, N = 4, 48

# %% [markdown]
# ## The worked example of `lookup`
#
# Committed "a b c a b" (a = 1, b = 2, c = 3). The last two tokens "a b" also end at index 1,
# and what followed them there is "c a b" — up to the present. The drafts run on with the
# period of the match (3), so a repeating pattern keeps repeating: [c, a, b, c].

# %%
drafts, n = lookup(jnp.array([1, 2, 3, 1, 2, 0, 0, 0]), jnp.int32(5), 4, 5, 1)  # γ 4, n 5..1
console.print(f"drafts {drafts.tolist()}, matched the last {int(n)} tokens")
claim(drafts.tolist() == [3, 1, 2, 3] and int(n) == 2, "lookup proposes c a b c after a b c a b")

# %% [markdown]
# ## On a real context
#
# `PromptLookup.matches` runs the same lookup on every row of a batch, with the drafter's own
# settings (n-grams of 5 tokens down to 1). Here the students are copying a sentence whose
# last words were on the board twice, with two different endings: the lookup must take the
# earliest.

# %%
ngram, _ = bundle.drafter("ngram")
CONTEXT = (
    'The teacher wrote on the board: "The capital of Peru is Lima, on the coast." Then: '
    '"The capital of Peru is not Cusco." The students copied the first: "The capital of Peru is'
)
ids = tok.encode_prompt(CONTEXT)
drafts, matched = ngram.matches(jnp.asarray([ids]), jnp.asarray([len(ids)]), GAMMA)
drafts, n = drafts[0].tolist(), int(matched[0])


def seen(k):
    """By hand: where the last k tokens occurred before (ending by token L−2), first to last."""
    return [j for j in range(k - 1, len(ids) - 1) if ids[j - k + 1 : j + 1] == ids[-k:]]


longest = max(k for k in range(ngram.min_ngram, ngram.max_ngram + 1) if seen(k))
first, *later = seen(n)
show = lambda toks: " ".join(repr(tok.token_str(x)) for x in toks)
table(
    "prompt lookup on the students' copy",
    ["", "tokens"],
    [
        [f"the last {n} tokens", show(ids[-n:])],
        [f"first seen at tokens {first - n + 1}–{first}", show(ids[first - n + 1 : first + 1])],
        ["what followed them there", show(ids[first + 1 : first + 1 + GAMMA])],
        *[
            [f"seen again at {j - n + 1}–{j}, then", show(ids[j + 1 : j + 1 + GAMMA])]
            for j in later
        ],
        [f"the {GAMMA} drafts", show(drafts)],
    ],
)
claim(
    n == longest and later and drafts == ids[first + 1 : first + 1 + GAMMA],
    f"the lookup matched the longest suffix seen before ({n} tokens, of at most "
    f"{ngram.max_ngram}), and its {GAMMA} drafts are what followed the earliest of its "
    f"{1 + len(later)} earlier occurrences",
)

# %% [markdown]
# ## When copying wins, and when it does not
#
# The loop, γ = 4, T = 0, up to 48 new tokens (fewer where a row writes <|endoftext|>), on 4
# prompts of each of the benchmark's workloads
# (`measure/workloads.py`, cut from documents made for the benchmark with new seeds, from the
# same generators and facts the training text used): *repetitive* (tables read back, drills,
# quotes: the continuation is already in the prompt), *code* and *facts* (prose about
# countries). A round whose last token never occurred before proposes nothing: the verify rule
# draws that row's one token from the target's p, as a decode step does (and when no row of the
# batch matched, the pass itself is a one-token decode step, `speculative.target_pass`). In the
# table, *tokens* and *passes* are totals over a workload's 4 rows: a row's passes are its
# rounds, one target pass each for that row (the 12 rows share batched passes, so fewer run;
# the prompt's own pass aside), *no match* counts the rounds that
# proposed nothing (and their share), and *accept rate* is the share of the proposed drafts that
# were kept.

# %%
kinds = ("repetitive", "code", "facts")
prompts = {k: workload_prompts(k, 4) for k in kinds}
rows_ids = [tok.encode_prompt(p) for k in kinds for p in prompts[k]]
tokens, lengths = pad_prompts(rows_ids, cfg.n_ctx)
loop, dparams = make_loop(bundle, "ngram", GAMMA)
state, stats = loop.run(params, dparams, tokens, lengths, jax.random.key(0), GREEDY, N)
spec = generated(state, lengths)
rows, per_pass = [], {}
for i, k in enumerate(kinds):
    r = slice(4 * i, 4 * i + 4)
    m = metrics(
        np.asarray(stats.hist[r]).sum(0).tolist(),
        sum(map(len, spec[r])),
        int(stats.drafted[r].sum()),
    )
    per_pass[k] = m["tokens_per_target_call"]
    unmatched = m["rounds"] - m["drafted"] // GAMMA  # a round drafts all γ or nothing
    rows.append(
        [
            k,
            m["generated_tokens"],
            m["rounds"],
            f"{unmatched} ({unmatched / m['rounds']:.0%})",
            f"{m['acceptance_rate']:.2f}",
            f"{per_pass[k]:.2f}",
            bar(per_pass[k], GAMMA + 1, 10),
        ]
    )
table(
    f"prompt lookup, γ = {GAMMA}, T = 0 (4 prompts each)",
    ["workload", "tokens", "passes", "no match", "accept rate", "tokens / pass", ""],
    rows,
)
figure(
    "11_prompt_lookup",
    lambda ax: (
        ax.bar(kinds, [per_pass[k] for k in kinds]),
        ax.set_ylabel("tokens per target pass"),
        ax.set_title(f"prompt lookup, γ = {GAMMA}, T = 0"),
    ),
)

# %%
others = max(per_pass["code"], per_pass["facts"])
claim(
    per_pass["repetitive"] >= 1.5 * others,
    f"on repetitive text a target pass yields {per_pass['repetitive']:.2f} tokens, "
    f"at least {per_pass['repetitive'] / others:.1f}× what it yields on code or on facts",
)

# %% [markdown]
# ## Still exact: the text of greedy decoding
#
# Copying decides only how many tokens a pass yields, never which: autoregressive greedy
# decoding on the same 12 prompts writes the same tokens. (In exact arithmetic; in float32 a
# near-tie could part the two texts, as lesson 03 explains, and the check allows that as the
# test suite does: only where the target's top two logits are within 1e-3.)

# %%
ar, _ = make_loop(bundle, "ar")
ar_state, _ = ar.run(params, (), tokens, lengths, jax.random.key(0), GREEDY, N)
parted = text_features(graphdef, params, rows_ids, generated(ar_state, lengths)).parted(spec)
for row, at, gap in parted:  # float32 only: texts may part where the top two logits (nearly) tie
    console.print(f"prompt {row} parts at token {at}: top-2 logit gap {gap:.1e}")
claim(
    all(gap < NEAR_TIE for _, _, gap in parted),
    f"prompt lookup wrote exactly the greedy text on {len(spec) - len(parted)} of {len(spec)} "
    f"prompts{', and the rest part only at near-ties' if parted else ''}",
)

# %% [markdown]
# ## What to look at
#
# The "no match" column: on code and facts a large share of the rounds find nothing to copy
# (here over half, in a short run of 4 prompts × 48 tokens; `nanospec bench` in docs/results.md,
# 8 prompts × 128 tokens at γ = 2 to 15, measured 42–49% on code and 36–46% on facts, against
# 18–29% on repetitive text), and the drafts of those that do copy are mostly discarded (the
# first rejection ends the round), so a pass yields few tokens (the *tokens / pass* column:
# about 1.2 to 1.4 here, 1.5 to 2.3 in the longer bench runs), against about 3.2 on repetitive
# text here (2.1 to 3.6 in the bench runs) (drafting costs almost nothing either: `nanospec
# bench` shows prompt lookup's drafting cost as timing noise). On repetitive text the
# continuation is sitting in the prompt, and copying it is nearly free speed. A learned drafter
# (lessons 12–14) guesses everywhere; this one only where it has seen the answer.
