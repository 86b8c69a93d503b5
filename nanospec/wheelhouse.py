"""Which laptops a wheelhouse fits: `make wheelhouse` writes it down, an install checks it.

A wheel is built for one operating system, CPU and Python (jaxlib's wheel for Linux x86-64
and Python 3.11 installs there only), so a wheelhouse, the folder of wheels a room without
network installs from, fits the kind of laptop that made it. `make wheelhouse` adds a line
for this laptop to the folder's PLATFORMS.txt; `make WHEELHOUSE=folder …` checks it before it
makes the venv, and refuses in one sentence that says which Python to use, so nothing is half
installed. Run on a laptop of another kind into the same folder, `make wheelhouse` adds that
kind's wheels and line: pip takes from the folder only the wheels that fit.

    python -m nanospec.wheelhouse record wheelhouse   # after `pip download` (make wheelhouse)
    python -m nanospec.wheelhouse check wheelhouse    # before an install from it (exit 2: no)

It runs under the Python that will make the venv, before anything is installed, so it uses
the standard library only. What it does not do: read the wheels' own tags (pip does, and would
only say "no matching distribution" halfway through the install), or tell apart two Pythons of
the same version (a wheel does not either).
"""

import platform
import sys
from pathlib import Path

RECORD = "PLATFORMS.txt"
HEADER = (
    "# The laptops this wheelhouse installs on (python -m nanospec.wheelhouse): OS, CPU, Python."
)
SYSTEMS = {"Darwin": "macOS"}  # platform.system()'s names, as people say them
MACHINES = {"x86_64": "x86-64", "AMD64": "x86-64", "aarch64": "arm64", "ARM64": "arm64"}


def this_laptop() -> tuple[str, str, str]:
    """(system, CPU, Python version) of this interpreter, e.g. ("Linux", "x86-64", "3.11")."""
    system, machine = platform.system(), platform.machine()
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return SYSTEMS.get(system, system), MACHINES.get(machine, machine), python


def described(laptop: tuple[str, str, str]) -> str:
    """described(("Linux", "x86-64", "3.11")) = "Linux x86-64 Python 3.11": a record's line."""
    system, cpu, python = laptop
    return f"{system} {cpu} Python {python}"


def read(folder: Path) -> list[tuple[str, str, str]] | None:
    """The laptops the folder's record lists, or None if it has no record."""
    path = folder / RECORD
    if not path.is_file():
        return None
    lines = path.read_text(encoding="utf-8").splitlines()
    fields = [ln.split() for ln in lines if ln.strip() and not ln.startswith("#")]
    return [(f[0], f[1], f[3]) for f in fields if len(f) == 4 and f[2] == "Python"]


def record(folder: Path) -> str:
    """Add this laptop to the folder's record (once); return the sentence make prints."""
    laptops = read(folder) or []
    if this_laptop() not in laptops:
        laptops.append(this_laptop())
        text = "\n".join([HEADER, *map(described, laptops)]) + "\n"
        temp = folder / f".{RECORD}.tmp"  # written whole, then renamed over the old record
        temp.write_text(text, encoding="utf-8")
        temp.replace(folder / RECORD)
    wheels = len(list(folder.glob("*.whl")))
    return (
        f"{folder}/: {wheels} wheel{'s' * (wheels != 1)}, for {'; '.join(map(described, laptops))}"
    )


def use_python(version: str, folder: Path) -> str:
    """How to make the venv with that Python: `py` on Windows, `make PYTHON=` elsewhere."""
    if platform.system() == "Windows":
        return f"py -{version} -m venv .venv"
    return f"make PYTHON=python{version} WHEELHOUSE={folder} and your target"


def refusal(folder: Path, laptops: list[tuple[str, str, str]]) -> str | None:
    """The sentence that refuses an install from `folder` on this laptop, or None if it fits.

    A wheelhouse made with Python 3.11, checked under 3.12 on the same kind of laptop:
    "wheelhouse/ holds wheels for Python 3.11 on Linux x86-64, not for this Python 3.12:
    install with Python 3.11 (make PYTHON=python3.11 WHEELHOUSE=wheelhouse and your target),
    or make a wheelhouse with Python 3.12 (make wheelhouse)."
    """
    here = this_laptop()
    if here in laptops:
        return None
    system, cpu, python = here
    same_kind = sorted({p for s, c, p in laptops if (s, c) == (system, cpu)})
    if same_kind:
        versions, fix = " or ".join(same_kind), use_python(same_kind[0], folder)
        return (
            f"{folder}/ holds wheels for Python {versions} on {system} {cpu}, not for this "
            f"Python {python}: install with Python {same_kind[0]} ({fix}), "
            f"or make a wheelhouse with Python {python} (make wheelhouse)."
        )
    room = sorted({p for _, _, p in laptops})
    kinds = ", ".join(f"{s} {c}" for s, c in dict.fromkeys((s, c) for s, c, _ in laptops))
    return (
        f"{folder}/ holds wheels for {kinds or 'no laptop'} only, not for this {system} {cpu}: "
        f"run make wheelhouse into it on a {system} {cpu} laptop with Python "
        f"{' or '.join(room) or python} (the room's Python), or install with the network on."
    )


def main(argv: list[str]) -> int:
    """`record FOLDER` or `check FOLDER`; the exit status is 2 for a refusal or a mistake."""
    if len(argv) != 2 or argv[0] not in ("record", "check"):
        print("usage: python -m nanospec.wheelhouse record|check FOLDER", file=sys.stderr)
        return 2
    action, folder = argv[0], Path(argv[1].rstrip("/\\") or argv[1])
    if not folder.is_dir():
        print(f"{folder}/ is not a folder: make it with make wheelhouse.", file=sys.stderr)
        return 2
    if action == "record":
        print(record(folder))
        return 0
    laptops = read(folder)
    if laptops is None:  # made before wheelhouses kept a record: pip is the judge
        print(f"nanospec: {folder}/ has no {RECORD} to say which laptops it fits; trying it.")
        return 0
    sentence = refusal(folder, laptops)
    if sentence:
        print(sentence, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
