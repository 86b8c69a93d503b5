"""Benchmark workloads: prompts cut from fresh documents of each corpus style.

Each workload is a list of prompts made by the corpus generators with their own seed (so they
are not training documents), cut at a word boundary part-way through, so the model has to go on
writing in that style:

- facts:      prose about countries, cut early (the continuation needs facts and grammar);
- repetitive: drills, lists and quotes, cut past the middle (the continuation repeats text
              already in the prompt — where prompt lookup shines);
- code:       small Python snippets over the fact table, cut a third of the way in.

What this file deliberately leaves out: user-supplied prompt files (pass --prompt to generate).
"""

import random

from nanospec.corpus import code_document, facts_document, repetitive_document
from nanospec.errors import UserError

WORKLOADS = {  # name: (document maker, where to cut as a fraction of the document)
    "facts": (facts_document, 0.3),
    "repetitive": (repetitive_document, 0.55),
    "code": (code_document, 0.35),
}
MAX_PROMPT_CHARS = 400


def _cut(doc: str, fraction: float) -> str:
    """The document up to the last space before `fraction` of its length (at most 400 chars)."""
    end = min(int(len(doc) * fraction), MAX_PROMPT_CHARS)
    space = doc.rfind(" ", 0, end)
    return doc[: space if space > 10 else end]


def workload_prompts(name: str, n: int = 8, seed: int = 0) -> list[str]:
    if name not in WORKLOADS:
        raise UserError(f"Unknown workload {name!r}; choose one of {', '.join(WORKLOADS)}.")
    make, fraction = WORKLOADS[name]
    rng = random.Random(f"nanospec-bench-{name}-{seed}")
    return [_cut(make(rng), fraction) for _ in range(n)]
