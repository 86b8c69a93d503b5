"""Trace events for token-tree rounds: the tree drafted, how the walk judged it, the path kept.

A tree round (trees/loop.py) is traced as

  tree       nodes = [{node, parent, depth, token, text, q, p, verdict}, ...] for every drafted
             node in breadth-first order (node 0, the last committed token, is the root), and
             path = the accepted nodes from the root;
  resample | bonus | round_end    exactly as for a chain (trace.py)

`q` is the node's probability under the law it was drafted from (1 for a top-k sibling: a
point mass), `p` under the target's law at its parent. `verdict` is what the walk did with it:

  accept   on the accepted path;
  reject   tested and rejected: a sibling tried before the path's node at its depth, or,
           where the walk stopped, every child of the last accepted node;
  skip     never tested (a sibling after the accepted one, or below a rejected node).

Siblings are tried in order, each against the residual left by the ones before it
(tree.verify_tree_row), which is why a second sibling can be accepted where p alone is small.
What this file deliberately leaves out: the residual each sibling was tested against.
"""

import numpy as np

from nanospec.trace import SCHEMA, to_numpy, top_list


def tree_verdicts(parents, path: list[int], n_accepted: int, children) -> list[str]:
    """Each node's verdict (node 0 included, as "root"), from the accepted path.

    >>> tree_verdicts((-1, 0, 0, 1), path=[0, 2], n_accepted=1, children=[[1, 2], [3, -1], [-1, -1], [-1, -1]])
    ['root', 'reject', 'accept', 'skip']
    """
    verdicts = ["skip"] * len(parents)
    verdicts[0] = "root"
    for d in range(1, n_accepted + 1):
        node = path[d]
        verdicts[node] = "accept"
        for sibling in children[path[d - 1]]:
            if sibling == node:
                break
            verdicts[sibling] = "reject"
    for child in children[path[n_accepted]]:  # where the walk stopped, every child was tried
        if child >= 0:
            verdicts[child] = "reject"
    return verdicts


def events_from_tree_step(
    trace, tok, round_idx: int, tree, timings: dict | None = None
) -> list[dict]:
    """One tree round's TreeTrace -> its events, row by row."""
    t = to_numpy(trace)
    timings = timings or {}
    children = np.asarray(tree.children)
    events: list[dict] = []
    for b in range(t["tokens"].shape[0]):
        if not t["live"][b]:
            continue
        head = {"schema": SCHEMA, "round": round_idx, "row": b}
        start, n = int(t["start"][b]), int(t["n_accepted"][b])
        path = [int(x) for x in t["path"][b, : n + 1]]
        verdicts = tree_verdicts(tree.parents, path, n, children.tolist())
        nodes = [
            {
                "node": c,
                "parent": int(tree.parents[c]),
                "depth": int(tree.depth[c]),
                "token": int(t["tokens"][b, c]),
                "text": tok.token_str(int(t["tokens"][b, c])),
                "q": float(t["q_x"][b, c]),
                "p": float(t["p_x"][b, c]),
                "verdict": verdicts[c],
            }
            for c in range(1, tree.size)
        ]
        events.append({**head, "type": "tree", "nodes": nodes, "path": path})
        y = int(t["token"][b])
        extra = {**head, "position": start + n, "token": y, "text": tok.token_str(y)}
        if t["is_bonus"][b]:
            extra.update(type="bonus", p=float(t["token_prob"][b]))
        else:  # the residual left after every child of the last node was rejected
            extra.update(
                type="resample",
                residual=float(t["token_prob"][b]),
                p=float(t["token_p"][b]),
                q=None,
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
                "drafted": tree.size - 1,
                "emitted": emitted,
                "emitted_text": tok.decode(emitted),
                "length": start + k,
                "draft_ms": 1e3 * timings.get("draft_s", 0.0),
                "verify_ms": 1e3 * timings.get("verify_s", 0.0),
            }
        )
    return events
