"""The context stage's plan, part and merge functions on the demo corpus and on broken inputs."""

import json
import shutil

import numpy as np
import pytest

from sharflow.context.part import PartSettings, run_context_part
from sharflow.core.errors import SharflowError
from sharflow.core.layout import DatasetFiles
from testkit import DEMO, prepare_demo, read_jsonl, run_stage, write_jsonl


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ctx")
    prep = prepare_demo(tmp)
    return (
        tmp,
        prep,
        run_stage(tmp, prep, parts=1, workers=1),
        run_stage(tmp, prep, parts=3, workers=2, save_embeddings=True),
    )


def test_every_demo_record_gets_a_same_voice_context(demo_runs):
    _, _prep, (ctx, stats), _ = demo_runs
    records = read_jsonl(ctx / "with_context.jsonl")
    assert stats["records_in"] == 56 == stats["records_out"] == len(records)
    for r in records:
        assert r["context_audio_filepath"].split("/")[0] == r["audio_filepath"].split("/")[0]
        assert (r["context_audio_filepath"], r["context_audio_offset"]) != (r["audio_filepath"], r["offset"])
        assert r["context_audio_duration"] >= 3.0
        assert r["context_speaker_similarity"] >= 0.6
        assert r["context_audio_text"]
        assert "context_audio_normalized_text" not in r  # (these prepared records have none)
    # grouped by speaker, in input order inside a group
    speakers = [r["speaker"] for r in records]
    assert speakers == sorted(speakers, key=lambda s: s.split("Speaker:")[1])
    assert sum(stats["similarity_histogram"]["counts"]) == 56


def test_parts_and_ranks_do_not_change_the_bytes(demo_runs):
    _, _, (a, _), (b, stats_b) = demo_runs
    assert (a / "with_context.jsonl").read_bytes() == (b / "with_context.jsonl").read_bytes()
    assert len(stats_b["parts"]) == 3
    assert [len(p["ranks"]) for p in stats_b["parts"]] == [2, 2, 2]
    assert sum(r["records_in"] for p in stats_b["parts"] for r in p["ranks"]) == 56


def test_bad_audio_singletons_and_threshold_are_rejected_with_reasons(tmp_path):
    root = tmp_path / "audio"
    shutil.copytree(DEMO / "audio", root)
    lines = (DEMO / "manifest.json").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    # corrupt the samples of one awb file but keep its header readable: decoding fails here
    victim = root / records[0]["audio_filepath"]
    data = bytearray(victim.read_bytes())
    data[200:] = bytes(len(data) - 200)
    victim.write_bytes(bytes(data))
    kal = next(r for r in records if "offset" in r)
    lone = dict(kal, offset=kal["offset"] + 0.01, duration=kal["duration"] - 0.02, speaker="lonely")
    manifest = write_jsonl(tmp_path / "m.json", [*records, lone])
    prep = prepare_demo(tmp_path, manifest, root)
    ctx, stats = run_stage(tmp_path, prep, root, parts=2, workers=1, min_similarity=0.97)
    assert stats["records_in"] == 57 == stats["records_out"] + stats["rejected_total"]
    rejected = {r: read_jsonl(ctx / "rejected" / f"{r}.jsonl") for r in stats["rejected"]}
    assert [r["line"] for r in rejected["unreadable_audio"]] == [1]
    assert [r["line"] for r in rejected["no_context_candidate"]] == [57]
    assert rejected["no_context_above_threshold"]
    assert all("best similarity" in r["detail"] for r in rejected["no_context_above_threshold"])
    kept = read_jsonl(ctx / "with_context.jsonl")
    assert all(r["context_speaker_similarity"] >= 0.97 for r in kept)
    assert all(r["context_audio_filepath"] != records[0]["audio_filepath"] for r in kept)
    originals = {r["line"]: r["original"] for rs in rejected.values() for r in rs}
    prepared_lines = (prep / "prepared.jsonl").read_text().splitlines()
    assert all(prepared_lines[line - 1] == text for line, text in originals.items())


def test_stale_plan_is_reported(demo_runs, tmp_path):
    _, prep, (ctx, _), _ = demo_runs
    other = tmp_path / "prepared.jsonl"
    other.write_text("".join((prep / "prepared.jsonl").read_text().splitlines(keepends=True)[:10]))
    with pytest.raises(SharflowError, match="rerun the context_plan rule"):
        run_context_part(
            0,
            prepared=str(other),
            plan=str(ctx / "plan.json"),
            out=DatasetFiles(str(tmp_path)).context_part(0),
            settings=PartSettings(audio_root=str(DEMO / "audio")),
            device="cpu",
        )


def test_saved_embeddings_match_their_ids(demo_runs):
    from sharflow.io.audio import load_span, resample
    from sharflow.models.speaker_embedders import load_embedder

    _, _, (plain, _), (ctx, _) = demo_runs
    assert not list((plain / "parts").glob("*.npy"))
    total = 0
    embedder = load_embedder("ge2e", "cpu")
    for p in range(3):
        saved = DatasetFiles(str(ctx.parent)).context_embeddings(p)
        emb = np.load(saved["embeddings"])
        ids = read_jsonl(saved["embedding_ids"])
        assert emb.shape == (len(ids), 256)
        assert [(i["group"], i["line"]) for i in ids] == sorted((i["group"], i["line"]) for i in ids)
        first = ids[0]
        wave = resample(
            *load_span(str(DEMO / "audio" / first["audio_filepath"]), first["offset"], first["duration"]),
            16000,
        )
        np.testing.assert_allclose(embedder.embed([wave])[0], emb[0], atol=1e-4)
        total += len(ids)
    assert total == 56


def test_the_quality_parts_embeddings_give_the_contexts_that_decoding_again_gives(
    demo_runs, tmp_path, monkeypatch
):
    """The one pass: two quality parts embed every demo record from the decode they measure (once
    each, many records a call, counted), merged a row per line; the context stage reads those rows and
    decodes nothing (a decode fails the test), and writes byte for byte what the context stage
    that decodes and embeds again writes (demo_runs, the quality-off path)."""
    from sharflow.context.part import MeasuredEmbeddings
    from sharflow.models.speaker_embedders.ge2e import GE2EEmbedder
    from sharflow.quality.merge import merge_quality
    from sharflow.quality.part import MeasureSettings, SpeakerEmbedding, run_quality_part

    _, prep, (decoded, decoded_stats), _ = demo_runs
    forwards, real_embed = [], GE2EEmbedder.embed
    monkeypatch.setattr(GE2EEmbedder, "embed", lambda self, w: forwards.append(len(w)) or real_embed(self, w))
    out = tmp_path / "quality"
    settings = MeasureSettings(str(DEMO / "audio"), dnsmos_max_windows=1, embedder=SpeakerEmbedding("ge2e"))
    for p in range(2):
        run_quality_part(
            p,
            records=str(prep / "prepared.jsonl"),
            parts=2,
            out_metrics=str(out / f"part-{p}.jsonl"),
            out_stats=str(out / f"part-{p}.stats.json"),
            settings=settings,
            device="cpu",
            out_embeddings=str(out / f"part-{p}.embeddings.npy"),
        )
    merge_quality(
        part_metrics=[str(out / f"part-{p}.jsonl") for p in range(2)],
        part_stats=[str(out / f"part-{p}.stats.json") for p in range(2)],
        records_stats=str(prep / "stats.json"),
        metrics=str(out / "metrics.jsonl"),
        stats=str(out / "metrics_stats.json"),
        part_embeddings=[str(out / f"part-{p}.embeddings.npy") for p in range(2)],
        embeddings=str(out / "embeddings.npy"),
    )
    assert sum(forwards) == 56 and len(forwards) < 56  # each record embedded once, many a call
    rows = np.load(out / "embeddings.npy")["embedding"]
    assert rows.shape == (56, 256) and len({row.tobytes() for row in rows}) == 56  # distinct voices
    # run again: every measure and row kept from the merged files, nothing embedded, the same bytes
    forwards.clear()
    again = run_quality_part(
        1,
        records=str(prep / "prepared.jsonl"),
        parts=2,
        out_metrics=str(tmp_path / "again.jsonl"),
        out_stats=str(tmp_path / "again.stats.json"),
        settings=settings,
        device="cpu",
        out_embeddings=str(tmp_path / "again.embeddings.npy"),
        previous=str(out / "metrics.jsonl"),
        previous_embeddings=str(out / "embeddings.npy"),
    )
    assert (again["measured"], forwards) == (0, []) and again["reused"] > 0
    for name in ("jsonl", "embeddings.npy"):
        assert (tmp_path / f"again.{name}").read_bytes() == (out / f"part-1.{name}").read_bytes()
    monkeypatch.setattr(
        "sharflow.context.part.load_span", lambda *a: pytest.fail("the context stage decoded")
    )
    measured = MeasuredEmbeddings(str(prep / "prepared.jsonl"), str(out / "embeddings.npy"))
    forwards.clear()
    ctx, stats = run_stage(tmp_path, prep, parts=2, workers=1, measured=measured)
    assert forwards == [] and stats["records_out"] == decoded_stats["records_out"] == 56
    assert (ctx / "with_context.jsonl").read_bytes() == (decoded / "with_context.jsonl").read_bytes()
    similarities = [r["context_speaker_similarity"] for r in read_jsonl(ctx / "with_context.jsonl")]
    assert len(set(similarities)) > 20  # the compared values carry information

    stale = tmp_path / "stale.jsonl"
    stale.write_text("".join((prep / "prepared.jsonl").read_text().splitlines(keepends=True)[1:]))
    with pytest.raises(SharflowError, match="quality embeddings are out of date"):
        run_stage(
            tmp_path / "stale", prep, parts=1, measured=MeasuredEmbeddings(str(stale), measured.embeddings)
        )
