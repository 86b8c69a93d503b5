"""The nanospec visualiser: a Textual app that animates the speculative loop's trace events.

    rounds.py        trace events -> Round (one round as plain values); checks a trace file
    playhead.py      the round being shown, step by step: phases, moves, what is revealed
    settings.py      the settings of a live run and their checks (no JAX)
    live.py          live mode: run the loop round by round -> each round's events
    recorder.py      the thread worker that runs live.py and posts rounds to the app
    app.py           the App: timer, worker; hands each widget what it draws
    demo_keys.py     the demo's keys and what each does (mixed into the App)
    speeds.py        the player's speeds and +/- keys, shared with race mode
    toasts.py        `say`: both apps' messages, not stacked when repeated
    text_panel.py    the committed text and the round in progress, inline with marks
    round_table.py   the drafts with q, p, u, p/q and ✓ ✗ · ↻ ★
    charts.py        bars of q, p and the residual for the position under the cursor
    stats_panel.py   running statistics from nanospec.trace.summarize()
    cache_panel.py   SSD's speculation cache: its guesses, the one that came true ◆, hits
    timeline.py      draft vs verify time per round
    status_bar.py    settings, play state and the "compiling…" spinner
    key_bar.py       every control in the footer, wrapping on narrow screens
    settings_screen.py  the edit dialog
    help_screen.py   the `?` screen: symbols, numbers, and why the output is exact
    race.py          `--race`: ar and a drafting method, each timed alone, on one clock
    race_timing.py   how race mode times each run alone, honestly, and the verdict
    race_pane.py     one race pane: the text so far and its counter line
    draw.py          bars, numbers, token labels, marks
    cli.py           `nanospec demo` (registered via the nanospec.commands entry point)
    demo.tcss        the layout (race.tcss: race mode's)

viz consumes events only; nanospec never imports viz.
"""
