"""sharflow.io.audio: paths inside the audio root, headers, and the one reading of a span that the
shard, quality and context share."""

import io
import json

import numpy as np
import pytest
import soundfile as sf

from sharflow.context.part import PartSettings, run_context_part
from sharflow.context.plan import plan_context
from sharflow.core.jsonl import numbered_lines
from sharflow.core.layout import DatasetFiles
from sharflow.io.audio import PathEscapeError, probe_audio, resolve_audio_path
from sharflow.quality.part import MeasureSettings, measure_records
from sharflow.shar.audio import EncodeSettings, encode_span
from sharflow.work.ranks import Rank
from testkit import DEMO, prepare_demo, write_jsonl, write_tone


def test_relative_and_absolute_paths_inside_the_root(tmp_path):
    root = tmp_path / "root"
    full, rel = resolve_audio_path(str(root), "a/./b/../c.wav")
    assert full == str(root / "a" / "c.wav") and rel == "a/c.wav"
    assert resolve_audio_path(str(root), str(root / "x.wav")) == (str(root / "x.wav"), "x.wav")


@pytest.mark.parametrize("path", ["../x.wav", "a/../../x.wav", "/etc/passwd", "."])
def test_paths_leaving_the_root_are_refused(tmp_path, path):
    with pytest.raises(PathEscapeError, match="outside the audio root"):
        resolve_audio_path(str(tmp_path / "root"), path)


def test_sibling_folder_with_common_prefix_is_outside(tmp_path):
    with pytest.raises(PathEscapeError):
        resolve_audio_path(str(tmp_path / "root"), str(tmp_path / "root2" / "x.wav"))


def test_probe_reads_the_header(tmp_path):
    info = probe_audio(str(write_tone(tmp_path / "a.flac", 1.5, 22050)))
    assert (info.sampling_rate, info.num_samples, info.num_channels) == (22050, 33075, 1)
    assert info.duration == pytest.approx(1.5)


def stereo_corpus(tmp_path):
    """A stereo file whose channels are two different voices, and each channel as a mono file; prepared."""
    root = tmp_path / "audio"
    root.mkdir()
    left, rate = sf.read(DEMO / "audio" / "slt" / "slt_000.flac", dtype="int16")
    right, _ = sf.read(DEMO / "audio" / "rms" / "rms_000.flac", dtype="int16")
    n = min(len(left), len(right))
    sf.write(root / "stereo.flac", np.stack([left[:n], right[:n] // 2], axis=1), rate, subtype="PCM_16")
    sf.write(root / "ch0.flac", left[:n], rate, subtype="PCM_16")
    sf.write(root / "ch1.flac", right[:n] // 2, rate, subtype="PCM_16")
    text = "The birch canoe slid on the smooth planks."
    lines = [
        {"audio_filepath": f"{f}.flac", "duration": n / rate, "text": text, "speaker": "s"}
        for f in ("stereo", "ch0", "ch1")
    ]
    prep = prepare_demo(tmp_path, write_jsonl(tmp_path / "manifest.json", lines), root)
    return root, prep / "prepared.jsonl", left[:n], rate


def test_quality_context_and_the_shard_all_read_channel_0_of_a_stereo_source(tmp_path):
    root, prepared, left, rate = stereo_corpus(tmp_path)
    # the shard stores channel 0
    stored = encode_span(str(root / "stereo.flac"), 0.0, len(left) / rate, EncodeSettings(str(root)))
    np.testing.assert_array_equal(sf.read(io.BytesIO(stored.data), dtype="int16")[0], left)

    # quality measures it: the stereo record's metrics are channel 0's, not channel 1's
    rank = Rank(0, "cpu", str(tmp_path))
    measure_records(
        rank,
        [(n, o) for n, o, _ in numbered_lines(str(prepared))],
        str(prepared),
        MeasureSettings(str(root), 1),
    )
    with open(rank.file(".jsonl"), encoding="utf-8") as f:
        stereo, ch0, ch1 = ({k: v for k, v in json.loads(x).items() if k not in ("line", "key")} for x in f)
    assert stereo == ch0 and stereo != ch1
    assert stereo["loudness_lufs"] != ch1["loudness_lufs"]  # the channels carry different signals

    # context embeds it: the stereo record's embedding is channel 0's
    plan = tmp_path / "plan.json"
    plan_context(
        str(prepared), plan=str(plan), parts=1, grouping={"preset": "speaker"}, cost_per_audio_second=1.0
    )
    files = DatasetFiles(str(tmp_path / "ctx"))
    run_context_part(
        0,
        prepared=str(prepared),
        plan=str(plan),
        out=files.context_part(0),
        settings=PartSettings(str(root), min_context_duration=0.5, save_embeddings=True),
        device="cpu",
        out_embeddings=files.context_embeddings(0)["embeddings"],
        out_embedding_ids=files.context_embeddings(0)["embedding_ids"],
    )
    embeddings = np.load(files.context_embeddings(0)["embeddings"])
    np.testing.assert_array_equal(embeddings[0], embeddings[1])
    assert float(embeddings[0] @ embeddings[2]) < 0.99  # two voices: distinct embeddings
