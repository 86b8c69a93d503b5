"""The exercise checker names a learner's mistake: each wrong answer here is one a learner makes,
with the words its failure message must contain; and right answers unlike the reference
solutions pass."""

import pytest

from nanospec.exercises import sampled
from tests.exercise_sources import (
    ACCEPT_OK,
    COUNTS,
    GAMMA,
    LOOKUP,
    PAST_MAX_NEW,
    PLAIN_AT_END,
    PROMPT_FIRST,
    PROPOSED,
    RESIDUAL_OK,
    ROW,
    TWO_PASSES,
    WRAP,
    E,
    loop_with,
    round_with,
    run_check,
    siblings_with,
    write,
)

# More mistakes a learner makes, each with the words that must name it.
MISTAKES = [
    (
        1,
        "def greedy_speculative(target, draft, prompt, gamma, max_new):\n"
        "    out = []\n"
        "    while len(out) < max_new:\n"
        "        ctx = prompt + out\n"
        "        drafts = [draft(ctx)]\n"
        "        choice = target(ctx + drafts)[len(ctx) - 1:]\n"
        "        out += drafts if drafts[0] == choice[0] else [choice[0]]\n"
        "        out.append(choice[-1])\n"
        "    return out\n",
        "stop at max_new",
    ),
    (
        1,
        "def greedy_speculative(target, draft, prompt, gamma, max_new):\n"
        "    return [draft(prompt)] * max_new\n",
        "differs from greedy decoding at new token",
    ),
    (
        1,
        loop_with(stop="len(out) < max_new - 1"),
        "yours returned 4: keep going until max_new new tokens are written",
    ),
    (
        1,
        loop_with(out="prompt + out"),
        "yours returned 6: return only the new tokens, not the prompt before them",
    ),
    (
        2,
        "def accept_reject(u, p_x, q_x):\n    return u > p_x / q_x\n" + RESIDUAL_OK,
        "the comparison is reversed",
    ),
    (
        2,
        "def accept_reject(u, p_x, q_x):\n    return u < q_x / p_x\n" + RESIDUAL_OK,
        "ratio is upside down",
    ),
    (
        2,
        "def accept_reject(u, p_x, q_x):\n    return u * q_x <= p_x\n" + RESIDUAL_OK,
        "compare strictly",
    ),
    (
        2,
        ACCEPT_OK + "import numpy as np\ndef residual(p, q):\n    return np.maximum(p - q, 0)\n",
        "not 1: divide by the sum of max(0, p − q)",
    ),
    (
        2,
        ACCEPT_OK + "import numpy as np\ndef residual(p, q):\n    r = np.maximum(q - p, 0)\n"
        "    return r / r.sum() if r.sum() > 0 else p\n",
        "You took max(0, q − p)",
    ),
    (
        2,
        ACCEPT_OK + "import numpy as np\ndef residual(p, q):\n    r = p - q\n"
        "    return r / r.sum()\n",
        "negative entries",
    ),
    (
        3,
        "import numpy as np\ndef verify_row(rng, drafts, q, p):\n"
        "    for i, x in enumerate(drafts):\n"
        "        if rng.random() * q[i, x] >= p[i, x]:\n"
        "            r = np.maximum(p[i] - q[i], 0)\n"
        "            return i, int(rng.choice(len(r), p=r / r.sum()))\n"
        "    return len(drafts), int(rng.choice(p.shape[1], p=p[len(drafts) - 1]))\n",
        "the bonus comes from p[γ]",
    ),
    (3, "def verify_row(rng, drafts, q, p):\n    return [0]\n", "must return (n_accepted, token)"),
    (
        3,
        ROW.format(replacement="np.maximum(p[i + 1] - q[i], 0)"),  # the next row's p
        "yours gave (2, 0). n_accepted is right, the token is not: after drafts[2] is rejected, "
        "the replacement comes from norm(max(0, p[2] − q[2]))",
    ),
    (
        3,
        ROW.format(replacement="np.maximum(p[i] - q[i], 0) ** 2"),  # right for one-hot laws
        "the token emitted at drafts[0]'s position should have the law p[0] = [.40 .30 .20 .10]",
    ),
    (4, round_with(cache="cache"), "You never rolled back"),
    (
        4,
        round_with(cache="cache._replace(length=start + n + 2)"),
        "One slot too many: slot 8 holds the keys of the rejected draft",
    ),
    (4, round_with(block="list(drafts)"), "it must be over [last] + drafts = [5,"),
    (4, round_with(row="n + 1"), "Row i scores the token after block[i]"),
    (
        4,
        round_with(cache="cache._replace(k=tuple(b[:, :9] for b in cache.k))"),
        "roll back by setting the length alone",
    ),
    (
        5,
        COUNTS + PROPOSED + "    return jnp.argmin((u * q_x < p_x) & proposed, axis=1)\n",
        "answers 0 for a row with none",
    ),
    (
        5,
        COUNTS + "    return jnp.sum(jnp.cumprod(u * q_x < p_x, axis=1), axis=1)\n",
        "You counted padding",
    ),
    (
        5,
        COUNTS + "    n = 0\n    while u[0, n] * q_x[0, n] < p_x[0, n]:\n        n += 1\n"
        "    return jnp.array([n])\n",
        "cannot run inside jax.jit: at line 4 of mine.py",
    ),
    (
        5,
        COUNTS + PROPOSED + "    return jnp.sum(jnp.cumprod((u * q_x <= p_x) & proposed, axis=1), "
        "axis=1)\n",
        "compare strictly, u·q < p",
    ),
    (
        6,
        GAMMA.format(f"{E} / (g * c + rg)") + "    return s.index(max(s))\n",
        "That looks like a position in the list",
    ),
    (
        6,
        GAMMA.format(f"{E} / rg") + "    return gammas[s.index(max(s))]\n",
        "a model with free drafts",
    ),
    (
        6,
        GAMMA.format(f"{E} / (g * c + rg * (g + 1))") + "    return gammas[s.index(max(s))]\n",
        "a verify pass costing r per token",
    ),
    (
        6,
        GAMMA.format("(1 - alpha ** (g + 1)) / (1 - alpha) / (g * c + rg)")
        + "    return gammas[s.index(max(s))]\n",
        "with α = 1 and c = 0.01, your best_gamma raised ZeroDivisionError at line 2 of mine.py",
    ),
    (7, LOOKUP.format(ends="range(n - 1, L)", copy=WRAP), "the 'occurrence' is the suffix itself"),
    (
        7,
        LOOKUP.format(ends="range(n - 1, L)", copy="context[j + 1: j + 1 + gamma]"),
        "if you matched the suffix with itself",
    ),
    (
        7,
        LOOKUP.format(ends="range(L - 2, n - 2, -1)", copy=WRAP),
        "You copied after the latest occurrence",
    ),
    (
        7,
        "def lookup(context, gamma, max_ngram=3, min_ngram=1):\n    return (9, 7, 8, 9)\n",
        "lookup must return a list of ints; yours returned a tuple, (9, 7, 8, 9)",
    ),
    (
        7,
        "def lookup(context, gamma, max_ngram=3, min_ngram=1):\n    raise ValueError('oops')\n",
        "your lookup raised ValueError at line 2 of mine.py: oops",
    ),
    (
        8,
        "def verify_siblings(rng, candidates, q, p):\n    return candidates[0]\n",
        "the token should have the law",
    ),
    (8, siblings_with(accepted="k"), "That is the law of k, the accepted sibling's position"),
    (8, siblings_with(final="p"), "drawing from p when every sibling is rejected"),
]


@pytest.mark.parametrize("number, source, says", MISTAKES)
def test_common_mistakes_are_named(tmp_path, number, source, says):
    ok, out = run_check(number, write(tmp_path, source))
    assert not ok
    assert says in " ".join(out.split()), out


# Mistakes that were told a neighbour's hint (review 2026-12-07): what each must be told, and the
# neighbour's words it must no longer get.
NOT_A_NEIGHBOURS_HINT = [
    (  # ex1-F1: one pass a round, but no bonus when every draft agrees
        1,
        loop_with(
            room="max_new - len(out)",
            writes="drafts[:n] + [choice[n]] * (n < len(drafts))",
            out="out[:max_new]",
        ),
        "when all γ drafts agree, the same pass's last entry is the bonus token. Add it",
        "Score all of a round's drafts",
    ),
    (  # ex1-F1: the bonus from a second pass over the same tokens
        1,
        loop_with(
            writes="drafts + [target(ctx + drafts)[-1]] if n == len(drafts) else "
            "drafts[:n] + [choice[n]]"
        ),
        "You called target twice on the same tokens",
        "Score all of a round's drafts",
    ),
    (  # ex1-F1: no bonus, and no room left in the last round: the loop never ends
        1,
        loop_with(writes="drafts[:n] + [choice[n]] * (n < len(drafts))"),
        "its last 3 passes were all over the same 5 tokens: a round that writes no token "
        "repeats forever",
        "Score all of a round's drafts",
    ),
    (  # ex1-F1: γ − 1 drafts a round, then the target's token: also γ tokens a pass
        1,
        loop_with(room="max_new - len(out) - 1, gamma - 1"),
        "your passes wrote 3 tokens each, not γ + 1 = 4: draft γ tokens",
        "bonus token. Add it",
    ),
    (  # ex1-F1: a second pass for the correction
        1,
        loop_with(
            writes="drafts[:n] + [choice[n] if n == len(drafts) else target(ctx + drafts[:n])[-1]]"
        ),
        "Make one call per round, over context + drafts",
        "Score all of a round's drafts",
    ),
    (  # EX-1/EX-4: the pass over the prompt that the budget allows, then one round too many
        1,
        loop_with(before="    target(prompt)\n", room=PLAIN_AT_END.format("gamma")),
        "you called target 13 times; the checker allows 12: one pass for each of the 11 rounds "
        "the stub's rule makes (γ drafts, or as many as still fit), plus one over the prompt. "
        "Your first pass, over the prompt before any drafting, is the one extra pass allowed. "
        "Your loop made 12 rounds where 11 were needed: 2 of them drafted fewer tokens than "
        "still fit (the first, with 27 of 30 written, drafted 0 where 2 fit)",
        "outside",
    ),
    (  # EX-1: no pass outside the rounds, but rounds that draft fewer than still fit
        1,
        loop_with(room=PLAIN_AT_END.format("2 * gamma")),
        "Your loop made 15 rounds where 12 were needed: 5 of them drafted fewer tokens than "
        "still fit (the first, with 24 of 30 written, drafted 0 where 3 fit)",
        "over the prompt before any drafting",
    ),
    (  # EX-2: two passes a round, the first over the context alone: 2 tokens a pass, not 1
        1,
        TWO_PASSES,
        "you called target 5 times; the checker allows 4: one pass for each of the 3 rounds the "
        "stub's rule makes (γ drafts, or as many as still fit), plus one over the prompt. 2 of "
        "your 5 passes were over a context alone, before the loop drafted from that context: "
        "the pass over context + drafts already gives that token",
        "wrote 1 token each",
    ),
    (  # EX-3: a loop that writes every round but steps over max_new never ends
        1,
        PAST_MAX_NEW,
        "your loop called target 29 times and had still not returned, and the tokens it passes "
        "to target had grown to 50 past the prompt, far beyond the 5 asked for",
        "a round that writes no token",
    ),
    (  # EX-6: the right rate from 1 − u, verdicts the given u does not decide
        2,
        "def accept_reject(u, p_x, q_x):\n    return 1 - u < p_x / q_x\n" + RESIDUAL_OK,
        "your rates are right, but a verdict is not: with p(x) = 0.05, q(x) = 0.20 and "
        "u = 0.00025, below p(x)/q(x) = 0.250, the draft must be accepted; yours rejects it. "
        "You compared 1 − u",
        "All checks passed",
    ),
    (  # ex2-F1: uniforms of its own, not the u it was given
        2,
        "import numpy as np\ndef accept_reject(u, p_x, q_x):\n"
        "    return np.random.default_rng(1).random(np.shape(u)) < p_x / q_x\n" + RESIDUAL_OK,
        "your verdicts do not follow the uniforms you were given: use u",
        "It looks like",
    ),
    (  # ex3-F1: accepting with p(x), forgetting q: a count of drafts is not a token
        3,
        "import numpy as np\ndef verify_row(rng, drafts, q, p):\n"
        "    for i, x in enumerate(drafts):\n"
        "        if rng.random() >= p[i, x]:\n"
        "            res = np.maximum(p[i] - q[i], 0)\n"
        "            return i, int(rng.choice(len(res), p=res / res.sum()))\n"
        "    return len(drafts), int(rng.choice(p.shape[1], p=p[len(drafts)]))\n",
        "(0, 1, 2) should have the law [.40 .12 .48] but came out [.80 .15 .05] over 10,000 "
        "draws (total variation 0.427; n_accepted = 2: 5.3% instead of 48.0%",
        "token 2",
    ),
    (  # ex4-F3: the cache it was given rolled back, not the one the pass wrote
        4,
        round_with(kept="new_cache"),
        "your cache has none of this round's keys: slot 5, where the pass wrote the keys of "
        "`last`, holds what it held before the pass. Return the cache target returned",
        "the slots below the length must hold",
    ),
    (  # ex6-F3: wrong only where r grows evenly, so the message names that profile
        6,
        GAMMA.format(f"{E} / (g * c + rg)")
        + "    steps = {round(b - a, 9) for a, b in zip(r, r[1:])}\n"
        + "    even = len(steps) == 1 and r[1] > r[0]\n"
        + "    return gammas[s.index(min(s) if even else max(s))]\n",
        "r = 1 + 0.065·γ (growing, at an assumed slope)",
        "lesson 01",
    ),
    (  # ex8-F1: ρ left unnormalised: the first case's law is also "tested against p"'s
        8,
        siblings_with(update="left", final="rho / rho.sum()"),
        "That is the law you get by leaving ρ unnormalised after a rejection",
        "testing every sibling against p",
    ),
    (  # ex8-F1: tested against p: the same first-case law, told apart by the i.i.d. case
        8,
        siblings_with(test="p"),
        "That is the law you get by testing every sibling against p",
        "unnormalised",
    ),
]


@pytest.mark.parametrize("number, source, says, not_says", NOT_A_NEIGHBOURS_HINT)
def test_each_mistake_gets_its_own_hint(tmp_path, number, source, says, not_says):
    ok, out = run_check(number, write(tmp_path, source))
    said = " ".join(out.split())
    assert not ok
    assert says in said and not_says not in said, out


def test_a_law_two_mistakes_share_names_both_when_no_case_tells_them_apart(tmp_path, monkeypatch):
    """ex8-F1: with only the point-mass case, ρ left unnormalised and every sibling tested
    against p give the same law, and the hint must not pick one of them."""
    monkeypatch.setattr(sampled, "SIBLING_CASES", sampled.SIBLING_CASES[:1])
    ok, out = run_check(8, write(tmp_path, siblings_with(update="left", final="rho / rho.sum()")))
    said = " ".join(out.split())
    assert not ok
    assert "Your law fits more than one mistake:" in said, out
    assert "against p" in said and "unnormalised" in said, out


# Right answers that differ from the reference solutions: they must pass too.
ALSO_RIGHT = [
    # Within exercise 1's budget of rounds + 1 passes, as its stub says: lesson 03's pass over
    # the prompt, unused; the first token from that pass; a last round that decodes plainly
    # (one round more than needed, which the spare pass covers).
    (1, loop_with(before="    target(prompt)\n")),
    (1, PROMPT_FIRST),
    (1, loop_with(room=PLAIN_AT_END.format("gamma"))),
    (
        2,
        "def accept_reject(u, p_x, q_x):\n    u *= q_x\n    return u < p_x\n" + RESIDUAL_OK,
    ),  # working in place on the inputs is allowed
    (
        4,
        round_with(
            cache="cache._replace(length=start + n + 1, k=tuple(b.at[:, int(start[0]) + n "
            "+ 1:].set(0) for b in cache.k))"
        ),
    ),  # erasing stale slots is allowed
    (
        5,
        "import numpy as np\ndef accepted_counts(u, p_x, q_x, n_draft):\n"  # numpy's names work
        "    ok = (u * q_x < p_x) & (np.arange(u.shape[1])[None] < n_draft[:, None])\n"
        "    return np.cumprod(ok, axis=1).sum(axis=1)\n",
    ),
    (
        6,
        "import numpy as np\ndef best_gamma(alpha, c, r, gammas):\n"
        "    g = np.array(gammas)\n"
        "    e = g + 1.0 if alpha == 1 else (1 - alpha ** (g + 1)) / (1 - alpha)\n"
        "    return gammas[int(np.argmax(e / (g * c + np.array(r))))]\n",
    ),
]


# Loops within exercise 1's budget of rounds + 1 target passes (the stub says so).
@pytest.mark.parametrize("number, source", ALSO_RIGHT)
def test_other_right_answers_pass(tmp_path, number, source):
    ok, out = run_check(number, write(tmp_path, source))
    assert ok, out
