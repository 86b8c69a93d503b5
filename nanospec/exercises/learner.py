"""Loading a learner's file and calling their function, with every mistake told as a sentence.

Two kinds of trouble, two exits: a file the checker cannot use (missing, a syntax error, no
such function, the wrong parameters) is bad input — a `UserError`, one sentence, exit 2. Code
that runs but does the wrong thing (or raises) fails a check — a `Failure`, exit 1.
"""

import importlib.util
import inspect
import traceback
from pathlib import Path

import jax
import numpy as np

from nanospec.errors import UserError

# Asking for a traced array's value inside jax.jit: a Python if, while, int(), np.asarray, or
# indexing with a boolean mask (its result's shape would depend on the values).
TRACED_VALUE = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerArrayConversionError,
    jax.errors.TracerIntegerConversionError,
    jax.errors.NonConcreteBooleanIndexError,
)


class Failure(Exception):
    """A check the learner's code failed, explained in words they can act on."""


def load(path: Path, function: str, params: tuple[str, ...]):
    """The learner's `function` from the file at `path`, checked to take `params` first."""
    if not path.is_file():
        raise UserError(f"No file at {path}.")
    if path.suffix != ".py":
        raise UserError(f"{path} is not a Python file (.py).")
    try:
        source = path.read_text(encoding="utf-8")
        compile(source, str(path), "exec")
    except SyntaxError as e:
        raise UserError(f"{path} line {e.lineno}: {e.msg}; fix it and check again.") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"Cannot read {path}: {e}.") from None
    spec = importlib.util.spec_from_file_location(f"exercise_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the learner's module-level code: report it, do not crash
        raise UserError(
            f"Running {path} failed at line {_line_in(e, path)}: {type(e).__name__}: {e}."
        ) from None
    fn = getattr(module, function, None)
    if not callable(fn):
        raise UserError(
            f"{path} defines no function named {function}; the exercise asks for "
            f"{function}({', '.join(params)})."
        )
    names = list(inspect.signature(fn).parameters)
    if names[: len(params)] != list(params):
        raise UserError(
            f"{function} in {path} takes ({', '.join(names)}); the exercise needs "
            f"({', '.join(params)})."
        )
    return calling(fn, function, path)


def calling(fn, function: str, path: Path):
    """`fn`, except that an exception it raises becomes a `Failure` saying what happened."""

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Failure:  # the checker's own verdict, raised by a function it handed over
            raise
        except NotImplementedError:
            raise Failure(
                f"{function} is still the stub (it raises NotImplementedError): write "
                f"its body; the docstring at the top of {path.name} says what it "
                f"must do."
            ) from None
        except TRACED_VALUE as e:
            raise Failure(
                f"your {function} cannot run inside jax.jit: at line "
                f"{_line_in(e, path)} of {path.name} it needs the value of an array "
                f"that jit only traces ({type(e).__name__}). A Python if or while on "
                f"an array, int(), .item(), numpy on an array or a boolean mask cannot "
                f"run there: use jax.numpy operations (jnp.where, jnp.cumprod, jnp.sum)."
            ) from None
        except Exception as e:
            raise Failure(
                f"your {function} raised {type(e).__name__} at line "
                f"{_line_in(e, path)} of {path.name}: {e}"
            ) from None

    return call


def _line_in(e: BaseException, path: Path) -> str:
    """The line of `path` where `e` happened (the last frame in that file), or '?'."""
    lines = [
        f.lineno
        for f in traceback.extract_tb(e.__traceback__)
        if Path(f.filename).resolve() == path.resolve()
    ]
    if isinstance(e, SyntaxError) and e.lineno:
        lines.append(e.lineno)
    return str(lines[-1]) if lines else "?"


def plain(x) -> object:
    """A learner's return value as plain Python (ints, floats, lists), for messages."""
    return np.asarray(x).tolist() if isinstance(x, (np.ndarray, np.generic)) else x
