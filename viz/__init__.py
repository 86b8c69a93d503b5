"""The nanospec visualiser: a Textual app that animates the speculative loop's trace events.

    rounds.py        Trace events -> `Round`s: one speculative round as plain Python values the UI can show.
    playhead.py      The round being shown, step by step: which phase of which round, and what is revealed.
    settings.py      What a live run is asked to do: the settings a person can change, and their checks.
    live.py          Live mode: run the speculative loop round by round and hand each round's events to the UI.
    recorder.py      The recorder: runs the speculative loop for the app in a thread worker, one run at a time.
    app.py           The demo app: speculative decoding, one round at a time, at a pace a person can follow.
    demo_keys.py     The demo's keys: `KEYS`, the bindings, and `KeyActions`, what each key does.
    speeds.py        The player's speeds, shared by the demo (app.py) and race mode (race.py).
    toasts.py        `Toasts`, mixed into both apps (the demo and race mode): how they post a message.
    text_panel.py    The text so far: the prompt, the committed tokens, and the round in progress inline.
    round_table.py   The round in progress: one row per draft, then the target's extra token.
    charts.py        Why a token was accepted or rejected: bar charts of q, p and the residual at one position.
    stats_panel.py   Running statistics of the rounds committed so far, all from nanospec.trace.summarize().
    cache_panel.py   SSD's speculation cache (nanospec/ssd/loop.py): branches pre-drafted for the next round.
    timeline.py      Where each round's time went: draft time (▒) against verify time (█), one line per round.
    status_bar.py    The top line: the run's settings, the player's state, and a live "compiling…" spinner.
    key_bar.py       The footer: every control, key then action, wrapping onto a second line when narrow.
    settings_screen.py The edit dialog: prompt, drafting method, γ, temperature, top-k, top-p, seed, length.
    help_screen.py   The help screen (`?`): what every symbol and number on the demo's screen means.
    race.py          Race mode (`nanospec demo --race`): autoregressive decoding against a speculative method.
    race_timing.py   How race mode (race.py) times its two runs, and what it keeps of them.
    race_pane.py     `RacePane`: race mode's widget for one method, its text so far over its counter line.
    draw.py          Small text-drawing helpers shared by the widgets: bars, numbers, tokens, marks.
    cli.py           `nanospec demo`: the visualiser's command line.
    demo.tcss        the layout (race.tcss: race mode's)

viz consumes events only; nanospec never imports viz.
"""
