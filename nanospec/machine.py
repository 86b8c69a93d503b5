"""The machine a number was measured on: its cores and its CPU's name.

A speedup, a training time or a lesson's timing belongs to the machine that measured it (two
2-core machines of one kind differed by AVX-512), so every report that records one names the
machine with these.
"""

import os
import platform


def cores() -> int:
    """The cores this process may run on (what `nproc` prints)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def cpu_name() -> str:
    """The CPU's model name: Linux's /proc/cpuinfo, where `platform.processor()` is often
    empty; elsewhere what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next(
                line.split(":", 1)[1].strip() for line in f if line.startswith("model name")
            )
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def vector_extension() -> str:
    """The widest vector instructions this CPU has, as /proc/cpuinfo lists them ("" elsewhere):
    the matmul FLOP/s, and so r, depend on them."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next(
                set(line.split(":", 1)[1].split())
                for line in f
                if line.startswith(("flags", "Features"))
            )
    except (OSError, StopIteration):
        return ""
    for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("asimd", "NEON")):
        if flag in flags:
            return name
    return ""


def described() -> dict:
    """The machine and the software a measurement's JSON records: XLA's choices, and so the
    numbers, depend on the CPU, the device and the jax and jaxlib versions."""
    import jax
    import jaxlib

    device = jax.devices()[0]
    return {
        "cpu": cpu_name(),
        "cores": cores(),
        "platform": device.platform,
        "device": device.device_kind,
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
    }
