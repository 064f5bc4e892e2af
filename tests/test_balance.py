import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharflow.work.balance import imbalance, loads, lpt_assign


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


def test_imbalance_is_max_over_mean_and_one_when_empty():
    assert imbalance([3.0, 1.0]) == 1.5 and imbalance([2.0, 2.0]) == 1.0
    assert imbalance([0.0, 0.0]) == 1.0  # nothing to balance: perfect


def test_bins_must_be_positive():
    with pytest.raises(ValueError, match=r"^bins must be >= 1, got 0$"):
        lpt_assign({"a": 1.0}, 0)


def brute_force_makespan(costs: list[float], bins: int) -> float:
    """The optimal largest bin load, by trying every assignment (tiny inputs only)."""
    best = float("inf")
    for assignment in itertools.product(range(bins), repeat=len(costs)):
        load = [0.0] * bins
        for cost, b in zip(costs, assignment, strict=True):
            load[b] += cost
        best = min(best, max(load))
    return best


def plain_lpt(costs: dict, bins: int) -> list[list]:
    """LPT written from its definition with lists: largest first (ties by key), onto the least-loaded
    bin (ties by index), without a heap."""
    load, out = [0.0] * bins, [[] for _ in range(bins)]
    for key in sorted(costs, key=lambda k: (-costs[k], k)):
        b = min(range(bins), key=lambda i: (load[i], i))
        out[b].append(key)
        load[b] += costs[key]
    return [sorted(units) for units in out]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.0, 2.0, 3.0, 5.0, 8.0]), min_size=0, max_size=7), st.integers(1, 4))
def test_lpt_against_its_definition_invariants_and_the_optimum(values, bins):
    costs = {f"u{i}": v for i, v in enumerate(values)}  # small integers: many exact ties
    got = lpt_assign(costs, bins)
    assert got == plain_lpt(costs, bins)
    assert len(got) == bins and sorted(k for b in got for k in b) == sorted(costs)
    assert all(b == sorted(b) for b in got)
    makespan = max(loads(got, costs))
    optimum = brute_force_makespan(values, bins)
    assert optimum <= makespan <= 4 / 3 * optimum + 1e-9  # Graham's bound for LPT
    # list scheduling: the fullest bin was the least loaded when it got its last unit
    if values:
        assert makespan <= sum(values) / bins + max(values)
