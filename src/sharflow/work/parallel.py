"""Order-preserving parallel map over a stream, in bounded memory."""

import contextlib
import itertools
import multiprocessing
import os
import queue
import threading
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


def prefetched(items: Iterable[T], depth: int = 1) -> Iterator[T]:
    """Yield the items of `items`, which a thread produces meanwhile, at most `depth` ahead.

    For a stage whose items (groups of decoded records) take long to produce and long to use: the
    producer keeps going while the consumer works, and at most depth + 2 items exist at once (one
    being used, `depth` waiting, one being made). An exception in the producer is raised here; a
    consumer that stops early stops the producer at its next item.
    """
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                ready.put((item, None))
                if stop.is_set():
                    return
            ready.put((_END, None))
        except BaseException as e:  # handed to the consumer, raised there
            ready.put((_END, e))
        finally:
            if hasattr(items, "close"):  # a generator's own clean-up (a pool it holds) runs here
                items.close()

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        while True:
            item, error = ready.get()
            if error is not None:
                raise error
            if item is _END:
                return
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting to put, then let it see `stop`
            with contextlib.suppress(queue.Empty):
                ready.get(timeout=0.1)
        thread.join()


def chunked(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of `size` items of `items` (the last may be shorter), read as they are needed."""
    items = iter(items)
    while chunk := list(itertools.islice(items, size)):
        yield chunk


def ordered_map(
    fn: Callable[[T], R],
    items: Iterable[T],
    workers: int,
    window: int | None = None,
    initializer: Callable | None = None,
    preload: bool = False,
) -> Iterator[tuple[T, R]]:
    """Yield (item, fn(item)) in input order, computing fn in `workers` spawned processes.

    At most `window` items (default 2 × workers) are in flight, so a long stream never piles up
    in memory. With workers <= 1, or fewer than two items, fn runs here and no process starts.
    `fn` must be importable (module level; functools.partial of one is fine).

    With `preload`, `initializer` runs here, and so does fn on the first item (which loads what fn
    needs: tools loaded on first use), before the workers are forked from this process, inheriting
    what was loaded instead of each being spawned and loading it again: for tools that take long to
    load and start no threads (the text stage's NeMo tokenizers and grammars, ~16 s of imports and
    building a process). What the workers run must not wait on a lock another thread of this
    process may hold at the fork (logging's are made anew in a forked child; tqdm's monitor thread
    holds tqdm's, which the workers do not use): the text stage's decisions take no other lock.
    """
    items = iter(items)
    if preload:
        if initializer is not None:
            initializer()
        initializer = None
        first = next(items, _END)
        if first is _END:
            return
        yield first, fn(first)
    head = list(itertools.islice(items, 2))
    if workers <= 1 or len(head) < 2:
        if initializer is not None:
            initializer()
        for item in itertools.chain(head, items):
            yield item, fn(item)
        return
    window = window or 2 * workers
    ctx = multiprocessing.get_context("fork" if preload else "spawn")
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
