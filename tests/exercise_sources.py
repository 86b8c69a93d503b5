"""Learners' files for the exercise checker's tests: a way to run the checker on one, and
templates of the usual answers with the line a learner gets wrong left to fill in."""

import io
import textwrap

from rich.console import Console

from nanospec.exercises.sheet import check


def run_check(number: int, path) -> tuple[bool, str]:
    out = io.StringIO()
    ok = check(number, str(path), Console(file=out, width=1000, highlight=False))
    return ok, out.getvalue()


def write(tmp_path, source: str, name: str = "mine.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


# Exercise 2 asks for two functions: each mistake comes with a right version of the other.
ACCEPT_OK = "def accept_reject(u, p_x, q_x):\n    return u * q_x < p_x\n"
RESIDUAL_OK = (
    "import numpy as np\ndef residual(p, q):\n    res = np.maximum(p - q, 0)\n"
    "    return res / res.sum() if res.sum() > 0 else p\n"
)
# Exercise 1's loop, with its stopping rule, the room it leaves for drafts, what a round writes
# and what it returns left to fill in; and lines before the loop, at the start of a round and
# before its pass, with the text the loop starts from.
LOOP = """
def greedy_speculative(target, draft, prompt, gamma, max_new):
{before}    out = {start}
    while {stop}:
        ctx = prompt + out
{look}        drafts = []
        for _ in range(min(gamma, {room})):
            drafts.append(draft(ctx + drafts))
{skip}        choice = target(ctx + drafts)[len(ctx) - 1:]
        n = 0
        while n < len(drafts) and drafts[n] == choice[n]:
            n += 1
        out += {writes}
    return {out}
"""
RIGHT_LOOP = {
    "before": "",
    "start": "[]",
    "stop": "len(out) < max_new",
    "look": "",
    "room": "max_new - len(out) - 1",  # leave room for the target's token
    "skip": "",
    "writes": "drafts[:n] + [choice[n]]",
    "out": "out",
}
loop_with = lambda **wrong: LOOP.format(**{**RIGHT_LOOP, **wrong})
# The first token from a pass over the prompt; a pass over the context alone before each
# round's drafts; a stop at len(out) == max_new, with γ drafts every round.
PROMPT_FIRST = loop_with(start="[target(prompt)[-1]]")
TWO_PASSES = loop_with(
    look="        first = target(ctx)[-1]\n",
    skip="        if not drafts or drafts[0] != first:\n"
    "            out.append(first)\n"
    "            continue\n",
)
PAST_MAX_NEW = loop_with(stop="len(out) != max_new", room="gamma")
# A room for drafts that drops to none, plain decoding, once {} or fewer tokens are still wanted.
PLAIN_AT_END = "max_new - len(out) - 1 if max_new - len(out) > {} else 0"
# Exercise 3's round, with the law a rejected draft is replaced from left to fill in.
ROW = """
import numpy as np
def verify_row(rng, drafts, q, p):
    for i, x in enumerate(drafts):
        if rng.random() * q[i, x] >= p[i, x]:
            law = {replacement}
            return i, int(rng.choice(len(law), p=law / law.sum()))
    return len(drafts), int(rng.choice(p.shape[1], p=p[len(drafts)]))
"""
# Exercise 8's walk, with the law each sibling is tested against, what an accepted sibling
# returns, how ρ is updated and the law of the last draw left to fill in.
SIBLINGS = """
import numpy as np
def verify_siblings(rng, candidates, q, p):
    rho = np.asarray(p, float)
    for k, (x, qk) in enumerate(zip(candidates, q)):
        if rng.random() * qk[x] < {test}[x]:
            return {accepted}
        left = np.maximum(rho - qk, 0.0)
        rho = {update} if left.sum() > 0 else rho
    return int(rng.choice(len(rho), p={final}))
"""
siblings_with = lambda **wrong: SIBLINGS.format(
    **{"test": "rho", "accepted": "int(x)", "update": "left / left.sum()", "final": "rho", **wrong}
)
# Exercise 4's round, with the lines a learner gets wrong left to fill in: the block, the cache
# it keeps from the pass, the row it reads and the cache it returns.
ROUND = """
import numpy as np
def verify_and_rollback(target, cache, last, drafts):
    start = cache.length
    logits, {kept} = target({block}, cache)
    choice = np.argmax(logits, axis=-1)
    n = 0
    while n < len(drafts) and drafts[n] == choice[{row}]:
        n += 1
    return n, int(choice[n]), {cache}
"""
RIGHT = {
    "block": "[last, *drafts]",
    "kept": "cache",
    "row": "n",
    "cache": "cache._replace(length=start + n + 1)",
}
round_with = lambda **wrong: ROUND.format(**{**RIGHT, **wrong})
COUNTS = "import jax.numpy as jnp\ndef accepted_counts(u, p_x, q_x, n_draft):\n"
PROPOSED = "    proposed = jnp.arange(u.shape[1])[None] < n_draft[:, None]\n"
GAMMA = "def best_gamma(alpha, c, r, gammas):\n    s = [{} for g, rg in zip(gammas, r)]\n"
E = "sum(alpha ** i for i in range(g + 1))"
LOOKUP = """
def lookup(context, gamma, max_ngram=3, min_ngram=1):
    L = len(context)
    for n in range(max_ngram, min_ngram - 1, -1):
        if L <= n:
            continue
        for j in {ends}:
            if context[j - n + 1: j + 1] == context[L - n:]:
                return {copy}
    return []
"""
WRAP = "[context[j + 1 + i % (L - 1 - j)] for i in range(gamma)]"
