import gzip
import json

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from lhotse import CutSet, MonoCut
from lhotse.dataset.sampling.dynamic_bucketing import DynamicBucketingSampler, estimate_duration_buckets

from sharflow.core.layout import DatasetFiles
from sharflow.dataset.buckets import (
    CHARACTERS,
    TOKENS,
    bucket_bins,
    bucket_of,
    duration_bins,
    duration_token_bins,
    iter_cut_lengths,
    read_catalog_lengths,
    read_cut_lengths,
    sampler_bin_2d_of,
    sampler_bucket_of,
    write_buckets,
)
from testkit import data_files


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


def test_cut_lengths_count_normalized_text_wherever_it_is_else_text_else_nothing(tmp_path):
    """MagpieTTS reads normalized_text wherever the supervision has the key, even an empty one."""
    cuts = [
        {"duration": 1.5, "supervisions": [{"text": "abc", "custom": {"normalized_text": "a b c d"}}]},
        {"duration": 2.0, "supervisions": [{"text": "abc", "custom": {"normalized_text": ""}}]},
        {"duration": 2.5, "supervisions": [{"text": "abcd", "custom": None}]},
        {"duration": 3.0, "supervisions": [{"text": "abcde"}]},
        {"duration": 3.5, "supervisions": [{}, {"text": "not the first"}]},
        {"duration": 4.0, "supervisions": []},
        {"duration": 4.5},
    ]
    paths = []
    for i, part in enumerate((cuts[:3], cuts[3:])):  # two files, read in order
        paths.append(str(tmp_path / f"cuts.{i}.jsonl.gz"))
        with gzip.open(paths[-1], "wt", encoding="utf-8") as f:
            f.writelines(json.dumps(c) + "\n" for c in part)
    expected = [(1.5, 7), (2.0, 0), (2.5, 4), (3.0, 5), (3.5, 0), (4.0, 0), (4.5, 0)]
    assert list(iter_cut_lengths(paths)) == expected
    durations, lengths = read_cut_lengths(paths)
    assert durations.tolist() == [d for d, _ in expected] and lengths.tolist() == [n for _, n in expected]


def test_written_buckets_yaml_is_bucket_bins_in_order_with_what_lengths_count(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(3)
    durations = np.round(rng.uniform(1, 20, 300), 3)
    chars = rng.integers(5, 300, 300)
    normalized = [int(c) + 7 if i % 3 == 0 else (0 if i % 3 == 1 else None) for i, c in enumerate(chars)]
    normalized[0] = 1  # one character of normalized text still counts
    normalized[1] = 0  # and an empty one counts as empty (MagpieTTS reads it), not as the text
    lengths = np.array([c if n is None else n for n, c in zip(normalized, chars, strict=True)], dtype=float)
    table = pa.table(
        {
            "duration": durations,
            "text_chars": pa.array(chars, pa.int32()),
            "normalized_text_chars": pa.array(normalized, pa.int32()),
        }
    )
    pq.write_table(table, tmp_path / "c.parquet")
    out = tmp_path / "b.yaml"
    result = write_buckets(str(tmp_path / "c.parquet"), str(out), num_buckets=5, sub_buckets=3)
    expected = bucket_bins(durations, lengths, num_buckets=5, sub_buckets=3, z_threshold=4.0)
    assert result == expected and list(yaml.safe_load(out.read_text())) == list(expected)  # key order
    assert result["tokens"] == CHARACTERS and result["cuts"] == 300
    assert result["hours"] == round(durations.sum() / 3600, 6)
    assert (result["min_duration"], result["max_duration"]) == (durations.min(), durations.max())
    pq.write_table(table.append_column("tokens", pa.array(chars * 2)), tmp_path / "t.parquet")
    tokens = write_buckets(
        str(tmp_path / "t.parquet"), str(out), num_buckets=5, sub_buckets=3, z_threshold=2.0
    )
    assert tokens["tokens"] == TOKENS
    assert tokens == {
        **bucket_bins(durations, chars * 2.0, num_buckets=5, sub_buckets=3, z_threshold=2.0),
        "tokens": TOKENS,
    }
    plain = write_buckets(str(tmp_path / "c.parquet"), str(out), num_buckets=5)
    # more rows than one read batch (65536): the arrays are filled batch after batch
    many = pa.table(
        {"duration": np.arange(1, 140_001, dtype=float), "tokens": np.arange(140_000, dtype=np.int32)}
    )
    pq.write_table(many, tmp_path / "many.parquet")
    d, t, counted = read_catalog_lengths(str(tmp_path / "many.parquet"))
    assert counted == TOKENS and d.tolist() == list(range(1, 140_001)) and t.tolist() == list(range(140_000))
    # the z threshold reaches the 2D bins (compared with the function that makes them, called directly)
    assert tokens["max_tps"] == duration_token_bins(durations, chars * 2.0, 5, 3, 2.0)[1]
    assert "tokens" not in plain and "bucket_duration_bins_2d" not in plain
    assert yaml.safe_load(out.read_text()) == plain


def test_token_bins_by_hand():
    """Two buckets of six cuts (1 s and 2 s, tokens 1..6), three sub-buckets by cumulative tokens
    (1, 3, 6, 10, 15, 21: the thirds, 7 and 14, first reached at the 4th and 5th cut)."""
    d = np.array([1.0] * 6 + [2.0] * 6)
    t = np.array([1.0, 2, 3, 4, 5, 6] * 2)
    bins, max_tps = duration_token_bins(d, t, 2, 3)
    assert bins == [[2.0, 3.0], [2.0, 4.0], [2.0, 6.0]] * 2
    assert max_tps == [3.0, 4.0, 6.0, 1.5, 2.0, 3.0]
    # cuts shorter than a second count their own tokens per second (a 1 ms floor only)
    bins, max_tps = duration_token_bins(np.array([0.5, 0.5, 2.0, 2.0]), np.array([5.0, 5, 10, 10]), 2, 1)
    assert bins == [[2.0, 5.0], [2.0, 10.0]] and max_tps == [10.0, 5.0]


def test_2d_lookup_at_the_ratio_limit_and_under_a_second():
    bins_2d, max_tps = [[1.0, 4.0], [3.0, 10.0]], [3.0, 3.0]
    got = sampler_bin_2d_of(np.array([0.5, 0.5, 2.0, 2.0]), np.array([1.0, 2.0, 6.0, 7.0]), bins_2d, max_tps)
    # 1/0.5 = 2 <= 3 kept; 2/0.5 = 4 > 3 dropped; 6/2 = 3, at the limit, kept; 7/2 dropped
    assert got.tolist() == [0, -1, 1, -1]


def test_too_few_cuts_is_refused():
    with pytest.raises(ValueError, match="num_buckets"):
        duration_bins(np.ones(3), 5)


def test_demo_bins_drive_lhotses_dynamic_bucketing_sampler(demo_shards, tmp_path):
    cut_files = data_files(demo_shards[0] / "shar" / "cuts")
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
    # bucket_bins has the same default (all 41 cuts tie at 2.0 s: the second bucket holds them all)
    assert bucket_bins(d, t, num_buckets=2, sub_buckets=1)["max_tps"] == default
    assert bucket_bins(d, t, num_buckets=2, sub_buckets=1, z_threshold=5.0)["max_tps"] == lenient


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 8), min_size=1, max_size=4, unique=True),
    st.lists(st.lists(st.integers(1, 12), min_size=1, max_size=3, unique=True), min_size=4, max_size=4),
    st.lists(st.tuples(st.integers(1, 10), st.integers(0, 14)), min_size=1, max_size=30),
    st.one_of(st.none(), st.lists(st.floats(0.1, 6.0), min_size=12, max_size=12)),
)
def test_sampler_bins_equal_nemos_and_lhotses_own_lookup(levels, bounds, cuts, max_tps):
    """Cuts on and between the edges (integers on a grid the edges also lie on) land in the 2D bin
    NeMo's find_smallest_bucket (strict) picks, and in the 1D bucket of lhotse's bisect_left."""
    from bisect import bisect_left

    from nemo.collections.common.data.lhotse.sampling import find_smallest_bucket

    bins_2d = [
        [float(d), float(t)] for d, ts in zip(sorted(levels), bounds, strict=False) for t in sorted(ts)
    ]
    ratios = None if max_tps is None else max_tps[: len(bins_2d)]
    durations = np.array([float(d) for d, _ in cuts])
    tokens = np.array([float(t) for _, t in cuts])
    expected = [
        find_smallest_bucket(np.asarray(bins_2d), (d, t), strict=True, max_ratio=ratios)
        for d, t in zip(durations.tolist(), tokens.tolist(), strict=True)
    ]
    got = sampler_bin_2d_of(durations, tokens, bins_2d, ratios)
    assert got.tolist() == [-1 if e is None else e for e in expected]
    edges = sorted({float(d) for d in levels})
    assert sampler_bucket_of(durations, edges).tolist() == [bisect_left(edges, d) for d in durations.tolist()]
