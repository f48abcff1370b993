"""What the machine executes natively, and the numeric precision that follows from it.

bfloat16 halves the bytes a convolution moves, but only hardware with bfloat16 arithmetic
turns that into speed: oneDNN runs it natively with AVX512_BF16 or AMX, and GPUs of compute
capability 8.0 (Ampere) or newer do. Elsewhere TensorFlow emulates it, slower than float32.
Measured on this project's 2-core machines, V-trace on Pong with the Nature CNN: a learner
step cost 0.37 CPU-ms per frame in bfloat16 against 0.61 in float32 on a CPU with
AVX512_BF16, and 32.5 CPU-ms per env step in bfloat16 against 3.98 in float32 on an
AVX2-only AMD EPYC (8x slower). So "auto" asks the hardware, and an explicit "bfloat16"
where it is emulated is honoured with a warning.

The decision (`choose_precision`) is a pure function of the CPU flags and the GPUs, so both
branches are testable on any machine; `resolve_precision` feeds it this machine's.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import platform
import warnings
from collections.abc import Iterable, Sequence

logger = logging.getLogger(__name__)

PRECISION_CHOICES = ("auto", "float32", "bfloat16")
"""What a config's `precision` field accepts; "auto" resolves per process, where the
network is built (a learner on a GPU node and an evaluator on a CPU node may differ)."""

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
"""CPU flags (as /proc/cpuinfo names them) with which oneDNN computes bfloat16 natively."""

REPORTED_CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
"""The flags a benchmark's `machine` object lists: what decides TF's kernels here."""

EMULATED_BF16_SLOWDOWN = 8.0
"""How much slower a bfloat16 learner step was than float32 where bfloat16 is emulated
(32.5 against 3.98 CPU-ms per env step, V-trace Nature CNN, AVX2-only AMD EPYC)."""


def check_precision(precision: str) -> None:
    """Raises ValueError unless `precision` is one of `PRECISION_CHOICES` (configs call
    this; it imports nothing heavy)."""
    if precision not in PRECISION_CHOICES:
        raise ValueError(f"precision must be one of {list(PRECISION_CHOICES)}, "
                         f"got {precision!r}.")


@dataclasses.dataclass(frozen=True)
class PrecisionChoice:
    """A resolved precision and why: what a run prints in its first lines."""

    requested: str
    precision: str
    native_bfloat16: bool
    reason: str

    def describe(self) -> str:
        how = "auto" if self.requested == "auto" else "as configured"
        return f"precision: {self.precision} ({how}: {self.reason})"


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags, lowercase ("avx2", "avx512_bf16", ...); empty where
    /proc/cpuinfo is missing (not Linux), which `choose_precision` reads as "no native
    bfloat16": the safe side."""
    return _cpu_info()[1]


def cpu_model() -> str:
    """The CPU's model name (e.g. "AMD EPYC"), or the platform's processor string."""
    return _cpu_info()[0]


@functools.lru_cache(maxsize=1)
def _cpu_info() -> tuple[str, frozenset[str]]:
    try:
        with open("/proc/cpuinfo") as f:
            model, flags = parse_cpuinfo(f.read())
    except OSError:
        model, flags = "", frozenset()
    return model or platform.processor() or platform.machine(), flags


def parse_cpuinfo(text: str) -> tuple[str, frozenset[str]]:
    """(model name, flags) of the first processor in a /proc/cpuinfo text."""
    model, flags = "", frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
        if model and flags:
            break
    return model, flags


def bfloat16_gpus() -> list[str]:
    """Names of the GPUs TensorFlow sees that compute bfloat16 natively (compute
    capability >= 8.0). Imports TensorFlow: call it where the network is built."""
    import tensorflow as tf

    names = []
    for gpu in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(gpu)
        capability = details.get("compute_capability") or (0, 0)
        if tuple(capability) >= (8, 0):
            names.append(details.get("device_name", gpu.name))
    return names


def choose_precision(
    requested: str, flags: Iterable[str], bf16_gpus: Sequence[str] = (),
    cpu: str = "this CPU",
) -> PrecisionChoice:
    """The precision to compute in for `requested` on hardware with CPU `flags` and the
    bfloat16-capable GPUs `bf16_gpus`.

    "auto" gives bfloat16 only where it is native, float32 otherwise; "float32" and
    "bfloat16" are kept as asked (the reason then says whether bfloat16 is native).

    Raises:
      ValueError: For a precision not in `PRECISION_CHOICES`.
    """
    check_precision(requested)
    flags = frozenset(flags)
    native_flags = [flag for flag in BF16_CPU_FLAGS if flag in flags]
    if bf16_gpus:
        native, why = True, f"GPU {bf16_gpus[0]} computes bfloat16 natively"
    elif native_flags:
        native, why = True, f"{cpu} has {'+'.join(native_flags)}: bfloat16 is native"
    else:
        native, why = False, (f"{cpu} has no {' or '.join(BF16_CPU_FLAGS)}: bfloat16 "
                              "would be emulated")
    precision = ("bfloat16" if native else "float32") if requested == "auto" else requested
    return PrecisionChoice(requested, precision, native, why)


_warned: set[str] = set()


def resolve_precision(requested: str) -> PrecisionChoice:
    """`choose_precision` on this machine's CPU and GPUs.

    An explicit "bfloat16" where it would be emulated still runs, with a warning (once
    per process) saying how much slower to expect.
    """
    if requested == "float32":  # Nothing to decide: no TensorFlow device query.
        return choose_precision(requested, cpu_flags(), (), cpu_model())
    choice = choose_precision(requested, cpu_flags(), bfloat16_gpus(), cpu_model())
    if choice.precision == "bfloat16" and not choice.native_bfloat16 \
            and "bfloat16" not in _warned:
        _warned.add("bfloat16")
        message = (f"precision=bfloat16, but {choice.reason}: expect learning to run about "
                   f"{EMULATED_BF16_SLOWDOWN:.0f}x slower than with float32 (measured "
                   "with the Nature CNN on an AVX2-only CPU); precision=auto picks float32 "
                   "here.")
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        logger.warning(message)
    return choice


def describe_machine(precision: str | None = None) -> dict:
    """The `machine` object of a benchmark's JSON line, without the reference rates
    (see `seed_agents.utils.reference`): CPU model, cores, the flags that decide TF's
    kernels, TensorFlow's version, and the precision used (resolved when "auto")."""
    flags = cpu_flags()
    info = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "flags": {flag: flag in flags for flag in REPORTED_CPU_FLAGS},
        "python": platform.python_version(),
    }
    try:
        import tensorflow as tf

        info["tensorflow"] = tf.__version__
    except ImportError:  # pragma: no cover - TF is a dependency
        info["tensorflow"] = None
    if precision is not None:
        choice = resolve_precision(precision)
        info["precision"] = choice.precision
        info["precision_reason"] = choice.reason
    return info
