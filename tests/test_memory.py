"""sharflow.work.memory: the heap a CPU rank freed goes back to the system."""

import platform
from pathlib import Path

import numpy as np
import pytest

from sharflow.work.memory import release_freed_memory


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise KeyError("VmRSS")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_heap_goes_back_to_the_system():
    """A large mmap'd block freed raises glibc's mmap threshold, so the next blocks of 2 MB come from
    the heap; freed below one still in use, they stay in the process until release_freed_memory."""
    big = np.ones(16 << 20, np.uint8)
    del big
    arrays = [np.ones((2 << 20) + i * 4096, np.uint8) for i in range(48)]  # ~100 MB
    top = arrays[-1]
    del arrays
    held = rss_mb()
    assert release_freed_memory() is True
    assert rss_mb() < held - 50, (held, rss_mb())  # what free() kept, the trim gave back
    assert top.sum() == top.size
