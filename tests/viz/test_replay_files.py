"""Reading traces for replay: the shipped example parses, and every bad file is one clear sentence.

Bad files are made from the good one the way they happen in life: a missing path, a download
cut mid-line, a file cut at a line boundary (no run_end), a trace from another schema version,
a round with an event missing, an empty file, a JSON file that is not a trace. Each must be a
`UserError` whose message is one line naming the problem — and through the CLI, exit code 2
with that line on stderr and no traceback. Random corruptions are either refused that way or
drawn, every phase of every round, without an exception.
"""

import copy
import io
import json
import random
import re

import pytest
from rich.console import Console

from nanospec.cli import main
from nanospec.errors import UserError
from nanospec.trace import summarize
from viz.charts import charts
from viz.playhead import Phase, at_phase, chart, reveal
from viz.round_table import round_table
from viz.rounds import load_recording
from viz.stats_panel import stats_view
from viz.status_bar import settings_text
from viz.text_panel import text_view
from viz.timeline import timeline_view


def test_the_example_trace_parses_into_its_rounds(recording, trace_path):
    events = [json.loads(line) for line in trace_path.read_text().splitlines()]
    assert recording.start["prompt"] == "The capital of France is"
    rounds = recording.rounds
    assert [r.accepted for r in rounds] == [3, 0, 4, 4]
    assert [r.extra.kind for r in rounds] == ["resample", "resample", "bonus", "bonus"]
    assert all(r.gamma == 4 and len(r.judgements) == 4 for r in rounds)
    assert [r.judged for r in rounds] == [4, 1, 4, 4]
    assert rounds[-1].cut_short and not any(r.cut_short for r in rounds[:-1])  # EOS in round 4
    # a resampled token carries three numbers: the residual's (the law it was drawn from), p, q
    e = rounds[0].extra
    assert (e.text, round(e.residual, 2), round(e.p, 2), round(e.q, 2)) == (
        " France",
        0.69,
        0.35,
        0.13,
    )
    assert rounds[2].extra.residual is None and rounds[2].extra.prob == rounds[2].extra.p
    assert recording.compile_ms > 0  # compiling is its own event, never inside round 1's times
    # the rounds carry every event, so statistics from them equal the trace's own summary
    assert summarize(recording.events()) == events[-1]["summary"]


def lines_of(path):
    return path.read_text().splitlines(keepends=True)


def broken(tmp_path, trace_path, kind):
    """A bad trace file of the given kind (or a missing path)."""
    lines = lines_of(trace_path)
    out = tmp_path / f"{kind}.jsonl"
    if kind == "missing":
        return tmp_path / "no-such-trace.jsonl"
    if kind == "cut_mid_line":
        text = "".join(lines)
        out.write_text(text[: len(text) // 2])
    elif kind == "cut_at_line":
        out.write_text("".join(lines[: len(lines) // 2]))
    elif kind == "schema":
        out.write_text("".join(line.replace('"schema": 2', '"schema": 3') for line in lines))
    elif kind == "round_missing_event":
        out.write_text("".join(line for line in lines if '"type": "verify"' not in line))
    elif kind == "bad_round_end":
        out.write_text("".join(line.replace('"drafted": 4', '"drafted": "four"') for line in lines))
    elif kind == "empty":
        out.write_text("")
    elif kind == "not_a_trace":
        out.write_text('{"schema": 1, "type": "hello"}\n')
    return out


CASES = {
    "missing": "not found",
    "cut_mid_line": "not valid JSON",
    "cut_at_line": "truncated",
    "schema": "schema 3",
    "round_missing_event": "round 1 is incomplete",
    "bad_round_end": "disagree about γ",
    "empty": "does not start with a run_start",
    "not_a_trace": "does not start with a run_start",
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_bad_trace_is_one_clear_sentence(tmp_path, trace_path, kind):
    path = broken(tmp_path, trace_path, kind)
    with pytest.raises(UserError) as err:
        load_recording(path)
    message = str(err.value)
    assert CASES[kind] in message and "\n" not in message


@pytest.mark.parametrize("kind", ["missing", "cut_mid_line", "schema"])
def test_the_cli_reports_a_bad_trace_with_exit_code_2(tmp_path, trace_path, capsys, kind):
    path = broken(tmp_path, trace_path, kind)
    code = main(["demo", "--replay", str(path), "--screenshot", str(tmp_path / "out.svg")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("nanospec: error: ") and CASES[kind] in err
    assert "Traceback" not in err and err.count("\n") == 1
    assert not (tmp_path / "out.svg").exists()


def render_every_phase(recording) -> None:
    """Draw every widget's content at each phase of each round, as the app would (no terminal)."""
    console = Console(file=io.StringIO(), width=80)
    rounds = recording.rounds
    console.print(settings_text(recording.start))
    for r in range(len(rounds)):
        for phase in Phase:
            frame = reveal(rounds[r], at_phase(rounds, r, phase).step(rounds))
            console.print(round_table(frame, frame.focus, 60), text_view("", rounds, frame))
            for slot in {1, frame.focus, len(frame.slots)}:
                console.print(charts(chart(frame, slot), 40, 12))
        committed = [e for rnd in rounds[: r + 1] for e in rnd.events]
        s = summarize(committed)
        console.print(stats_view(s, 70, 12), stats_view(s, 70, 3))
        console.print(timeline_view([(x.draft_ms, x.verify_ms) for x in rounds], r, 60, 8))


def test_nan_probabilities_are_drawn_as_nan(tmp_path, trace_path):
    """A trace can hold NaN (json writes it): the screen shows 'nan' instead of crashing."""
    path = tmp_path / "nan.jsonl"
    path.write_text(re.sub(r'"(q|p|u|ratio)": [0-9.e-]+', r'"\1": NaN', trace_path.read_text()))
    recording = load_recording(path)
    assert all(d.q != d.q for r in recording.rounds for d in r.drafts)  # every q is NaN
    render_every_phase(recording)


def test_a_corrupted_trace_is_refused_or_drawn_but_never_crashes(tmp_path, trace_path):
    """150 seeded corruptions (a field deleted, retyped or an event dropped): each trace is either
    refused with a UserError or replays every phase of every round without an exception."""
    lines = [json.loads(line) for line in lines_of(trace_path)]
    junk = [None, "x", -1, 1.5, [], {}, [[1]], 10**9, True, float("nan"), [[1, "a", "b"]]]
    rng = random.Random(0)
    refused = 0
    for trial in range(150):
        events = copy.deepcopy(lines)
        for _ in range(rng.randint(1, 2)):
            event = rng.choice(events)
            field = rng.choice([k for k in event if k != "schema"])
            what = rng.random()
            if what < 0.3:
                del event[field]
            elif what < 0.8:
                event[field] = rng.choice(junk)
            else:
                events.remove(event)
        path = tmp_path / f"{trial}.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in events))
        try:
            recording = load_recording(path)
        except UserError:
            refused += 1
            continue
        render_every_phase(recording)
    assert 30 < refused < 140  # both kinds of outcome were exercised


def test_a_schema_1_trace_replays_with_its_resample_labelled_as_the_residual():
    """Schema 1 called the resampled token's residual probability `p`; read now, that number is
    the residual's, and p and q (never recorded) show as — rather than as a wrong p."""
    from tests.viz.conftest import SCHEMA1

    rnd = load_recording(SCHEMA1).rounds[0]
    assert rnd.extra.kind == "resample" and rnd.extra.p is None and rnd.extra.q is None
    frame = reveal(rnd, at_phase([rnd], 0, Phase.EXTRA).step([rnd]))
    console = Console(file=io.StringIO(), width=80, record=True, color_system=None)
    console.print(round_table(frame, frame.focus, 70))
    last = console.export_text().splitlines()[-1]
    assert f"↻ residual {rnd.extra.prob:.2f}" in last and "—" in last


def test_a_tree_trace_or_a_folder_is_one_clear_sentence(tmp_path, trace_path):
    events = [json.loads(line) for line in lines_of(trace_path)]
    events[0]["tree"] = [-1, 0]
    path = tmp_path / "tree.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    with pytest.raises(UserError, match="traces a token tree.*--show"):
        load_recording(path)
    with pytest.raises(UserError, match="is a folder; give a trace file"):
        load_recording(tmp_path)
