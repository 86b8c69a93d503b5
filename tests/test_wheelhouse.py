"""A wheelhouse knows which laptops it fits (nanospec/wheelhouse.py), and `make` refuses an
install from one made for another Python, in one sentence, before it makes anything."""

import shutil
import subprocess
import sys

import pytest

from nanospec import wheelhouse
from nanospec.wheelhouse import RECORD, described, this_laptop

REPO = wheelhouse.Path(wheelhouse.__file__).resolve().parent.parent
SYSTEM, CPU, PYTHON = this_laptop()
OTHER_PYTHON = f"3.{sys.version_info.minor + 1}"


def folder_for(tmp_path, *laptops):
    """A wheelhouse folder whose record lists these (system, CPU, Python) laptops."""
    folder = tmp_path / "wheelhouse"
    folder.mkdir()
    (folder / RECORD).write_text(
        "# made by hand\n" + "".join(described(x) + "\n" for x in laptops), encoding="utf-8"
    )
    return folder


def check(folder) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nanospec.wheelhouse", "check", str(folder)],
        cwd=REPO,
        capture_output=True,
        encoding="utf-8",
    )


def test_record_writes_this_laptop_once_and_keeps_the_others(tmp_path):
    folder = folder_for(tmp_path, ("Windows", "x86-64", PYTHON))
    (folder / "pip-26.3-py3-none-any.whl").touch()
    said = wheelhouse.record(folder)
    wheelhouse.record(folder)  # a second run on the same laptop adds nothing
    assert wheelhouse.read(folder) == [("Windows", "x86-64", PYTHON), this_laptop()]
    assert (
        said
        == f"{folder}/: 1 wheel, for Windows x86-64 Python {PYTHON}; {described(this_laptop())}"
    )
    assert check(folder).returncode == 0


def test_a_wheelhouse_for_another_python_is_refused_in_one_sentence(tmp_path):
    folder = folder_for(tmp_path, (SYSTEM, CPU, OTHER_PYTHON))
    done = check(folder)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"{folder}/ holds wheels for Python {OTHER_PYTHON} on {SYSTEM} {CPU}, not for this "
        f"Python {PYTHON}: install with Python {OTHER_PYTHON} (make PYTHON=python{OTHER_PYTHON} "
        f"WHEELHOUSE={folder} and your target), or make a wheelhouse with Python {PYTHON} "
        "(make wheelhouse).\n"
    )


def test_a_wheelhouse_for_another_platform_names_the_laptop_to_make_it_on(tmp_path):
    folder = folder_for(tmp_path, ("Windows", "x86-64", "3.12"), ("macOS", "arm64", "3.12"))
    sentence = wheelhouse.refusal(folder, wheelhouse.read(folder))
    if SYSTEM in ("Windows", "macOS"):
        pytest.skip("this laptop is one the record lists")
    assert sentence == (
        f"{folder}/ holds wheels for Windows x86-64, macOS arm64 only, not for this {SYSTEM} "
        f"{CPU}: run make wheelhouse into it on a {SYSTEM} {CPU} laptop with Python 3.12 "
        "(the room's Python), or install with the network on."
    )


def test_a_wheelhouse_without_a_record_is_tried_and_a_missing_folder_is_refused(tmp_path):
    (tmp_path / "old").mkdir()
    done = check(tmp_path / "old")
    assert done.returncode == 0 and f"has no {RECORD}" in done.stdout
    done = check(tmp_path / "nowhere")
    assert done.returncode == 2
    assert (
        done.stderr == f"{tmp_path / 'nowhere'}/ is not a folder: make it with make wheelhouse.\n"
    )


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed here")
def test_make_refuses_before_it_makes_the_venv(tmp_path):
    """As a participant meets it: `make WHEELHOUSE=… demo` with a wheelhouse for another Python
    stops with the sentence and a non-zero status, and leaves no venv behind."""
    folder = folder_for(tmp_path, (SYSTEM, CPU, OTHER_PYTHON))
    venv = tmp_path / "venv"
    done = subprocess.run(
        ["make", f"PYTHON={sys.executable}", f"VENV={venv}", f"WHEELHOUSE={folder}", "demo"],
        cwd=REPO,
        capture_output=True,
        encoding="utf-8",
    )
    assert done.returncode != 0
    assert done.stderr.startswith(f"{folder}/ holds wheels for Python {OTHER_PYTHON} on ")
    assert not venv.exists()
