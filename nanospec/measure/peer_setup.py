"""Getting llama.cpp ready for measure/peer.py: its source, its tools, the models as GGUF.

Each step is skipped when its result is already in the work folder, so a second run starts at
the measurement:

    source    `--llama-cpp DIR`: a llama.cpp source tree, a llama-cpp-python sdist (its
              vendored llama.cpp) or a cmake build folder of llama.cpp; without it, the
              llama-cpp-python sdist that `pip download` fetches into the work folder — the one
              network step, refused in one sentence when pip cannot reach its index
    build     cmake, Release, `-DGGML_NATIVE=ON`, only the three tools used
              (peer_llama.TOOLS), under `nice` (it takes a while on two cores)
    convert   the shipped target and draft, exported as `export-hf` writes them, to GGUF with
              llama.cpp's convert_hf_to_gguf.py, run by the Python of a venv in the work
              folder holding what the converter needs (its own requirements files, from PyPI
              only: its torch is PyPI's wheel, which brings CUDA's libraries, a few GB, unused)

What this file deliberately leaves out: quantized GGUF (the comparison is on the same float32
weights, float16 as one extra row), GPU builds, and any edit to llama.cpp's files.
"""

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from nanospec.errors import UserError
from nanospec.measure.peer_llama import TOOLS, Llama, parse_version

SDIST = "llama-cpp-python"
# Configure switches beside the two the comparison is about (Release, GGML_NATIVE): nothing
# the three tools do not need, and nothing that downloads (the server's prebuilt web UI).
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=ON",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
)
# convert_hf_to_gguf.py names a BPE pre-tokenizer by hashing what the tokenizer makes of a
# test string, and refuses one it has not seen; nanospec's vocabulary is its own, so it is
# unknown. Its pre-tokenizer *is* GPT-2's regex (tokenizer.SPLIT_PATTERN), which llama.cpp
# calls "gpt-2": this runs the converter with that name given, and llama.cpp is not edited.
CONVERT = """
import sys
source = sys.argv[1]
sys.path.insert(0, source)
sys.argv = [source + "/convert_hf_to_gguf.py", *sys.argv[2:]]
import convert_hf_to_gguf as convert

def below(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from below(sub)

owner = next(c for c in below(convert.ModelBase) if "get_vocab_base_pre" in vars(c))
owner.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
convert.main()
"""


def _is_source(path: Path) -> bool:
    return (path / "CMakeLists.txt").is_file() and (path / "convert_hf_to_gguf.py").is_file()


def _cache_source(build_dir: Path) -> Path | None:
    """The source folder a cmake build folder was configured from (its CMakeCache.txt)."""
    cache = build_dir / "CMakeCache.txt"
    if not cache.is_file():
        return None
    m = re.search(
        r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache.read_text("utf-8", errors="replace"), re.M
    )
    return Path(m.group(1)) if m else None


def _sdist_source(folder: Path) -> Path | None:
    vendored = folder / "vendor" / "llama.cpp"
    return vendored if _is_source(vendored) else None


def _sdist_version(source: Path) -> str:
    """The sdist's name and version ("llama-cpp-python 0.3.36, ") when `source` is the
    llama.cpp it vendors; else nothing."""
    info = source.parent.parent / "PKG-INFO"
    if source.parent.name == "vendor" and info.is_file():
        m = re.search(r"^Version: (.+)$", info.read_text("utf-8", errors="replace"), re.MULTILINE)
        if m:
            return f"{SDIST} {m.group(1).strip()}, "
    return ""


def fetch_sdist(work: Path) -> Path:
    """The llama-cpp-python sdist's llama.cpp, unpacked in `work` (downloaded if not there)."""
    for folder in sorted(work.glob("llama_cpp_python-*")):
        if folder.is_dir() and _sdist_source(folder):
            return _sdist_source(folder)
    archives = sorted(work.glob("llama_cpp_python-*.tar.gz"))
    if not archives:
        cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps"]
        done = subprocess.run(
            [*cmd, "--retries", "1", "--timeout", "30", "-d", str(work), SDIST],
            capture_output=True,
            text=True,
            check=False,
        )
        archives = sorted(work.glob("llama_cpp_python-*.tar.gz"))
        if done.returncode != 0 or not archives:
            raise UserError(
                f"Could not download the {SDIST} source with pip (offline?); pass --llama-cpp "
                "DIR with a llama.cpp source tree or build folder instead."
            )
    unpacked = Path(tempfile.mkdtemp(dir=work, prefix=".unpack."))
    try:
        with tarfile.open(archives[-1]) as tar:
            tar.extractall(unpacked, filter="data")
        (top,) = unpacked.iterdir()
        os.replace(top, work / top.name)  # appears whole or not at all
    finally:
        shutil.rmtree(unpacked, ignore_errors=True)
    source = _sdist_source(work / top.name)
    if source is None:
        raise UserError(f"{archives[-1]} holds no vendor/llama.cpp with convert_hf_to_gguf.py.")
    return source


def locate(llama_cpp, work: Path) -> tuple[Path, Path]:
    """(the llama.cpp source, the build folder) for --llama-cpp (None: the sdist in `work`)."""
    if llama_cpp is None:
        return fetch_sdist(work), work / "build"
    given = Path(llama_cpp).resolve()
    if not given.is_dir():
        raise UserError(f"--llama-cpp {given}: no such folder.")
    if _is_source(given):
        return given, work / "build"
    if _sdist_source(given):
        return _sdist_source(given), work / "build"
    from_cache = _cache_source(given)
    if from_cache is not None and _is_source(from_cache):
        return from_cache, given
    raise UserError(
        f"--llama-cpp {given} is neither a llama.cpp source tree (CMakeLists.txt and "
        "convert_hf_to_gguf.py), a llama-cpp-python sdist, nor a cmake build folder of one."
    )


def _niced(cmd: list[str]) -> list[str]:
    return ["nice", "-n", "10", *cmd] if shutil.which("nice") else cmd


def build(source: Path, build_dir: Path, log: Path) -> Path:
    """The folder of built TOOLS: configured and built unless all three are there."""
    bin_dir = build_dir / "bin"
    if all((bin_dir / t).is_file() for t in TOOLS):
        return bin_dir
    if shutil.which("cmake") is None:
        raise UserError("Building llama.cpp needs cmake, and there is none on PATH.")
    configured = _cache_source(build_dir)
    if configured is not None and configured.resolve() != source.resolve():
        raise UserError(
            f"{build_dir} was configured for another llama.cpp ({configured}); delete it, or "
            "pass that tree as --llama-cpp."
        )
    steps = []
    if configured is None:
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        steps.append(["cmake", "-S", str(source), "-B", str(build_dir), *generator, *CMAKE_OPTIONS])
    jobs = ["-j", str(os.cpu_count() or 2)]
    steps.append(
        ["cmake", "--build", str(build_dir), "--config", "Release", *jobs, "--target", *TOOLS]
    )
    with open(log, "w", encoding="utf-8") as out:
        for step in steps:
            out.write("$ " + " ".join(step) + "\n")
            out.flush()
            if subprocess.run(_niced(step), stdout=out, stderr=subprocess.STDOUT).returncode:
                raise UserError(f"Building llama.cpp failed; its log is {log}.")
    return bin_dir


def version(source: Path, bin_dir: Path) -> str:
    done = subprocess.run(
        [str(bin_dir / "llama-completion"), "--version"], capture_output=True, text=True
    )
    return f"{_sdist_version(source)}llama.cpp {parse_version(done.stderr + done.stdout)}"


def prepare(llama_cpp, work: Path) -> Llama:
    """llama.cpp ready to run: found or fetched, built unless built."""
    source, build_dir = locate(llama_cpp, work)
    bin_dir = build(source, build_dir, work / "build.log")
    return Llama(source, bin_dir, version(source, bin_dir))


def converter_requirements(source: Path) -> list[str]:
    """What convert_hf_to_gguf.py needs, from llama.cpp's own requirements file: its pins, `-r`
    followed, index options dropped (PyPI only: its torch pin is PyPI's wheel), and `gguf` the
    tree's own gguf-py (the converter imports that one first anyway)."""

    def read(path: Path) -> list[str]:
        out = []
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("-r"):
                out += read(path.parent / line[2:].strip())
            elif line and not line.startswith("-"):
                out.append(line)
        return out

    reqs = read(source / "requirements" / "requirements-convert_hf_to_gguf.txt")
    named = [r for r in reqs if re.split(r"[\s<>=~!;\[]", r, maxsplit=1)[0].lower() != "gguf"]
    return sorted(set(named)) + [str(source / "gguf-py")]


def converter_python(work: Path, source: Path) -> Path:
    """The Python of work/venv, holding what the converter needs (installed unless it is)."""
    venv = work / "venv"
    python = venv / "bin" / "python"
    reqs = converter_requirements(source)
    stamp = venv / "nanospec-peer-requirements.txt"
    if python.is_file() and stamp.is_file() and stamp.read_text("utf-8").splitlines() == reqs:
        return python
    made = (
        python.is_file()
        or subprocess.run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    )
    if not made:
        raise UserError(f"Could not make a venv at {venv} for llama.cpp's converter.")
    log = work / "pip.log"
    with open(log, "w", encoding="utf-8") as out:
        cmd = [str(python), "-m", "pip", "install", "--retries", "1", "--timeout", "60", *reqs]
        if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode:
            raise UserError(
                f"Could not install what llama.cpp's converter needs into {venv} (offline?); "
                f"pip's log is {log}."
            )
    stamp.write_text("\n".join(reqs) + "\n", encoding="utf-8")
    return python


def convert(python: Path, source: Path, folder: Path, out: Path, outtype: str) -> Path:
    """An export-hf folder as GGUF at `out` (written under a temporary name, then renamed)."""
    tmp = out.with_name(f".{out.name}.tmp")
    cmd = [str(python), "-c", CONVERT, str(source), str(folder), "--outtype", outtype]
    done = subprocess.run(cmd + ["--outfile", str(tmp)], capture_output=True, text=True)
    if done.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        last = (done.stderr.strip().splitlines() or ["(nothing)"])[-1]
        raise UserError(f"convert_hf_to_gguf.py could not convert {folder}: {last}")
    os.replace(tmp, out)
    return out


GGUF = {  # file name: (model, converter --outtype)
    "target-f32": ("target", "f32"),
    "draft-f32": ("draft", "f32"),
    "target-f16": ("target", "f16"),
}


def gguf_files(llama: Llama, work: Path, checkpoints) -> dict[str, Path]:
    """The shipped pair as GGUF in work/gguf/, exported (export-hf) and converted unless there."""
    from nanospec.hf.export import export

    folder = work / "gguf"
    folder.mkdir(parents=True, exist_ok=True)
    out = {name: folder / f"{name}.gguf" for name in GGUF}
    missing = [name for name, path in out.items() if not path.is_file()]
    if missing:
        python = converter_python(work, llama.source)
        with tempfile.TemporaryDirectory(dir=work, prefix=".export.") as tmp:
            for name in missing:
                model, outtype = GGUF[name]
                hf = Path(tmp) / model
                if not hf.exists():
                    export(checkpoints, model, hf)
                convert(python, llama.source, hf, out[name], outtype)
    return out
