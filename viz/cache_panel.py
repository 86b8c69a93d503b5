r"""SSD's speculation cache (nanospec/ssd/loop.py): branches pre-drafted for the next round.

Shown for `--method ssd` only. While the target verifies round r, the draft model guesses how
round r will end — k drafts accepted, then one token t* — and drafts round r+1 for each guess.
The panel lists those guesses grouped by k; once the verdict is on screen (↻ or ★), the guess
that came true is lit ◆: round r+1 drafts from it, with no drafting wait. Its title says where
round r's own drafts came from: ◆ the cache round r−1 built (a hit) or ◇ the backup (a miss).

    ╭─ speculation cache · round 2: ◆ hit, drafted from the cache · hits 1/1 (100%) ───────╮
    │ for round 3:  k=0 'amaribo' 'Novo'  k=1 'in' ','  k=2 ' The' '\n'  k=3 ' is' ' has'  │
    │ k=4 ◆' Spain' ' Austria'                                                             │
    │ ◆ outcome k=4, t*=' Spain' was cached: round 3 drafts from this branch.              │

(round 2 of tests/viz/data/capital-ssd.jsonl: fan-out 2, so two guesses of t* per k; all four
drafts were accepted and the bonus was ' Spain', which the drafter had guessed for k = 4.)

Mind the tenses (rounds.Speculation): the title looks back, the list and the ◆ look ahead.
The hit rate counts rounds 2.. up to the one on screen (round 1 has no cache to hit), as
nanospec.trace.summarize does. In a short panel (an 80×24 terminal: two lines) the sentence
shortens, then the unlit tokens are cut, so the lit branch always shows whole.
"""

from dataclasses import dataclass

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from viz.draw import CACHE_MARKS, token
from viz.playhead import Frame, Phase
from viz.rounds import Round, Speculation
from viz.stats_panel import flow

LIT = "reverse bold"  # the lit branch: reversed, so it stands out in monochrome too


@dataclass(frozen=True)
class CacheState:
    """What the panel shows: the round on screen and what the run around it says."""

    round: int  # 0-based index of the round on screen
    spec: Speculation | None  # its `ssd` event (None: the trace did not record one)
    built: bool  # the verify pass is on screen: the drafter built the cache meanwhile
    revealed: bool  # the verdict is on screen, so the round's outcome is known
    hits: int  # rounds 2..this one whose drafts came from the cache
    tries: int  # rounds 2..this one
    last: bool  # the run ended with this round: no round drafts from its cache
    backup: str  # what drafts after a miss: "neural", "fast" ("" if the trace does not say)
    t_text: str = ""  # the text of the outcome's t* (the round's ↻ or ★ token)


def cache_state(rounds: list[Round], frame: Frame, done: bool, backup: str = "") -> CacheState:
    """The panel's state for `frame` (rounds: the run's rounds so far; done: no more to come)."""
    rnd = frame.round
    r, spec = rnd.index, rnd.ssd
    later = [x.ssd for x in rounds[1 : r + 1] if x.ssd is not None]
    t_text = ""
    if spec is not None:  # t* is the round's own ↻ or ★ token (the trace stores it by id)
        t_text = rnd.extra.text if rnd.extra.token == spec.outcome[1] else f"#{spec.outcome[1]}"
    ph = frame.step.phase
    return CacheState(
        r,
        spec,
        ph >= Phase.VERIFY,
        ph >= Phase.EXTRA,
        sum(s.hit for s in later),
        len(later),
        done and r == len(rounds) - 1,
        backup,
        t_text,
    )


def _backup(s: CacheState) -> str:
    return f"the {s.backup} backup" if s.backup else "the backup"


def cache_title(s: CacheState, width: int) -> str:
    """Where this round's drafts came from, and the hit rate so far (shortened to fit)."""
    n = s.round + 1
    if s.spec is None:
        where = "not recorded in this trace"
    elif s.spec.hit:
        where = f"{CACHE_MARKS['hit'][0]} hit, drafted from the cache"
    else:
        why = "miss" if s.round else "no cache yet"
        where = f"{CACHE_MARKS['miss'][0]} {why}, {_backup(s)} drafted"
    rate = f" · hits {s.hits}/{s.tries} ({s.hits / s.tries:.0%})" if s.tries else ""
    full = f"speculation cache · round {n}: {where}{rate}"
    return full if len(full) + 6 <= width else f"cache · round {n}: {where}{rate}"


def branches(spec: Speculation, lit: int | None, cut: int | None) -> list[Text]:
    """One item per k: `k=1 ' is' ' was'`; the lit branch ◆ and reversed, never cut; the
    others cut to `cut` cells (None: whole)."""
    groups: dict[int, Text] = {}
    for j, (k, _, text) in enumerate(spec.cache):
        item = groups.setdefault(k, Text(f"k={k}", style="bold"))
        item.append(" ")
        if j == lit:
            item.append(f"{CACHE_MARKS['hit'][0]}{token(text)}", style=LIT)
        else:
            item.append(token(text, cut), style="dim" if lit is not None else "")
    return list(groups.values())


def verdict(s: CacheState, short: bool) -> list[Text]:
    """The sentence under the list, as items a line may break between (a short one: a single
    item): before the verdict, what the list is; after it, which branch the next round drafts
    from, or that it misses."""
    spec, n = s.spec, s.round + 2
    if not s.revealed:
        return (
            []
            if short
            else words(
                "Each guess: k drafts accepted, then t*. The verdict "
                "lights the one that comes true.",
                "dim italic",
            )
        )
    hit = spec.branch is not None
    symbol, style = CACHE_MARKS["hit" if hit else "miss"]
    k, t = spec.outcome[0], token(s.t_text)
    what = Text.assemble((symbol, style), f" ({k}, {t})" if short else f" outcome k={k}, t*={t}")
    if s.last:
        said = f"{'was' if hit else 'was not'} cached; the run ends here."
    elif hit:
        said = (
            f"cached: round {n} drafts from it."
            if short
            else f"was cached: round {n} drafts from this branch."
        )
    else:
        said = (
            f"not cached: round {n} misses."
            if short
            else f"not cached: round {n} is a miss, {_backup(s)} drafts it."
        )
    return [Text.assemble(what, " ", said)] if short else [what, *words(said)]


def words(sentence: str, style: str = "") -> list[Text]:
    """A sentence as one item per word, for `flow` to wrap between."""
    return [Text(w, style=style) for w in sentence.split()]


def cache_view(s: CacheState | None, width: int, height: int | None = None) -> Text:
    """The fullest layout that fits `height` lines (None: any): the list with every token
    whole, then the sentence on lines of its own; else a short sentence after the list, with
    the unlit tokens cut as little as fits (to 4 cells at the least)."""
    if s is None:
        return Text("The speculation cache appears with the first round.", style="italic")
    if s.spec is None:
        return Text("This trace has no ssd events, so the cache cannot be drawn.", style="italic")
    if not s.built:
        return flow(
            words(
                f"While the target verifies these drafts, the drafter guesses how "
                f"this round ends and pre-drafts round {s.round + 2} for each guess.",
                "dim italic",
            ),
            width,
            sep=" ",
        )
    lit = s.spec.branch if s.revealed else None
    head = Text(f"for round {s.round + 2}:", style="dim")
    out = flow([head] + branches(s.spec, lit, None), width)
    out.append("\n")
    out.append_text(flow(verdict(s, short=False), width, sep=" "))
    longest = max(len(token(text)) for _, _, text in s.spec.cache)
    for cut in [None, *range(longest - 1, 3, -1)]:  # the widest tokens that fit
        if height is None or len(out.plain.splitlines()) <= height:
            break
        out = flow(branches(s.spec, lit, cut) + verdict(s, short=True), width)
    return out


class CachePanel(Widget):
    """The speculation cache (state set by the app; the app hides the panel for other methods)."""

    state: reactive[CacheState | None] = reactive(None, layout=True)  # its height may change

    def get_content_height(self, container, viewport, width: int) -> int:
        """The full layout's lines: a panel of auto height never squeezes its own tokens."""
        return len(cache_view(self.state, width).plain.splitlines())

    def render(self):
        return cache_view(self.state, self.size.width, self.size.height)
