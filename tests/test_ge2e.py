"""The ge2e backend with the real pretrained weights from the resemblyzer package."""

import itertools
import json

import numpy as np
import pytest
import torch

from sharflow.io.audio import load_span, resample
from sharflow.models.speaker_embedders import load_embedder
from sharflow.models.speaker_embedders.ge2e import PARTIAL_FRAMES, partial_starts, pretrained_weights
from testkit import DEMO


@pytest.fixture(scope="module")
def demo_embeddings():
    torch.set_num_threads(1)
    records = [json.loads(line) for line in (DEMO / "manifest.json").read_text().splitlines()]
    embedder = load_embedder("ge2e", "cpu")
    waves = [
        resample(
            *load_span(str(DEMO / "audio" / r["audio_filepath"]), r.get("offset", 0.0), r["duration"]), 16000
        )
        for r in records
    ]
    return np.array([r["speaker"] for r in records]), embedder.embed(waves), embedder, waves


def test_weights_ship_in_the_package():
    assert pretrained_weights().is_file() and pretrained_weights().stat().st_size > 10_000_000


def test_same_voice_pairs_score_higher_than_cross_voice_pairs(demo_embeddings):
    speakers, emb, _, _ = demo_embeddings
    assert emb.shape == (56, 256)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    sims = emb @ emb.T
    same = speakers[:, None] == speakers[None, :]
    np.fill_diagonal(same, False)
    cross = speakers[:, None] != speakers[None, :]
    assert sims[same].mean() > sims[cross].mean() + 0.2
    np.fill_diagonal(sims, -np.inf)
    nearest_is_same = speakers[sims.argmax(1)] == speakers
    assert nearest_is_same.mean() >= 0.9


def test_an_embedding_is_the_same_bytes_alone_or_among_others(demo_embeddings):
    """Fixed-shape batches of partials: a record embedded alone, among all 56 demo records, or after
    others that shift its partials to other rows and batches, is the same bytes (so callers may embed
    many records a call); the embeddings differ from record to record."""
    _, emb, embedder, waves = demo_embeddings
    assert embedder.batch_invariant and embedder.batch_partials == 16
    alone = np.concatenate([embedder.embed([w]) for w in waves[:6]])
    shifted = embedder.embed([waves[9], waves[20], *waves[:6]])[2:]  # their partials first: other rows
    assert alone.tobytes() == emb[:6].tobytes() == shifted.tobytes()
    assert len({row.tobytes() for row in emb}) == 56


def test_mel_filterbank_is_librosas():
    import librosa

    from sharflow.models.speaker_embedders.ge2e import slaney_mel_filterbank

    for sr, n_fft, n_mels in [(16000, 400, 40), (22050, 1024, 80)]:
        ours = slaney_mel_filterbank(sr, n_fft, n_mels)
        np.testing.assert_allclose(
            ours, librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels), rtol=1e-5, atol=1e-7
        )


def test_partial_windows_cover_the_utterance():
    assert partial_starts(8000) == [0]  # shorter than one window: one, zero-padded
    starts = partial_starts(16000 * 5)
    assert starts[0] == 0 and all(b - a == 77 for a, b in itertools.pairwise(starts))
    last_end = (starts[-1] + PARTIAL_FRAMES) * 160
    assert last_end >= 16000 * 5 * 0.9


def test_embedder_options_choose_the_weights(demo_embeddings, tmp_path):
    """context.embedder_options reach the backend: other weights, other embeddings (batch_partials, a
    speed option, moves them by rounding only)."""
    _, emb, _, waves = demo_embeddings
    state = torch.load(pretrained_weights(), map_location="cpu", weights_only=True)
    state["model_state"] = {
        k: v * 1.5 if k.startswith("lstm") else v for k, v in state["model_state"].items()
    }
    torch.save(state, tmp_path / "other.pt")
    other = load_embedder("ge2e", "cpu", weights=str(tmp_path / "other.pt")).embed(waves[:3])
    assert not np.allclose(other, emb[:3], atol=1e-3)
    small = load_embedder("ge2e", "cpu", batch_partials=3).embed(waves[:3])
    np.testing.assert_allclose(small, emb[:3], atol=1e-5)


def test_the_normalized_level_makes_a_louder_or_quieter_copy_the_same_voice(demo_embeddings):
    """level: normalize (the identity stage's voices) scales every clip to -30 dBFS, so the voice of
    a copy at +-6 dB is the voice of the original, for each demo voice; the weights' own front end
    (raise only) moves some voice as far as another voice (the demo's closest two score 0.909)."""
    speakers, emb, raising, waves = demo_embeddings
    normalizing = load_embedder("ge2e", "cpu", level="normalize")
    loud = [np.clip(w * 2.0, -1.0, 1.0) for w in waves]

    def voices(e):
        v = np.stack([e[speakers == s].mean(0) for s in sorted(set(speakers))])
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def same(a, b):
        return float(np.min(np.sum(voices(a) * voices(b), axis=1)))  # the least alike voice

    plain = normalizing.embed(waves)
    assert (
        same(plain, normalizing.embed(loud)) > 0.99
        and same(plain, normalizing.embed([w * 0.5 for w in waves])) > 0.99
    )
    assert same(emb, raising.embed(loud)) < 0.9  # raise-only: the level moves a voice
    assert len({round(float(x), 4) for x in plain.ravel()}) > 1000  # embeddings that vary
    with pytest.raises(ValueError, match="level must be one of"):
        load_embedder("ge2e", "cpu", level="loud")
