"""Order-preserving parallel map over a stream, in bounded memory."""

import itertools
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def resolve_workers(workers: int) -> int:
    """0 means every core this process may use."""
    return workers if workers > 0 else len(os.sched_getaffinity(0))


def ahead(fn: Callable[[T], R], items: Iterable[T]) -> Iterator[tuple[T, R]]:
    """Yield (item, fn(item)) in order, computing the next item's fn in a thread meanwhile.

    For I/O-bound loading (decoding audio) ahead of compute-bound use (a model): at most the
    current result and the next are in memory.
    """
    items = iter(items)
    with ThreadPoolExecutor(1) as pool:
        current = next(items, _END)
        pending = pool.submit(fn, current) if current is not _END else None
        while current is not _END:
            following = next(items, _END)
            upcoming = pool.submit(fn, following) if following is not _END else None
            yield current, pending.result()
            current, pending = following, upcoming


_END = object()


def ordered_map(
    fn: Callable[[T], R],
    items: Iterable[T],
    workers: int,
    window: int | None = None,
    initializer: Callable | None = None,
) -> Iterator[tuple[T, R]]:
    """Yield (item, fn(item)) in input order, computing fn in `workers` spawned processes.

    At most `window` items (default 2 × workers) are in flight, so a long stream never piles up
    in memory. With workers <= 1, or fewer than two items, fn runs here and no process starts.
    `fn` must be importable (module level; functools.partial of one is fine).
    """
    items = iter(items)
    head = list(itertools.islice(items, 2))
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
