from functools import partial

import pytest

from sharflow.core.parallel import ahead, ordered_map


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
