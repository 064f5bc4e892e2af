import time
from functools import partial

import pytest

from sharflow.work.parallel import ahead, chunked, ordered_map, prefetched


def scaled(factor, x):
    return x * factor


def test_results_keep_input_order_for_any_worker_count():
    for workers in (1, 2, 3):
        out = list(ordered_map(partial(scaled, 3), range(50), workers, window=4))
        assert out == [(i, 3 * i) for i in range(50)]


def test_stream_is_consumed_lazily():
    seen = []

    def items():
        for i in range(100):
            seen.append(i)
            yield i

    stream = ordered_map(partial(scaled, 1), items(), workers=2, window=4)
    next(stream)
    assert len(seen) <= 6  # the window, plus the head peeked to decide on processes


def test_single_item_runs_in_process():
    assert list(ordered_map(partial(scaled, 2), [5], workers=4)) == [(5, 10)]


_LOADED: list[int] = []  # what a preloading initializer built (in the process it ran in)


def _load(n: int) -> None:
    _LOADED.append(n)


def _with_loaded(x: int) -> tuple[int, int, int]:
    """(x, what was loaded in this process, this process's pid)."""
    import os

    return x, sum(_LOADED), os.getpid()


def test_preload_builds_the_tools_once_here_and_the_forked_workers_share_them():
    import os

    _LOADED.clear()
    out = list(
        ordered_map(_with_loaded, range(20), workers=2, window=4, initializer=partial(_load, 7), preload=True)
    )
    assert [x for x, _ in out] == list(range(20)) and _LOADED == [7]  # once, here
    assert {loaded for _, (_, loaded, _) in out} == {7}  # every worker sees what was built here
    pids = {pid for _, (_, _, pid) in out}
    assert out[0][1][2] == os.getpid() and len(pids) > 1  # the first item here, the rest in workers
    _LOADED.clear()
    small = list(ordered_map(_with_loaded, range(2), workers=2, initializer=partial(_load, 1), preload=True))
    assert {pid for _, (_, _, pid) in small} == {os.getpid()} and _LOADED == [1]  # too few to fork for


def test_ahead_keeps_order_and_loads_exactly_one_item_ahead():
    import threading

    loaded, consumer_at = [], []
    gate = threading.Event()

    def load(x):
        loaded.append(x)
        if x == 1:
            gate.set()
        return x * 10

    out = []
    for item, value in ahead(load, range(4)):
        if item == 0:
            assert gate.wait(5)  # item 1 loads while item 0 is being used
        consumer_at.append(len(loaded))
        out.append((item, value))
    assert out == [(0, 0), (1, 10), (2, 20), (3, 30)]
    assert all(n <= i + 2 for i, n in enumerate(consumer_at))  # never more than one item ahead
    assert list(ahead(load, [])) == []


def test_ahead_raises_the_loaders_error_for_its_item():
    def load(x):
        if x == 2:
            raise ValueError(f"bad {x}")
        return x

    got = []
    with pytest.raises(ValueError, match="bad 2"):
        for item, _ in ahead(load, range(5)):
            got.append(item)
    assert got == [0, 1]


def test_prefetched_makes_the_next_items_while_one_is_used_never_more_than_depth_ahead():
    import threading

    made, gate = [], threading.Event()

    def producer():
        for x in range(6):
            made.append(x)
            if x == 2:
                gate.set()
            yield x

    out = []
    for x in prefetched(producer(), depth=1):
        if x == 0:
            assert gate.wait(5)  # items 1 and 2 are made while item 0 is used
        assert len(made) <= x + 3  # one used, one waiting, one being made
        out.append(x)
    assert out == list(range(6))
    assert list(prefetched(iter([]))) == []


def test_prefetched_raises_the_producers_error_and_stops_a_producer_when_the_consumer_stops():
    def failing():
        yield 1
        raise ValueError("bad item")

    with pytest.raises(ValueError, match="bad item"):
        list(prefetched(failing()))
    made = []

    def endless():
        n = 0
        while True:
            made.append(n)
            yield n
            n += 1

    for x in prefetched(endless(), depth=2):
        if x == 3:
            break
    count = len(made)
    assert count <= 3 + 4
    time.sleep(0.3)
    assert len(made) == count  # the producer stopped with the consumer


def test_chunked_gives_every_item_once_in_order_and_reads_only_what_it_hands_out():
    read = []

    def items():
        for i in range(10):
            read.append(i)
            yield i

    chunks = chunked(items(), 4)
    assert next(chunks) == [0, 1, 2, 3] and read == [0, 1, 2, 3]
    assert list(chunks) == [[4, 5, 6, 7], [8, 9]]
    assert list(chunked([], 4)) == []
