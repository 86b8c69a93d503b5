"""The workshop's exercise checker: `nanospec exercise check N [--file PATH]`.

Each exercise in lessons/exercises/ asks for one piece of speculative decoding (the greedy
loop, the accept test and the residual, the whole verify rule, a round with a KV cache and its
rollback, the batched accept count, the choice of γ, a prompt-lookup drafter, the walk over
tree siblings). The checker runs the learner's code against the library's own reference and
against laws computed exactly, and answers in words a learner can act on: which law differs
and by how much, on a small p/q they can work by hand — never a traceback.

    sheet.py     the exercises: file, functions, signatures, checks; `check` runs one
    learner.py   loading a learner's file and calling their function, mistakes as sentences
    laws.py      the statistics: a chi-square p-value, total variation, a law shown as text
    greedy.py    exercise 1 (greedy_speculative): greedy text, target passes against a budget
    lookup.py    exercise 7 (lookup): against the library's prompt-lookup drafter
    rules.py     exercise 2 (accept_reject and residual): exact answers on a grid
    sampled.py   exercises 3 and 8 (verify_row, verify_siblings): output laws, sampled
    rollback.py  exercise 4 (verify_and_rollback): a greedy round's cache, against a fresh pass
    batched.py   exercise 5 (accepted_counts): the batched leading run, under jax.jit
    gamma.py     exercise 6 (best_gamma): the cost model's γ, on a grid and a recorded run

What it deliberately leaves out: timing the learner's code, and style.
"""
