"""The nemo backend through NeMo's real restore_from path, with a small random model from config."""

import json

import numpy as np
import pytest
import torch

from sharflow.context.part import PartSettings, run_context_part
from sharflow.context.plan import plan_context
from sharflow.core.errors import SharflowError
from sharflow.core.layout import DatasetFiles
from sharflow.io.audio import load_span, resample
from sharflow.models.speaker_embedders import embedder_label, load_embedder
from sharflow.models.speaker_embedders.nemo import build_random_model
from testkit import DEMO, REPO, assert_informative_embeddings, prepare_demo


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return build_random_model(
        REPO / "config" / "models" / "tiny_speaker.yaml",
        tmp_path_factory.mktemp("nemo") / "tiny_speaker.nemo",
    )


def test_embeddings_shape_norm_and_batch_invariance(tiny_model):
    torch.set_num_threads(1)
    embedder = load_embedder("nemo", "cpu", model=str(tiny_model))
    assert (embedder.sample_rate, embedder.dim) == (16000, 64)
    records = [json.loads(x) for x in (DEMO / "manifest.json").read_text().splitlines()[:6]]
    waves = [
        resample(
            *load_span(str(DEMO / "audio" / r["audio_filepath"]), r.get("offset", 0.0), r["duration"]), 16000
        )
        for r in records
    ]
    batch = embedder.embed(waves)
    assert batch.shape == (6, 64) and batch.dtype == np.float32
    assert_informative_embeddings(batch)
    np.testing.assert_allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    alone = np.concatenate([embedder.embed([w]) for w in waves])
    np.testing.assert_allclose(alone, batch, atol=1e-4)


def test_context_part_runs_with_the_nemo_backend(tiny_model, tmp_path):
    prep = prepare_demo(tmp_path)
    plan_context(
        str(prep / "prepared.jsonl"),
        plan=str(tmp_path / "plan.json"),
        parts=1,
        grouping={"preset": "speaker"},
        cost_per_audio_second=1e6,
    )
    settings = PartSettings(
        audio_root=str(DEMO / "audio"),
        embedder="nemo",
        embedder_options={"model": str(tiny_model)},
        min_similarity=-1.0,
    )
    stats = run_context_part(
        0,
        prepared=str(prep / "prepared.jsonl"),
        plan=str(tmp_path / "plan.json"),
        out=DatasetFiles(str(tmp_path)).context_part(0),
        settings=settings,
        device="cpu",
        workers=1,
    )
    assert stats["records_in"] == 56 == stats["records_out"]
    with open(DatasetFiles(str(tmp_path)).context_part(0).records) as f:
        records = [json.loads(line)["record"] for line in f]  # keyed lines (sharflow.context.keyed_lines)
    # each similarity says its scale: the TitaNet-shaped model's, named by its file
    assert {r["context_speaker_embedder"] for r in records} == {"nemo:tiny_speaker"}
    assert len({r["context_speaker_similarity"] for r in records}) > 10


def test_a_similarity_is_labelled_by_what_measured_it():
    assert embedder_label("ge2e", {"weights": "/w/pretrained.pt"}) == "ge2e"
    assert embedder_label("nemo", {}) == "nemo:titanet_large"  # NeMo's default speaker model
    assert embedder_label("nemo", {"model": "titanet_small"}) == "nemo:titanet_small"
    assert embedder_label("nemo", {"model": "/models/ecapa_tdnn.nemo"}) == "nemo:ecapa_tdnn"


def test_unloadable_model_is_explained():
    with pytest.raises(SharflowError, match=r"local \.nemo file"):
        load_embedder("nemo", "cpu", model="/nonexistent/speaker.nemo")


def test_the_embedder_key_chooses_the_backend(tiny_model):
    """context.embedder: ge2e (256-dim GE2E) or nemo (the model in embedder_options), other embeddings."""
    wave = resample(*load_span(str(DEMO / "audio" / "slt" / "slt_000.flac"), 0.0, 2.0), 16000)
    ge2e = load_embedder("ge2e", "cpu")
    nemo = load_embedder("nemo", "cpu", model=str(tiny_model))
    assert (type(ge2e).__name__, ge2e.dim) == ("GE2EEmbedder", 256)
    assert (type(nemo).__name__, nemo.dim) == ("NemoSpeakerEmbedder", 64)
    assert ge2e.embed([wave]).shape == (1, 256) and nemo.embed([wave]).shape == (1, 64)
