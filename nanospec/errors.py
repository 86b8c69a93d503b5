"""The one exception type that means "the user asked for something we cannot do".

The CLI turns a `UserError` into one clear sentence on stderr and a non-zero exit code; any
other exception is a bug and keeps its traceback. Library code raises `UserError` only for
problems a person can fix (a wrong path, a bad prompt, an out-of-range setting).
"""


class UserError(Exception):
    """A problem with the user's input, explained in one sentence (the exception message)."""
