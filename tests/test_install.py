"""The install path a workshop room takes: the pinned versions, and docs/install.md's Windows
commands kept in step with the Makefile (the offline install itself is tried by hand and
recorded in lessons/WORKSHOP.md: it needs a fresh venv and the network off)."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parent.parent


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, str]:
    """constraints.txt as {name: version}; every line that is not a comment is name==version,
    perhaps followed by a comment ("  # only on Windows: ...")."""
    lines = [
        ln.split(" #")[0].strip()
        for ln in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    bad = [ln for ln in lines if not re.fullmatch(r"[A-Za-z0-9_.\-]+==[A-Za-z0-9_.+!\-]+", ln)]
    assert not bad, f"constraints.txt lines that pin no exact version: {bad}"
    names = [canonical(ln.split("==")[0]) for ln in lines]
    assert len(set(names)) == len(names), "constraints.txt pins a package twice"
    return {canonical(ln.split("==")[0]): ln.split("==")[1] for ln in lines}


def test_this_environment_is_what_constraints_pin():
    """The tests run on exactly the pinned versions: a pin that drifted from what CI installs
    would make 'the versions CI tested' untrue."""
    pinned, drifted = pins(), []
    for dist in metadata.distributions():
        name = canonical(dist.metadata["Name"])
        if name in pinned and dist.version != pinned[name]:
            drifted.append(f"{name} {dist.version} (pinned {pinned[name]})")
    assert not drifted, f"installed versions differ from constraints.txt: {drifted}"


def test_every_dependency_of_every_extra_is_pinned():
    """`make wheelhouse` collects the extras under constraints.txt: a requirement without a pin
    would be whatever is newest on the day the wheelhouse is made."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = project["dependencies"] + [
        r for extra in project["optional-dependencies"].values() for r in extra
    ]
    wanted += tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["build-system"][
        "requires"
    ]
    pinned = pins()
    missing = [r for r in wanted if canonical(Requirement(r).name) not in pinned]
    assert not missing, f"requirements with no pin in constraints.txt: {missing}"
    for r in map(Requirement, wanted):  # and each pin satisfies its requirement
        assert r.specifier.contains(pinned[canonical(r.name)], prereleases=True), r


# The laptops a room brings, as environment markers see them (packaging's names).
PLATFORMS = {
    "Linux x86-64": {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                     "platform_machine": "x86_64"},
    "Linux arm64": {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                    "platform_machine": "aarch64"},
    "macOS": {"sys_platform": "darwin", "platform_system": "Darwin", "os_name": "posix",
              "platform_machine": "arm64"},
    "Windows": {"sys_platform": "win32", "platform_system": "Windows", "os_name": "nt",
                "platform_machine": "AMD64"},
}  # fmt: skip


def test_what_other_platforms_install_is_pinned_too():
    """A requirement that only Windows or macOS installs (orbax-checkpoint's nest_asyncio on
    Windows) never shows in a Linux venv, so `pip freeze` cannot pin it: constraints.txt pins it
    by hand ("only on"), or that laptop takes whatever is newest on the day. Checked for every
    installed distribution's requirements, on each platform and each Python from 3.11 to 3.13
    (what a notebook-only package needs is checked where the notebook extra is installed)."""
    pinned, missing = pins(), set()
    for dist in metadata.distributions():
        if canonical(dist.metadata["Name"]) not in pinned:
            continue  # nanospec itself, or something installed beside the project
        for req in map(Requirement, dist.requires or []):
            if canonical(req.name) in pinned or req.marker is None:
                continue  # a requirement with no marker is installed here, so freeze saw it
            for where, env in PLATFORMS.items():
                for minor in (11, 12, 13):
                    python = {"python_version": f"3.{minor}", "python_full_version": f"3.{minor}.0"}
                    if req.marker.evaluate({**env, **python, "extra": ""}):
                        missing.add(f"{req.name} ({dist.metadata['Name']}, on {where})")
    assert not missing, f"requirements no line of constraints.txt pins: {sorted(missing)}"


def test_every_make_target_has_a_windows_command():
    """docs/install.md's table gives every make target as a command for PowerShell."""
    make = (REPO / "Makefile").read_text(encoding="utf-8")
    targets = [t for line in re.findall(r"^\.PHONY:(.*)$", make, re.M) for t in line.split()]
    doc = (REPO / "docs" / "install.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `make ([\w-]+)` \|", doc, re.M))
    assert set(targets) == rows, f"Makefile targets {sorted(targets)}, documented {sorted(rows)}"


# pip with nowhere to look: no index (and an unreachable one, should PIP_NO_INDEX be ignored),
# no find-links, no configuration. An install of the project fails so at once (its build needs
# setuptools from an index), so a make target that ran pip would fail.
OFFLINE = {
    **{k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"},
    "PIP_INDEX_URL": "http://127.0.0.1:9/",
    "PIP_NO_INDEX": "1",
    "PIP_CONFIG_FILE": os.devnull,
}


def make_here(tmp_path, *args: str, stamp=".installed", **kw) -> subprocess.CompletedProcess:
    """Run make in the repository on this interpreter's environment (installed: a stamp in a
    folder of its own stands for .venv/.installed, or `stamp`), offline."""
    venv = tmp_path / "venv"
    venv.mkdir(exist_ok=True)
    if stamp:
        (venv / stamp).touch()
    argv = ["make", f"VENV={venv}", f"BIN={Path(sys.executable).parent}", *args]
    return subprocess.run(
        argv, cwd=REPO, env=OFFLINE, capture_output=True, encoding="utf-8", timeout=600, **kw
    )


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed here")
def test_make_figures_runs_offline_once_installed(tmp_path):
    """`make figures` installs its extra only when matplotlib is missing: installed (the test
    extra has it), it writes the slides with pip pointed at no index at all (where pip would
    fail, and make with it)."""
    done = make_here(tmp_path, "figures")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "figure written" in done.stdout and "ERROR" not in done.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed here")
@pytest.mark.parametrize("target", [["lessons", "FIGURES=1"], ["notebook"]])
def test_every_target_that_adds_an_extra_asks_first(tmp_path, target):
    """The lines `make -n` prints for `make lessons FIGURES=1` and `make notebook`: the one that
    names pip installs only after a check for the extra's modules fails. Run offline, that line
    succeeds where the modules are found, and fails (pip ran) where one is not."""
    printed = make_here(tmp_path, "-n", *target).stdout.splitlines()
    installs = [line for line in printed if "pip install" in line]
    assert len(installs) == 1 and " || " in installs[0], printed
    check, install = installs[0].split(" || ")
    modules = check.split("'")[-1].split()  # the modules named after the check's program
    missing = installs[0].replace(f"' {' '.join(modules)} ||", "' no_such_module_here ||")
    assert subprocess.run(
        missing, shell=True, cwd=REPO, env=OFFLINE, capture_output=True
    ).returncode
    if not all(importlib.util.find_spec(m) for m in modules):
        pytest.skip(f"{' '.join(modules)}: not all installed here (the notebook extra)")
    assert subprocess.run(installs[0], shell=True, cwd=REPO, env=OFFLINE).returncode == 0


TEST_TOOLS = {"pytest", "pytest-xdist", "hypothesis", "playwright", "schemathesis", "ruff"}


def test_the_workshop_extra_is_what_the_workshop_runs_and_no_test_tool():
    """`.[workshop]`: the lessons' statistics, the figures, `demo --web` and the notebooks,
    exactly those extras together, and nothing that only the tests use."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    names = lambda extra: {canonical(Requirement(r).name) for r in extras[extra]}
    assert names("workshop") == set().union(*map(names, ("lessons", "figures", "web", "notebook")))
    assert not names("workshop") & TEST_TOOLS and TEST_TOOLS <= names("test")


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed here")
def test_after_make_workshop_a_participants_targets_install_nothing_more(tmp_path):
    """With only the workshop install there (.venv/.workshop), `make demo`, `lessons`,
    `figures` and `notebook` make no venv and install nothing but a missing extra (asked
    first); `make test` installs the test extra; a fresh `make workshop`, the workshop one."""
    plan = lambda target, stamp=".workshop": make_here(tmp_path, "-n", target, stamp=stamp).stdout
    for target in ("demo", "lessons", "figures", "notebook"):
        printed = plan(target)
        assert "-m venv" not in printed and "-e '.[test]'" not in printed, (target, printed)
    assert "-e '.[test]'" in plan("test")
    (tmp_path / "venv" / ".workshop").unlink()
    fresh = plan("workshop", stamp=None)
    assert "-m venv" in fresh and "-e '.[workshop]'" in fresh and "-e '.[test]'" not in fresh


def test_python_m_nanospec_is_the_command():
    """`python -m nanospec` (what Windows users type) is the nanospec command."""
    out = subprocess.run(
        [sys.executable, "-m", "nanospec", "--help"],
        capture_output=True,
        encoding="utf-8",
        cwd=REPO,
        check=True,
    ).stdout
    assert out.startswith("usage: nanospec") and "demo" in out


def test_every_text_file_is_opened_as_utf8():
    """Windows opens text in the locale's code page (cp1252) unless told: every open() and
    read_text() in the code names its encoding (ruff's unspecified-encoding rule, PLW1514)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--preview",
            "--select",
            "PLW1514",
            "--no-cache",
            "nanospec",
            "viz",
            "lessons",
        ],
        capture_output=True,
        encoding="utf-8",
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout


def test_make_test_leaves_out_only_the_repeats_design_md_lists():
    """`make test` (CI) deselects the `repeat` marker and `make test-all` runs it; each test with
    repeated cases is in docs/design.md's table of what test-all adds, and only those are."""
    make = (REPO / "Makefile").read_text(encoding="utf-8")
    recipe = lambda target: re.search(rf"^{target}:.*\n((?:\t.*\n)+)", make, re.M).group(1)
    assert '-m "not repeat"' in recipe("test")
    assert '-m "repeat or not repeat"' in recipe("test-all")
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "repeat", "tests"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    marked = set(re.findall(r"::(test_\w+)\[", collected))
    assert marked, collected[-2000:]
    design = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    table = design.split("**What `make test-all` adds.**")[1].split("\n\n")[1]
    assert set(re.findall(r"^\| `(test_\w+)`", table, re.M)) == marked
