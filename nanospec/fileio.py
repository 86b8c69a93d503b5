"""Small file helpers: atomic writes and checksums.

Everything nanospec writes to disk (tokenizer, checkpoints, traces, benchmark JSON) goes through
`atomic_write`: the bytes land in a temporary file in the same folder, which is then renamed over
the destination. A crash or Ctrl-C mid-write leaves the old file (or nothing), never half a file.
"""

import hashlib
import os
import tempfile
from pathlib import Path


def atomic_write(path: str | os.PathLike, data: bytes | str) -> None:
    """Write `data` to `path` all-or-nothing (temp file in the same folder + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600 files; shipped files must be readable by all
        os.replace(tmp, path)  # atomic on POSIX: readers see the old file or the new one
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_output(path: str | os.PathLike, suffix: str | None = None, flag: str = "") -> Path:
    """A file a command will write, checked before any slow work: its folder must exist (a
    typo in a folder name should not silently create a new tree), and it must have `suffix`."""
    from nanospec.errors import UserError

    path = Path(path)
    if suffix and path.suffix.lower() != suffix:
        raise UserError(
            f"{flag} writes a {suffix} file; give a name ending in {suffix}, not {path.name!r}."
        )
    if path.is_dir():
        raise UserError(f"Cannot write {path}: it is a folder; give a file name.")
    if not path.parent.is_dir():
        raise UserError(f"Cannot write {path}: the folder {path.parent} does not exist.")
    return path


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes, read in chunks so large files do not fill memory."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
