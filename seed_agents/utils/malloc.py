"""The C heap of this process (glibc's malloc): how much it holds, and giving back what
is free.

glibc keeps memory that threads freed in per-thread arenas rather than returning it to
the system, so a process whose threads allocate and free many short-lived buffers (a
gRPC server, TensorFlow's ops) shows a resident size that creeps up with nothing kept.
`heap_figures` tells that apart from a leak; `malloc_trim` returns the free pages.
Elsewhere (musl, macOS) both answer None: nothing is assumed of the C library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import functools
from typing import Any


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
