"""Figures for slides: one SVG per key idea of the course (`make figures`).

    python -m nanospec.slides [--out runs/figures]

    verify_block.svg   one target pass over [last, x₁ … x_γ]: which law scores which draft,
                       and where the bonus token's law comes from
    residual.svg       p, q, and the residual norm(max(0, p − q)) a rejected token is redrawn from
    tree_mask.svg      a token tree and the attention mask that verifies it in one pass
    eagle_pairs.svg    EAGLE's input pairs: the target's feature at i with the token at i + 1
    best_gamma.svg     the cost model: predicted speedup against γ, and its best γ
    crossover.svg      serving: output tokens/s against concurrency, where speculation stops
                       paying (the loadtest's own plot of its recorded run)

Each figure is drawn from the library's own code where there is code to draw from: the
residual from `verify.residual`, the mask from `trees.Tree.ancestor_mask`, the speedups from
the cost model of lesson 09 (E(α, γ) from `serving.adaptive.expected_tokens`), the verify
block's indices as `verify.verify_row` reads them. Needs matplotlib (the `figures` extra).

What this file deliberately leaves out: styling for a particular slide template.
"""

import argparse
import io
import shutil
import sys
from pathlib import Path

import numpy as np

from nanospec.errors import UserError
from nanospec.fileio import atomic_write

REPO = Path(__file__).resolve().parent.parent
CROSSOVER = REPO / "docs" / "load" / "throughput-facts.svg"  # `nanospec loadtest --plots`


def pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError(
            "make figures needs matplotlib: pip install -c constraints.txt -e '.[figures]'."
        ) from None
    return plt


def box(ax, x, y, text, color="#dde6f3", w=0.9, h=0.6):
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(
        FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.03", fc=color, ec="#334")
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=11)


def arrow(ax, a, b, color="#334"):
    ax.annotate("", xy=b, xytext=a, arrowprops={"arrowstyle": "->", "color": color})


def verify_block(ax, gamma: int = 4):
    """Inputs [last, x₁ … x_γ] at the bottom, the pass's γ + 1 output laws on top: p_i, the
    law after input i − 1, scores draft x_i (verify_row reads p[i − 1] at drafts[i − 1]), and
    p_{γ+1}, after x_γ, is the bonus token's law (verify.bonus_probs)."""
    inputs = ["last"] + [f"x{i}" for i in range(1, gamma + 1)]
    for i, name in enumerate(inputs):
        box(ax, i, 0, name)
        box(ax, i, 2, f"p{i + 1}", color="#f3e3c8")
        arrow(ax, (i, 0.3), (i, 1.7))
    for i in range(1, gamma + 1):  # p_i judges x_i, one column to its right
        arrow(ax, (i - 1 + 0.3, 1.75), (i - 0.25, 0.35), color="#1a7f37")
    box(ax, gamma + 1.2, 2, "bonus", color="#d8f0dc", w=1.1)
    arrow(ax, (gamma + 0.45, 2), (gamma + 0.65, 2), color="#1a7f37")
    ax.text(gamma / 2, 3, "one target pass: γ + 1 laws for γ drafts", ha="center", fontsize=12)
    ax.text(
        gamma / 2,
        -1,
        "green: p_i judges x_i by min(1, p_i(x_i) / q_i(x_i)); if all γ pass, "
        "p_{γ+1} gives a free bonus token",
        ha="center",
        fontsize=9,
    )
    ax.set(xlim=(-0.8, gamma + 2), ylim=(-1.4, 3.4))
    ax.axis("off")


def residual(ax):
    """Lesson 04's p and q, and the residual a rejected token is redrawn from."""
    import jax.numpy as jnp

    from nanospec.verify import residual as residual_of

    p = np.array([0.40, 0.25, 0.20, 0.10, 0.05])
    q = np.array([0.10, 0.45, 0.05, 0.30, 0.10])
    r = np.asarray(residual_of(jnp.asarray(p), jnp.asarray(q)))
    x = np.arange(len(p))
    ax.bar(x - 0.27, p, 0.27, label="target p")
    ax.bar(x, q, 0.27, label="draft q")
    ax.bar(x + 0.27, r, 0.27, label="residual norm(max(0, p − q))")
    ax.set(
        xlabel="token",
        ylabel="probability",
        xticks=x,
        title=f"after a rejection (chance 1 − Σ min(p, q) = {1 - np.minimum(p, q).sum():.2f})",
    )
    ax.legend(fontsize="small")


def tree_mask(axes, widths=(2, 2)):
    """The tree (left) and its ancestor mask (right): node i attends to node j iff j is i or
    one of its ancestors, so siblings never see each other."""
    from nanospec.trees.tree import Tree

    tree = Tree.from_branching(widths)
    depth, parents = tree.depth, tree.parents
    left, right = axes
    xs = {}
    for d in range(int(depth.max()) + 1):
        nodes = [i for i in range(tree.size) if depth[i] == d]
        for k, i in enumerate(nodes):
            xs[i] = (k - (len(nodes) - 1) / 2, -d)
    for i, parent in enumerate(parents):
        if parent >= 0:
            left.plot(*zip(xs[parent], xs[i]), color="#889")
    for i, (x, y) in xs.items():
        left.scatter([x], [y], s=500, color="#f3e3c8" if i else "#dde6f3", ec="#334", zorder=2)
        left.text(x, y, str(i), ha="center", va="center", zorder=3)
    left.set_title(f"a token tree (branching {widths}); node 0: the last token")
    left.axis("off")
    right.imshow(tree.ancestor_mask, cmap="Greens", vmin=0, vmax=1.4)
    right.set(
        title="attention mask: row i sees column j",
        xlabel="j",
        ylabel="i",
        xticks=range(tree.size),
        yticks=range(tree.size),
    )


def eagle_pairs(ax, n: int = 5):
    """EAGLE drafts in feature space: its input at i pairs the target's feature f_i with the
    token at i + 1, and it predicts f_{i+1} (heads/modules.py, EagleHead)."""
    for i in range(n):
        box(ax, i, 0, f"t{i + 1}")
        box(ax, i, 1.4, f"f{i + 1}", color="#f3e3c8")
        arrow(ax, (i, 0.3), (i, 1.1))
    for i in range(n - 1):
        box(ax, i + 0.5, 3, f"(f{i + 1}, t{i + 2})", color="#d8f0dc", w=1.0)
        arrow(ax, (i, 1.7), (i + 0.45, 2.7), color="#1a7f37")
        arrow(ax, (i + 1, 0.3), (i + 0.55, 2.7), color="#1a7f37")
        ax.text(i + 0.5, 3.55, f"→ f̂{i + 2}", ha="center", fontsize=9)
    ax.text(
        (n - 1) / 2,
        -0.9,
        "tokens t (bottom), the target's features f (middle), EAGLE's "
        "input pairs (top): feature at i, token at i + 1",
        ha="center",
        fontsize=9,
    )
    ax.set(xlim=(-0.8, n - 0.2), ylim=(-1.3, 4.0))
    ax.axis("off")


def best_gamma(ax, c: float = 0.1, slope: float = 0.12, alphas=(0.6, 0.8, 0.9)):
    """Predicted speedup E(α, γ) / (γ·c + r(γ + 1)) against γ, with r(n) = 1 + slope·(n − 1)
    (a pass over n tokens, in one-token passes; lesson 09 measures c and r on the machine)."""
    from nanospec.serving.adaptive import expected_tokens

    gammas = np.arange(1, 17)
    for alpha in alphas:
        s = np.array([expected_tokens(alpha, g) / (g * c + 1 + slope * g) for g in gammas])
        ax.plot(gammas, s, marker="o", ms=3, label=f"α = {alpha}")
        best = int(gammas[s.argmax()])
        ax.annotate(
            f"best γ = {best}",
            (best, s.max()),
            textcoords="offset points",
            xytext=(4, 6),
            fontsize=8,
        )
    ax.axhline(1, color="grey", linestyle="--")
    ax.set(
        xlabel="γ (drafts per round)",
        ylabel="predicted speedup",
        title=f"the cost model: c = {c}, r(n) = 1 + {slope}(n − 1)",
    )
    ax.legend(fontsize="small")


def write(plt, fig, path: Path) -> None:
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    atomic_write(path, buf.getvalue())


def make_all(out: Path) -> list[Path]:
    """Write every figure into `out`; returns their paths."""
    plt = pyplot()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw, size, cols in (
        ("verify_block", verify_block, (7.5, 3.6), 1),
        ("residual", residual, (6.4, 3.6), 1),
        ("tree_mask", tree_mask, (9.0, 3.8), 2),
        ("eagle_pairs", eagle_pairs, (7.5, 3.6), 1),
        ("best_gamma", best_gamma, (6.4, 3.6), 1),
    ):
        fig, ax = plt.subplots(1, cols, figsize=size, layout="constrained")
        draw(ax)
        written.append(out / f"{name}.svg")
        write(plt, fig, written[-1])
    if not CROSSOVER.exists():
        raise UserError(f"{CROSSOVER} is missing; `nanospec loadtest --plots docs/load` makes it.")
    shutil.copyfile(CROSSOVER, out / "crossover.svg")
    written.append(out / "crossover.svg")
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nanospec.slides", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "runs" / "figures",
        help="the folder to write the SVGs into (default runs/figures)",
    )
    args = parser.parse_args(argv)
    try:
        for path in make_all(args.out):
            print(f"figure written: {path}")
    except UserError as e:
        print(f"nanospec: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
