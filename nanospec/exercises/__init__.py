"""The workshop's exercise checker: `nanospec exercise check N [--file PATH]`.

Each exercise in lessons/exercises/ asks for one function of speculative decoding (the accept
test, the residual, the whole verify rule, a prompt-lookup drafter, the greedy loop, the walk
over tree siblings). The checker runs the learner's function against the library's own
reference and against laws computed exactly, and answers in words a learner can act on: which
law differs and by how much, on a small p/q they can work by hand — never a traceback.

    sheet.py     the exercises: file, function, signature, checks; `check` runs one
    learner.py   loading a learner's file and calling their function, mistakes as sentences
    laws.py      the statistics: a chi-square p-value, total variation, a law shown as text
    rules.py     exercises 1 and 2 (accept_reject, residual): exact answers on a grid
    rounds.py    exercises 3 and 6 (verify_row, verify_siblings): output laws, sampled
    loops.py     exercises 4 and 5 (lookup, greedy_speculative): against the reference

What it deliberately leaves out: timing the learner's code, and style.
"""
