"""A drafter written outside nanospec, as a plug-in: it guesses that the last token repeats.

Everything a new method needs is this module and one table entry (methods.py's `Method`);
tests/test_method_plugin.py adds the entry and runs it through `decode`, the command line and
the joint-law check. Its drafts are deterministic, so q is one-hot: the verify rule accepts
x with probability p(x) and otherwise resamples from p without x, exact at any temperature.
"""

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from nanospec.drafters import Drafter, take_rows


@dataclass(frozen=True)
class RepeatLast(Drafter):
    vocab_size: int
    name: str = "repeat"

    @classmethod
    def load(cls, models, name):
        return cls(models["target"][0].vocab_size), ()

    def init(self, dparams, tokens, lengths, hidden=None, capacity=None):
        return ()  # nothing to keep: the last committed token is in `seq`

    def propose(self, dparams, dstate, seq, length, key, sp, gamma):
        last = take_rows(seq, length - 1, 1)  # (B, 1)
        drafts = jnp.repeat(last, gamma, axis=1)  # (B, γ)
        return drafts, jax.nn.one_hot(drafts, self.vocab_size, dtype=jnp.float32), dstate
