import numpy as np
import pytest

from sharflow.balance import imbalance, loads, lpt_assign


def test_every_unit_is_assigned_once_and_deterministically():
    costs = {f"g{i}": float((i * 37) % 11 + 1) for i in range(50)}
    a = lpt_assign(costs, 4)
    assert sorted(k for b in a for k in b) == sorted(costs)
    assert a == lpt_assign(dict(reversed(list(costs.items()))), 4)


def test_lpt_is_near_optimal_on_zipf_sizes():
    rng = np.random.default_rng(0)
    sizes = np.sort(rng.zipf(1.6, 3000).clip(1, 400))
    costs = {f"spk{i:05d}": float(n * n + 50 * n) for i, n in enumerate(sizes)}
    bins = 8
    got = imbalance(loads(lpt_assign(costs, bins), costs))
    lower_bound = max(max(costs.values()), sum(costs.values()) / bins) / (sum(costs.values()) / bins)
    assert got <= max(1.05, lower_bound * 1.0001)


def test_more_bins_than_units_leaves_empty_bins():
    a = lpt_assign({"a": 3.0, "b": 1.0}, 4)
    assert a == [["a"], ["b"], [], []]
    assert imbalance(loads(a, {"a": 3.0, "b": 1.0})) == pytest.approx(3.0)


def test_bins_must_be_positive():
    with pytest.raises(ValueError):
        lpt_assign({"a": 1.0}, 0)
