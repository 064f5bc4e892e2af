from functools import partial

from sharflow.parallel import ordered_map


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
