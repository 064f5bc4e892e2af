import glob

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from lhotse import CutSet, MonoCut
from lhotse.dataset.sampling.dynamic_bucketing import DynamicBucketingSampler, estimate_duration_buckets

from sharflow.buckets import (
    CHARACTERS,
    bucket_bins,
    bucket_of,
    duration_bins,
    duration_token_bins,
    read_catalog_lengths,
    read_cut_lengths,
    write_buckets,
)
from sharflow.layout import DatasetFiles


def test_1d_bins_are_lhotses_and_balance_the_duration():
    rng = np.random.default_rng(0)
    d = rng.uniform(0.5, 20, 2000)  # no ties: a cut equal to a boundary belongs to the next bucket
    cuts = [MonoCut(id=str(i), start=0, duration=float(x), channel=0) for i, x in enumerate(d)]
    bins = duration_bins(d, 12)
    assert bins == [float(x) for x in estimate_duration_buckets(cuts, 12)]
    rounded = d.round(2)
    lhotse_rounded = estimate_duration_buckets(
        [MonoCut(id=str(i), start=0, duration=float(x), channel=0) for i, x in enumerate(rounded)], 12
    )
    assert duration_bins(rounded, 12) == [float(x) for x in lhotse_rounded]
    assert all(type(b) is float for b in bins)
    totals = np.array([d[bucket_of(d, bins) == i].sum() for i in range(12)])
    per_bucket = d.sum() / 12
    assert (totals[:-1] > per_bucket).all() and (totals[:-1] <= per_bucket + d.max()).all()
    assert totals[:-1].max() - totals[:-1].min() <= d.max() and totals[-1] <= per_bucket + d.max()


def test_weights_shift_the_bins_towards_the_heavier_dataset():
    short, long = np.full(500, 2.0), np.full(500, 10.0)
    d = np.concatenate([short, long])
    even = duration_bins(d, 4)
    favour_short = duration_bins(d, 4, np.concatenate([np.full(500, 9.0), np.full(500, 1.0)]))
    assert duration_bins(d, 4, np.ones(1000)) == even
    assert sum(b <= 2.0 for b in favour_short) > sum(b <= 2.0 for b in even)


def test_2d_bins_split_each_duration_bucket_by_tokens():
    rng = np.random.default_rng(1)
    d = rng.uniform(1, 15, 3000)
    t = (d * 15 + rng.normal(0, 5, 3000)).clip(1)
    bins, max_tps = duration_token_bins(d, t, 6, 3)
    assert len(bins) == len(max_tps) == 18
    for b in range(6):
        group = bins[3 * b : 3 * b + 3]
        assert len({x[0] for x in group}) == 1  # same duration bound
        assert [x[1] for x in group] == sorted(x[1] for x in group)  # increasing token bounds
    assert all(0 < tps < 100 for tps in max_tps)


def test_too_few_cuts_is_refused():
    with pytest.raises(ValueError, match="num_buckets"):
        duration_bins(np.ones(3), 5)


def test_demo_bins_drive_lhotses_dynamic_bucketing_sampler(demo_shards, tmp_path):
    cut_files = sorted(glob.glob(str(demo_shards[0] / "shar" / "cuts" / "*")))
    catalog = DatasetFiles(str(demo_shards[0])).catalog
    result = write_buckets(catalog, str(tmp_path / "b.yaml"), num_buckets=6, sub_buckets=2)
    assert yaml.safe_load((tmp_path / "b.yaml").read_text()) == result
    assert len(result["bucket_duration_bins"]) == 5 and len(result["bucket_duration_bins_2d"]) == 12
    # the catalog's columns are the cuts' lengths exactly: the cuts-file path gives the same bins
    durations, tokens = read_cut_lengths(cut_files)
    assert len(durations) == 56 and (tokens > 10).all() and len(set(tokens.tolist())) > 20
    from_catalog = read_catalog_lengths(catalog)
    assert from_catalog[2] == CHARACTERS
    np.testing.assert_array_equal(from_catalog[0], durations)
    np.testing.assert_array_equal(from_catalog[1], tokens)
    assert bucket_bins(durations, tokens, num_buckets=6, sub_buckets=2) == {**result, "tokens": CHARACTERS}
    cuts = CutSet.from_shar(fields={"cuts": cut_files})
    sampler = DynamicBucketingSampler(
        cuts,
        max_duration=30.0,
        duration_bins=result["bucket_duration_bins"],
        num_buckets=6,
        shuffle=True,
        seed=0,
        buffer_size=100,
    )
    seen = [c.id for batch in sampler for c in batch]
    assert sorted(seen) == sorted(c.id for c in CutSet.from_shar(fields={"cuts": cut_files}))


def test_few_or_tied_cuts_give_fewer_buckets_consistently():
    result = bucket_bins(np.array([2.0, 4.0, 4.0]), np.array([5.0, 5.0, 5.0]), num_buckets=8, sub_buckets=2)
    assert result["num_buckets"] == len(result["bucket_duration_bins"]) + 1 == 2
    assert len(result["bucket_duration_bins_2d"]) >= 2


def test_a_cut_at_a_boundary_goes_where_lhotses_estimator_counted_it():
    # estimate_duration_buckets makes a boundary of the first cut of the next bucket, so bucket_of
    # puts a cut equal to a boundary in the upper bucket and one a ulp below in the lower one.
    # (lhotse's sampler itself assigns with bisect_left, i.e. to the lower bucket.)
    d = np.array([1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0])
    bins = duration_bins(d, 3)
    assert (
        bins
        == [
            float(x)
            for x in estimate_duration_buckets(
                [MonoCut(id=str(i), start=0, duration=float(x), channel=0) for i, x in enumerate(d)], 3
            )
        ]
        == [2.0, 3.0]
    )
    probes = np.array(
        [np.nextafter(2.0, 0.0), 2.0, np.nextafter(2.0, 9.0), np.nextafter(3.0, 0.0), 3.0, 99.0]
    )
    assert bucket_of(probes, bins).tolist() == [0, 1, 1, 1, 2, 2]


def loop_bins(durations, num_buckets, weights=None):
    """The bins as a plain loop over the sorted cuts (lhotse's estimator, with weights)."""
    weights = np.ones_like(durations) if weights is None else weights
    order = np.argsort(durations, kind="stable")
    per_bucket = (durations * weights).sum() / num_buckets
    bins, total = [], 0.0
    for i in order:
        if total > per_bucket:
            bins.append(float(durations[i]))
            total = 0.0
        total += float(durations[i] * weights[i])
    return bins


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.05, 40.0, allow_nan=False), min_size=2, max_size=200),
    st.integers(2, 16),
    st.integers(0, 3),
    st.booleans(),
)
def test_duration_bins_equal_lhotses_estimator_on_any_durations(values, num_buckets, decimals, weighted):
    d = np.round(np.asarray(values), decimals)  # few decimals: many ties, as real manifests have
    d = np.maximum(d, 0.01)
    n = min(num_buckets, len(d))
    if weighted:
        w = np.linspace(0.5, 2.0, len(d))
        assert duration_bins(d, n, w) == loop_bins(d, n, w)
    else:
        cuts = [MonoCut(id=str(i), start=0, duration=float(x), channel=0) for i, x in enumerate(d)]
        assert duration_bins(d, n) == [float(x) for x in estimate_duration_buckets(cuts, n)]


def test_bucket_bins_figures_exactly_at_the_edges():
    d = np.array([1.0, 2.0, 3.0, 4.0])
    t = np.array([10.0, 20.0, 30.0, 40.0])
    assert bucket_bins(d, t, num_buckets=2) == {  # 2 is the smallest count that gets bins
        "num_buckets": 2,
        "bucket_duration_bins": [4.0],  # totals: 1+2+3 = 6 > 10/2, so 4.0 opens the second
        "min_duration": 1.0,
        "max_duration": 4.0,
        "cuts": 4,
        "hours": round(10.0 / 3600, 6),
    }
    assert bucket_bins(d, t, num_buckets=1)["bucket_duration_bins"] == []
    empty = bucket_bins(np.zeros(0), np.zeros(0), num_buckets=8, sub_buckets=2)
    assert empty == {
        "num_buckets": 1,
        "bucket_duration_bins": [],
        "min_duration": 0.0,
        "max_duration": 0.0,
        "cuts": 0,
        "hours": 0.0,
    }
    with_2d = bucket_bins(d, t, num_buckets=2, sub_buckets=2)
    # bucket 1 (1, 2, 3 s; 10, 20, 30 tokens) splits where the running total reaches half (30):
    # {10} and {20, 30}; bucket 2 holds the 4 s cut alone, bounded by the longest duration
    assert with_2d["bucket_duration_bins_2d"] == [[4.0, 10.0], [4.0, 30.0], [4.0, 40.0]]
    assert with_2d["tokens"] == CHARACTERS and len(with_2d["max_tps"]) == 3


def test_outliers_are_dropped_above_a_z_score_of_4_by_default():
    # 40 cuts at 10 tokens/s and one at 10 + 4.5 sigma: kept at z 5, dropped at the default 4
    d = np.full(41, 2.0)
    t = np.full(41, 20.0)
    t[:20] = 19.0
    t[20:40] = 21.0
    for rate in np.arange(10.5, 30.0, 0.05):  # the outlier moves mean and sigma: search its rate
        t[40] = 2.0 * rate
        tps = t / d
        z = (tps - tps.mean()) / tps.std()
        if 4.0 < z[40] < 5.0:
            break
    assert 4.0 < z[40] < 5.0
    _, default = duration_token_bins(d, t, 1 + 1, 1, edges=[])
    _, lenient = duration_token_bins(d, t, 2, 1, z_threshold=5.0, edges=[])
    assert lenient == [tps.max()] and default == [tps[:40].max()]
