import numpy as np
import pytest

from sharflow.selection import SelectionRules, select_context, select_context_exhaustive


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
@pytest.mark.parametrize("rules", [
    SelectionRules(min_similarity=0.6, min_duration=3.0),
    SelectionRules(min_similarity=0.3, min_duration=6.5, max_duration=7.5),  # forces widening
    SelectionRules(min_similarity=0.95, min_duration=0.0),  # mostly rejects
])
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
