"""The C heap of this process (glibc's malloc): how much it holds, and giving back what
is free.

glibc keeps memory that threads freed in per-thread arenas rather than returning it to
the system, so a process whose threads allocate and free many short-lived buffers (a
gRPC server, TensorFlow's ops) shows a resident size that creeps up with nothing kept.
`heap_figures` tells that apart from a leak; `malloc_trim` returns the free pages.

A thread gets an arena of its own when the one it used is busy, up to 8 per core, and a
page of an arena stays resident while any small block on it lives: with TensorFlow's,
gRPC's and Reverb's ~40 threads in a learner, free pieces scattered over many arenas
grow its resident size by a few MiB an hour (R2D2's soak: the free bytes in the heap
rose with the RSS while the bytes in use stayed flat, and trims after each checkpoint
did not return them). `limit_arenas` caps the arenas at the threads that can run at
once; `arena_count` says how many there are.
Elsewhere (musl, macOS) these answer None: nothing is assumed of the C library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import functools
import os
import re
import tempfile
from typing import Any

_M_ARENA_MAX = -8  # mallopt's parameter number, from glibc's malloc.h


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


@dataclasses.dataclass(frozen=True)
class HeapFigures:
    in_use_mib: float  # allocated and not freed (uordblks), all arenas
    free_mib: float  # freed, still held by the allocator (fordblks)
    mmapped_mib: float  # large blocks mapped one by one (hblkhd), returned when freed


@functools.cache
def _libc() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    # mallinfo2 (glibc >= 2.33): mallinfo's int fields wrap above 2 GiB.
    if not (hasattr(libc, "mallinfo2") and hasattr(libc, "malloc_trim")):
        return None
    libc.mallinfo2.restype = _MallInfo2
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    libc.malloc_trim.restype = ctypes.c_int
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.malloc_info.restype = ctypes.c_int
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.fopen.restype = ctypes.c_void_p
    libc.fclose.argtypes = [ctypes.c_void_p]
    return libc


def heap_figures() -> HeapFigures | None:
    """The C heap's bytes in use and free, or None where the C library is not glibc."""
    libc = _libc()
    if libc is None:
        return None
    info = libc.mallinfo2()
    return HeapFigures(info.uordblks / 2**20, info.fordblks / 2**20, info.hblkhd / 2**20)


def malloc_trim() -> bool | None:
    """Returns the heap's free pages to the system (every arena); whether any were,
    or None where the C library is not glibc."""
    libc = _libc()
    return None if libc is None else bool(libc.malloc_trim(0))


def limit_arenas(count: int | None = None) -> bool | None:
    """Caps glibc's arenas at `count` (default: the cores this process may run on, at
    least 2); whether glibc took it, or None where the C library is not glibc.

    Call it at process start, before threads allocate: glibc fixes its limit once the
    process has 8 arenas, and keeps those it made. `SEED_AGENTS_MALLOC_ARENAS` overrides
    `count` (0 leaves glibc's default, 8 per core). Fewer arenas than running threads
    would make them wait on each other's locks; more keep free pages that only their own
    thread reuses.
    """
    libc = _libc()
    if libc is None:
        return None
    setting = os.environ.get("SEED_AGENTS_MALLOC_ARENAS")
    if setting is not None:
        try:
            count = int(setting)
        except ValueError:
            raise ValueError(f"SEED_AGENTS_MALLOC_ARENAS={setting!r}: expected a whole "
                             "number of arenas (0: glibc's default)") from None
        if count == 0:
            return False
    if count is None:
        count = max(len(os.sched_getaffinity(0)), 2)
    if count < 1:
        raise ValueError(f"an arena limit must be >= 1, got {count}")
    return bool(libc.mallopt(_M_ARENA_MAX, count))


def arena_count() -> int | None:
    """How many arenas glibc's malloc holds in this process (from `malloc_info`), or
    None where the C library is not glibc."""
    libc = _libc()
    if libc is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".xml") as report:
        stream = libc.fopen(report.name.encode(), b"w")
        if not stream:
            return None
        try:
            libc.malloc_info(0, stream)
        finally:
            libc.fclose(stream)
        return len(re.findall(rb"<heap nr=", report.read()))
