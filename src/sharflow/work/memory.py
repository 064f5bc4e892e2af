"""Giving the memory a process has freed back to the system, between a CPU model's batches.

glibc's malloc keeps freed memory for reuse. Once a large block allocated by mmap is freed, its mmap
threshold rises (up to 32 MB), so later tensors of other shapes come from the heap, which fragments:
a CPU rank that encodes batches of many shapes grows batch after batch. The codes job's peak RSS
went from 2.5 GB on a shard of 64 cuts to 3.4 GB on one of 512 (benchmarks/bench_memory.py; with
this, 1.4 GB for both). In a probe by hand, 30 batches of 60 s of audio through the tiny codec grew
from 0.9 to 2.7 GB; with malloc_trim(0) after each batch they stayed at 0.9 GB (peak 1.4 GB), no
slower. Where the C library has no malloc_trim (musl, macOS), release_freed_memory does nothing.
"""

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None


def release_freed_memory() -> bool:
    """Return the free memory at the top of every malloc arena, and whole free pages within them, to
    the system (glibc's malloc_trim(0)). True if the C library can."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
