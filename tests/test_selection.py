import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sharflow.context.selection import SelectionRules, select_context, select_context_exhaustive


def clustered(n, d=32, clusters=4, spread=0.6, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(clusters, d))
    labels = rng.integers(0, clusters, n)
    return centers[labels] + spread * rng.normal(size=(n, d)), rng.uniform(0.5, 8.0, n)


def same(a, b):
    np.testing.assert_array_equal(a.choice, b.choice)
    np.testing.assert_array_equal(np.isnan(a.similarity), np.isnan(b.similarity))
    np.testing.assert_allclose(a.similarity, b.similarity, rtol=0, atol=1e-5)
    np.testing.assert_allclose(a.best_seen, b.best_seen, rtol=0, atol=1e-5)


@pytest.mark.parametrize("top_k, block", [(1, 7), (4, 64), (32, 1000)])
@pytest.mark.parametrize(
    "rules",
    [
        SelectionRules(min_similarity=0.6, min_duration=3.0),
        SelectionRules(min_similarity=0.3, min_duration=6.5, max_duration=7.5),  # forces widening
        SelectionRules(min_similarity=0.95, min_duration=0.0),  # mostly rejects
    ],
)
def test_topk_equals_exhaustive(rules, top_k, block):
    emb, dur = clustered(400)
    rules = SelectionRules(rules.min_similarity, rules.min_duration, rules.max_duration, top_k)
    same(select_context(emb, dur, rules, block=block), select_context_exhaustive(emb, dur, rules))


def test_widening_happens_and_stays_exact():
    emb, dur = clustered(300, clusters=1, spread=0.2)
    rules = SelectionRules(min_similarity=0.0, min_duration=7.9, top_k=2)
    sel = select_context(emb, dur, rules, block=50)
    assert sel.widened_rows > 0
    same(sel, select_context_exhaustive(emb, dur, rules))
    chosen = sel.choice[sel.choice >= 0]
    assert len(chosen) and (dur[chosen] >= 7.9).all()


def test_self_and_identical_segments_are_never_chosen():
    emb, dur = clustered(60)
    emb[1] = emb[0]  # identical audio twice
    segment = np.arange(60)
    segment[1] = 0
    rules = SelectionRules(min_similarity=-1.0, min_duration=0.0, top_k=1)
    sel = select_context(emb, dur, rules, same_segment=segment)
    assert sel.choice[0] not in (0, 1) and sel.choice[1] not in (0, 1)
    assert (sel.choice != np.arange(60)).all()
    same(sel, select_context_exhaustive(emb, dur, rules, same_segment=segment))


def test_reject_reports_best_similarity_seen():
    emb = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    dur = np.array([4.0, 4.0, 4.0])
    sel = select_context(emb, dur, SelectionRules(min_similarity=0.9, min_duration=3.0))
    assert (sel.choice == -1).all()
    np.testing.assert_allclose(sel.best_seen, [0.6, 0.8, 0.8], atol=1e-6)


def test_ties_break_by_index_whatever_k():
    emb = np.ones((10, 4))
    dur = np.full(10, 5.0)
    for k in (1, 3, 20):
        sel = select_context(emb, dur, SelectionRules(min_similarity=0.5, min_duration=1.0, top_k=k), block=3)
        assert sel.choice.tolist() == [1] + [0] * 9


def signs(rows):
    """Embeddings of ±1 entries in 16 dimensions: normalised entries are ±1/4, so every cosine is an
    exact multiple of 1/8, computed without rounding in any order: many exact ties."""
    return np.where(np.array(rows, dtype=np.float64) > 0, 1.0, -1.0)


def test_thresholds_at_the_value_itself_and_on_each_side():
    # cosines: 0-1 = 0.5, 0-2 = 0.25, 1-2 = 0.75 (exact)
    base = np.ones(16)
    emb = np.stack([base, np.r_[-np.ones(4), np.ones(12)], np.r_[-np.ones(6), np.ones(10)]])
    below, above = np.nextafter(0.5, 0.0), np.nextafter(0.5, 1.0)
    for min_similarity, chosen in ((below, 1), (0.5, 1), (above, -1)):
        sel = select_context(emb, np.full(3, 4.0), SelectionRules(min_similarity, min_duration=3.0, top_k=1))
        assert sel.choice[0] == chosen, min_similarity
    for min_duration, chosen in ((np.nextafter(4.0, 0.0), 1), (4.0, 1), (np.nextafter(4.0, 9.0), -1)):
        sel = select_context(
            emb, np.array([1.0, 4.0, 1.0]), SelectionRules(0.0, min_duration=min_duration, top_k=1)
        )
        assert sel.choice[0] == chosen, min_duration
    for max_duration, chosen in ((np.nextafter(4.0, 0.0), 2), (4.0, 1), (np.nextafter(4.0, 9.0), 1)):
        rules = SelectionRules(0.0, min_duration=0.0, max_duration=max_duration, top_k=1)
        assert select_context(emb, np.array([1.0, 4.0, 1.0]), rules).choice[0] == chosen, max_duration


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_topk_equals_the_plain_exhaustive_walk_on_ties_and_edge_sizes(data):
    n = data.draw(st.integers(1, 12), label="n")
    rows = data.draw(st.lists(st.lists(st.booleans(), min_size=16, max_size=16), min_size=n, max_size=n))
    emb = signs(rows)
    durations = np.array(
        data.draw(
            st.lists(
                st.sampled_from([0.5, np.nextafter(3.0, 0.0), 3.0, 4.0, 5.0, 8.0]), min_size=n, max_size=n
            )
        )
    )
    rules = SelectionRules(
        min_similarity=data.draw(
            st.sampled_from([-1.0, -0.25, 0.0, 0.25, np.nextafter(0.5, 1.0), 0.5, 0.875, 1.0])
        ),
        min_duration=3.0,
        max_duration=data.draw(st.sampled_from([None, 5.0, 3.0])),
        top_k=data.draw(st.integers(1, n + 1)),
    )
    segments = (
        np.array(data.draw(st.lists(st.integers(0, n), min_size=n, max_size=n)))
        if data.draw(st.booleans())
        else None
    )
    eligible = (
        np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
        if data.draw(st.booleans())
        else None
    )
    fast = select_context(
        emb,
        durations,
        rules,
        same_segment=segments,
        block=data.draw(st.integers(1, n + 1)),
        eligible=eligible,
    )
    same(fast, select_context_exhaustive(emb, durations, rules, same_segment=segments, eligible=eligible))
    if eligible is not None:  # a marked-failing utterance is never a context, but may get one
        assert all(eligible[j] for j in fast.choice if j >= 0)


def test_an_ineligible_utterance_gets_a_context_but_is_never_one():
    emb = signs([[True] * 16, [True] * 15 + [False], [True] * 14 + [False] * 2])
    rules = SelectionRules(0.0, min_duration=0.0, top_k=1)
    durations = np.ones(3)
    assert select_context(emb, durations, rules).choice.tolist() == [1, 0, 1]
    eligible = np.array([True, False, True])
    for sel in (
        select_context(emb, durations, rules, eligible=eligible),
        select_context_exhaustive(emb, durations, rules, eligible=eligible),
    ):
        assert sel.choice.tolist() == [2, 0, 0]


def test_widened_rows_are_counted_exactly():
    """Identical embeddings: with top_k 1 each row sees two candidates tied at the k-th value, so it
    cannot decide among them and widens once (2 -> 8 >= n: complete). Well separated pairs whose
    partner is eligible decide at once: nothing widens."""
    n = 6
    rules = SelectionRules(min_similarity=0.5, min_duration=1.0, top_k=1)
    sel = select_context(np.ones((n, 4)), np.full(n, 2.0), rules)
    assert sel.widened_rows == n
    assert sel.choice.tolist() == [1, 0, 0, 0, 0, 0]  # ties by index, never itself
    pairs = np.repeat(np.eye(3) * 10, 2, axis=0) + np.linspace(0, 0.1, 6)[:, None]
    sel = select_context(pairs, np.full(6, 2.0), SelectionRules(0.5, 1.0, top_k=2))
    assert sel.widened_rows == 0 and sel.choice.tolist() == [1, 0, 3, 2, 5, 4]
    # partners too short, and the k-th value already below the threshold: decided (none) at once
    sel = select_context(pairs, np.full(6, 2.0), SelectionRules(0.5, 3.0, top_k=2))
    assert sel.widened_rows == 0 and sel.choice.tolist() == [-1] * 6 and (sel.best_seen > 0.99).all()


def test_a_complete_row_walks_down_to_its_least_similar_candidate():
    """n = 3 and top_k >= n: every row is complete; the only eligible candidate of row 0 is its least
    similar one (equal to the last value walked), which an incomplete walk would stop before."""
    emb = np.array([[1.0, 0.0], [0.9, 0.1], [0.2, 1.0]])
    dur = np.array([5.0, 1.0, 5.0])  # row 0's most similar (1) is too short
    rules = SelectionRules(min_similarity=-1.0, min_duration=3.0, top_k=8)
    sel = select_context(emb, dur, rules)
    assert sel.choice.tolist() == [2, 0, 0] and sel.widened_rows == 0
    same(sel, select_context_exhaustive(emb, dur, rules))


def test_blocks_of_any_size_give_the_same_selection():
    emb, dur = clustered(50, seed=3)
    rules = SelectionRules(min_similarity=0.3, min_duration=3.0, top_k=3)
    whole = select_context(emb, dur, rules)
    for block in (1, 7, 49, 50, 1024):
        same(select_context(emb, dur, rules, block=block), whole)


def test_a_kth_value_equal_to_the_threshold_still_widens():
    """Row 0 sees (top_k 2) itself, 3 (0.8, too short) and one of 1 / 2 (exactly min_similarity):
    the last value known equals the threshold, so candidates there may still qualify: it widens and
    takes 2, the first long enough at exactly the threshold."""
    emb = np.array([[1.0, 0.0], [3.0, 4.0], [3.0, -4.0], [4.0, 3.0]])  # cosines with row 0: 0.6, 0.6, 0.8
    dur = np.array([5.0, 1.0, 5.0, 1.0])
    at = float(torch.tensor(0.6))  # the float32 cosine itself
    rules = SelectionRules(min_similarity=at, min_duration=3.0, top_k=2)
    sel = select_context(emb, dur, rules)
    assert sel.choice[0] == 2 and sel.similarity[0] == at and sel.widened_rows >= 1
    same(sel, select_context_exhaustive(emb, dur, rules))
