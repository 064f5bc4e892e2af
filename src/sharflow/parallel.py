"""Order-preserving parallel map over a stream, in bounded memory."""

import itertools
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def resolve_workers(workers: int) -> int:
    """0 means every core this process may use."""
    return workers if workers > 0 else len(os.sched_getaffinity(0))


def ordered_map(fn: Callable[[T], R], items: Iterable[T], workers: int, window: int | None = None,
                initializer: Callable | None = None) -> Iterator[tuple[T, R]]:
    """Yield (item, fn(item)) in input order, computing fn in `workers` spawned processes.

    At most `window` items (default 2 × workers) are in flight, so a long stream never piles up
    in memory. With workers <= 1, or fewer than two items, fn runs here and no process starts.
    `fn` must be importable (module level; functools.partial of one is fine).
    """
    items = iter(items)
    head = [x for _, x in zip(range(2), items)]
    if workers <= 1 or len(head) < 2:
        if initializer is not None:
            initializer()
        for item in itertools.chain(head, items):
            yield item, fn(item)
        return
    window = window or 2 * workers
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=initializer) as pool:
        pending: deque[tuple[T, Future]] = deque()
        for item in itertools.chain(head, items):
            pending.append((item, pool.submit(fn, item)))
            if len(pending) >= window:
                item, future = pending.popleft()
                yield item, future.result()
        while pending:
            item, future = pending.popleft()
            yield item, future.result()
