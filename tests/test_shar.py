"""The shar stage: plan, shard writing, the format read back by lhotse and NeMo, failure behaviour."""

import gzip
import io
import json
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from hypothesis import given, settings
from hypothesis import strategies as st
from lhotse import CutSet

from sharflow.core.errors import SharflowError
from sharflow.core.layout import DatasetFiles
from sharflow.core.shar_index import index_problem
from sharflow.io.audio import compute_num_samples, read_span
from sharflow.shar.audio import EncodeSettings, copy_through, encode, encode_record, encode_span
from sharflow.shar.headers import flac_without_metadata
from sharflow.shar.merge import merge_shar_stats
from sharflow.shar.plan import plan_shards, recording_id, segment_id
from sharflow.verify.shard import AUDIO_LABELS, ShardCheck, verify_shard
from testkit import (
    DEMO,
    data_files,
    magpie_dataset,
    planned_lines,
    read_back,
    read_jsonl,
    write_all,
    write_jsonl,
    write_tone,
)


def test_ids():
    assert recording_id("spk/book/u_01.flac") == "spk-book-u_01"
    assert segment_id("a/b.wav", 1.5, 2.25) == "a-b-150000-225000"
    assert segment_id("a/b.wav", 1.50001, 2.25) != segment_id("a/b.wav", 1.5, 2.25)
    assert recording_id("dir.v2/noext") == "dir.v2-noext"  # a dot in a folder is not an extension
    assert recording_id("a/x.tar.gz") == "a-x.tar" and recording_id("plain") == "plain"
    assert segment_id("b.wav", 0.000014, 0.000016) == "b-1-2"  # 10 µs steps, rounded to nearest
    assert segment_id("b.wav", 12.345675, 1) == "b-1234568-100000"


def demo_spans(tmp_path) -> Path:
    """The demo manifest's spans (all plan_shards reads of with_context.jsonl), 56 lines."""
    records = read_jsonl(DEMO / "manifest.json")
    spans = [
        {"audio_filepath": r["audio_filepath"], "offset": r.get("offset", 0.0), "duration": r["duration"]}
        for r in records
    ]
    return write_jsonl(tmp_path / "with_context.jsonl", spans)


def test_plan_is_a_seeded_shuffle_with_contiguous_shards(tmp_path):
    spans = demo_spans(tmp_path)
    plan = plan_shards(
        str(spans),
        plan=str(tmp_path / "p.json"),
        inputs_dir=str(tmp_path / "i"),
        shard_size=16,
        seed=7,
    )
    assert plan["num_shards"] == 4 and [s["records"] for s in plan["shards"]] == [16, 16, 16, 8]
    lines = spans.read_bytes().splitlines(keepends=True)
    planned = [line for _, line in planned_lines(tmp_path / "i")]
    assert sorted(planned) == sorted(lines) and planned != lines  # shuffled
    again = plan_shards(
        str(spans),
        plan=str(tmp_path / "q.json"),
        inputs_dir=str(tmp_path / "j"),
        shard_size=16,
        seed=7,
    )
    assert again == plan and [line for _, line in planned_lines(tmp_path / "j")] == planned


def test_clashing_cut_ids_are_refused(tmp_path):
    records = read_jsonl(demo_spans(tmp_path))[:3]
    twin = dict(records[1], audio_filepath=records[1]["audio_filepath"].replace("/", "-"))
    path = write_jsonl(tmp_path / "w.jsonl", [*records, twin])
    with pytest.raises(SharflowError, match=r"line 2 .* and line 4"):
        plan_shards(
            str(path), plan=str(tmp_path / "p.json"), inputs_dir=str(tmp_path / "i"), shard_size=4, seed=0
        )


def test_sample_counts_match_lhotse():
    from lhotse.utils import compute_num_samples as lhotse_count

    rng = np.random.default_rng(0)
    for duration in [0.0, 1.0, 2.635, 1 / 3, 4.999999999, *rng.uniform(0, 30, 200)]:
        for rate in (8000, 16000, 22050, 44100):
            assert compute_num_samples(duration, rate) == lhotse_count(duration, rate)


def test_read_span_is_exact_for_16_bit_and_resamples_float(tmp_path):
    pcm = (np.sin(np.arange(22050) / 7) * 30000).astype(np.int16)
    sf.write(tmp_path / "a.flac", pcm, 22050, subtype="PCM_16")
    samples, rate, padded = read_span(str(tmp_path / "a.flac"), 0.5, 0.25)
    assert samples.dtype == np.int16 and rate == 22050 and padded == 0
    np.testing.assert_array_equal(samples, pcm[11025 : 11025 + 5513])
    resampled, rate, _ = read_span(str(tmp_path / "a.flac"), 0.5, 0.25, sample_rate=16000)
    assert resampled.dtype == np.float32 and rate == 16000 and len(resampled) == 4000
    tail, _, padded = read_span(str(tmp_path / "a.flac"), 0.9, 0.2)
    assert len(tail) == 4410 and padded == 2205 and not tail[-2205:].any()


def test_16_bit_audio_is_copied_exactly_and_clipping_is_counted():
    pcm = np.array([-32768, -1, 0, 1, 32767], dtype=np.int16)
    for samples in (pcm, pcm.astype(np.float32) / 32768):
        data, clipped = encode(samples, 16000, "flac")
        assert clipped == 0 and (sf.read(io.BytesIO(data), dtype="int16")[0] == pcm).all()
    _, clipped = encode(np.array([1.5, -2.0, 0.5], dtype=np.float32), 16000, "wav")
    assert clipped == 2


@pytest.mark.parametrize("audio_format", ["flac", "wav", "opus"])
def test_encode_writes_the_format_rounds_and_clips(audio_format):
    """Float samples to 16-bit PCM: rounded to the nearest 1/32768, clipped beyond [-1, 1] and counted
    (exactly 1.0 is not clipped); int16 samples written as they are; opus gets floats."""
    steps = np.array([-1.0, -0.5, -1 / 32768, 0.0, 0.4 / 32768, 0.6 / 32768, 0.75, 1.0 - 1 / 32768, 1.0])
    rate = 48000 if audio_format == "opus" else 16000
    data, clipped = encode(np.concatenate([steps, [1.25, -2.5]]).astype(np.float32), rate, audio_format)
    info = sf.info(io.BytesIO(data))
    expected_format = {"flac": "FLAC", "wav": "WAV", "opus": "OGG"}[audio_format]
    assert (info.format, info.samplerate, info.channels, clipped) == (expected_format, rate, 1, 2)
    decoded, _ = sf.read(io.BytesIO(data), dtype="int16")
    if audio_format == "opus":  # lossy: compare levels, not samples
        assert info.subtype == "OPUS" and len(decoded) == 11
        t = np.arange(rate // 2) / rate
        tone = 0.3 * np.sin(2 * np.pi * 440 * t)
        for samples in (np.round(tone * 32768).astype(np.int16), (tone * 4).astype(np.float32)):
            data, clipped = encode(samples, rate, audio_format)
            assert sf.info(io.BytesIO(data)).subtype == "OPUS"
            back = sf.read(io.BytesIO(data), dtype="float32")[0][rate // 10 : -rate // 10]
            level = 0.3 if samples.dtype == np.int16 else 1.0  # the float tone (1.2) was clipped to 1
            assert abs(np.sqrt(np.mean(back**2)) * np.sqrt(2) - level) < 0.15 * level, samples.dtype
            assert clipped == (
                0 if samples.dtype == np.int16 else int(np.count_nonzero(np.abs(tone * 4) > 1))
            )
        return
    assert info.subtype == "PCM_16"
    assert decoded.tolist() == [-32768, -16384, -1, 0, 0, 1, 24576, 32767, 32767, 32767, -32768]
    pcm = np.array([5, -7, 32767], dtype=np.int16)
    written, none_clipped = encode(pcm, rate, audio_format)
    assert none_clipped == 0 and sf.read(io.BytesIO(written), dtype="int16")[0].tolist() == [5, -7, 32767]


def test_encode_record_gives_both_audios_or_the_reason_of_the_span_that_failed(tmp_path):
    write_tone(tmp_path / "t.flac", 1.0, 16000)
    write_tone(tmp_path / "c.wav", 2.0, 22050)
    record = {
        "audio_filepath": "t.flac",
        "offset": 0.25,
        "duration": 0.5,
        "context_audio_filepath": "c.wav",
        "context_audio_offset": 0.0,
        "context_audio_duration": 2.0,
    }
    settings = EncodeSettings(str(tmp_path))
    whole = encode_record(settings, {**record, "offset": 0.0, "duration": 1.0})[0]
    assert (whole.copied, whole.num_samples) == (True, 16000)  # a whole flac file is copied through
    target, context = encode_record(settings, record)
    assert (target.sampling_rate, target.num_samples, target.copied) == (16000, 8000, False)
    assert (context.sampling_rate, context.num_samples) == (22050, 44100)
    assert sf.info(io.BytesIO(context.data)).format == "FLAC"  # the output's format, not the source's
    missing = encode_record(settings, {**record, "audio_filepath": "nope.flac"})
    assert missing[0] == "unreadable_audio" and missing[1].startswith("nope.flac: ")
    outside = encode_record(settings, {**record, "context_audio_filepath": "../c.wav"})
    assert outside[0] == "unreadable_context_audio" and "outside the audio root" in outside[1]


def test_copy_through_takes_files_of_any_length_its_form_allows(tmp_path):
    """A file over a megabyte (the metadata allowance alone) and a file of one sample are copied too."""
    rate = 48000
    long = tmp_path / "long.wav"
    sf.write(long, np.zeros(rate * 12, dtype=np.int16) + 7, rate, subtype="PCM_16")
    assert long.stat().st_size > 1 << 20
    settings = EncodeSettings(str(tmp_path), audio_format="wav")
    assert copy_through(str(long), 0.0, 12.0, settings).num_samples == rate * 12
    one = tmp_path / "one.wav"
    sf.write(one, np.array([5], dtype=np.int16), rate, subtype="PCM_16")
    copied = copy_through(str(one), 0.0, 1 / rate, settings)
    assert (copied.num_samples, copied.copied) == (1, True)


def test_rounded_manifest_durations_copy_through_with_duration_from_file(tmp_path):
    """A whole-file corpus whose manifest rounds durations to the millisecond, as most do: with
    prepare.duration_from_file every span is the file and is copied; without it most are encoded again."""
    from sharflow.prepare.job import prepare_dataset

    rng = np.random.default_rng(5)
    records = []
    for i in range(40):
        frames = int(rng.integers(22050, 22050 * 4))
        sf.write(tmp_path / f"u{i}.flac", rng.integers(-3000, 3000, frames, dtype=np.int16), 22050)
        records.append(
            {
                "audio_filepath": f"u{i}.flac",
                "duration": round(frames / 22050, 3),
                "text": "t",
                "speaker": "s",
            }
        )
    write_jsonl(tmp_path / "manifest.json", records)
    settings = EncodeSettings(str(tmp_path), audio_format="flac")

    def copied(from_file: bool) -> int:
        out = tmp_path / f"from_file_{from_file}"
        kw = {
            "prepared": str(out / "prepared.jsonl"),
            "rejected_dir": str(out / "rejected"),
            "stats": str(out / "s.json"),
        }
        stats = prepare_dataset(
            str(tmp_path / "manifest.json"),
            dataset="d",
            audio_root=str(tmp_path),
            duration_from_file=from_file,
            **kw,
        )
        assert stats["records_out"] == 40
        prepared = read_jsonl(out / "prepared.jsonl")
        assert stats["durations_from_file"] == sum(
            r["duration"] != m["duration"] for r, m in zip(prepared, records, strict=True)
        )
        return sum(
            copy_through(str(tmp_path / r["audio_filepath"]), 0.0, r["duration"], settings) is not None
            for r in prepared
        )

    without = copied(False)
    print(f"copied without duration_from_file: {without} of 40")
    assert without < 40 * 0.5  # rounded to 1 ms, most spans are a sample or more off the file's length
    assert copied(True) == 40


def test_encode_span_counts_padding_past_the_end_and_resamples(tmp_path):
    path = str(write_tone(tmp_path / "a.wav", 1.0, 16000))
    tail = encode_span(path, 0.9, 0.2, EncodeSettings(str(tmp_path), audio_format="wav"))
    assert (tail.num_samples, tail.padded, tail.clipped, tail.copied) == (3200, 1600, 0, False)
    assert sf.read(io.BytesIO(tail.data), dtype="int16")[0][1600:].tolist() == [0] * 1600
    resampled = encode_span(path, 0.0, 0.5, EncodeSettings(str(tmp_path), sample_rate=8000))
    assert (resampled.sampling_rate, resampled.num_samples) == (8000, 4000)


def test_round_trip_through_from_shar(demo_shards, with_context):
    out, _plan, stats, _ = demo_shards
    records = {(r["audio_filepath"], r["offset"]): r for r in read_jsonl(with_context[0])}
    cuts = list(read_back(out))
    assert len(cuts) == 56 == len({c.id for c in cuts})
    for c in cuts:
        rel = c.recording.sources[0].source  # relative to the audio root: the same wherever it is
        r = records[(rel, c.start)]
        target = c.target_audio.load_audio()[0]
        src, sr = sf.read(DEMO / "audio" / rel, dtype="float32")
        start = round(r["offset"] * sr)
        np.testing.assert_array_equal(target, src[start : start + len(target)])
        assert abs(len(target) / sr - r["duration"]) < 1 / sr
        ctx = c.context_audio.load_audio()[0]
        csrc, csr = sf.read(DEMO / "audio" / r["context_audio_filepath"], dtype="float32")
        cstart = round(r["context_audio_offset"] * csr)
        np.testing.assert_array_equal(ctx, csrc[cstart : cstart + len(ctx)])
        assert c.context_audio.duration == r["context_audio_duration"] != c.duration
        sup = c.supervisions[0]
        assert sup.speaker == r["speaker"] and sup.language == "en" and sup.text == r["text"]
        assert sup.custom["context_speaker_similarity"] == r["context_speaker_similarity"]
        assert sup.custom["context_recording_id"] == recording_id(r["context_audio_filepath"])
    merged = merge_shar_stats(
        stats,
        context_stats=str(with_context[1]),
        plan=DatasetFiles(str(out)).shard_plan,
        stats=str(out / "s.json"),
        rejected_dir=str(out / "rej"),
        dataset="demo",
    )
    assert merged["cuts"] == 56 and merged["rejected_total"] == 0 and merged["shards"] == 4
    # the sample checks above covered both kinds of member: whole demo files copied through, and
    # the segments of the one long file (and their contexts) decoded and encoded
    assert merged["copied_spans"] > 0 and merged["encoded_spans"] > 0
    assert merged["copied_spans"] + merged["encoded_spans"] == 2 * 56


def test_each_field_holds_the_same_ids_in_the_same_order(demo_shards):
    import tarfile

    files = DatasetFiles(str(demo_shards[0]))
    for s in range(4):
        ids = [json.loads(line)["id"] for line in Path(files.shard(s).cuts).read_bytes().splitlines()]
        for tar_path in (files.shard(s).target, files.shard(s).context):
            with tarfile.open(tar_path) as t:
                names = t.getnames()
            assert names[0::2] == [f"{i}.flac" for i in ids] and names[1::2] == [f"{i}.json" for i in ids]


def test_shar_index_false_writes_the_set_as_before_indexes(demo_shards, with_context, tmp_path):
    """shar.index: false: gzipped cuts files and no index; the same cuts and audio bytes as the
    indexed set (the default), whose every file's index is the file's own."""
    write_all(tmp_path, with_context[0], indexed=False)
    indexed, plain = DatasetFiles(str(demo_shards[0])), DatasetFiles(str(tmp_path), indexed=False)
    assert not json.loads(Path(plain.shard_plan).read_text())["indexed"]
    assert json.loads(Path(indexed.shard_plan).read_text())["indexed"]
    for s in range(4):
        a, b = indexed.shard(s), plain.shard(s)
        assert b.cuts.endswith(".jsonl.gz") and a.cuts.endswith(".jsonl")
        assert gzip.decompress(Path(b.cuts).read_bytes()) == Path(a.cuts).read_bytes()
        assert Path(a.target).read_bytes() == Path(b.target).read_bytes()
        lines = Path(a.cuts).read_bytes().splitlines(keepends=True)
        offsets = np.fromfile(a.cuts_index, "<u8")
        assert offsets.tolist() == [sum(map(len, lines[:i])) for i in range(len(lines) + 1)]
        for path in (a.cuts, a.target, a.context):
            assert index_problem(path) is None
    assert not list(tmp_path.rglob("*.idx")) and len(list(demo_shards[0].rglob("*.idx"))) == 4 * 3


def test_same_bytes_for_any_worker_count(demo_shards, with_context, tmp_path):
    write_all(tmp_path, with_context[0], workers=2)
    for path in sorted((demo_shards[0] / "shar").rglob("*.*")):
        twin = tmp_path / "shar" / path.relative_to(demo_shards[0] / "shar")
        assert twin.read_bytes() == path.read_bytes(), path.name


@pytest.mark.parametrize("workers", [1, 2])  # members written straight to the fields / via segments
def test_failing_cut_goes_to_rejects_and_fields_stay_aligned(with_context, tmp_path, workers):
    root = tmp_path / "audio"
    shutil.copytree(DEMO / "audio", root)
    records = read_jsonl(with_context[0])
    victim = records[5]["context_audio_filepath"]
    data = bytearray((root / victim).read_bytes())
    data[200:] = bytes(len(data) - 200)  # header still readable, samples not
    (root / victim).write_bytes(bytes(data))
    users = {i for i, r in enumerate(records) if victim in (r["audio_filepath"], r["context_audio_filepath"])}
    _plan, stats, _rejected = write_all(tmp_path, with_context[0], root=root, workers=workers)
    merged = merge_shar_stats(
        stats,
        context_stats=str(with_context[1]),
        plan=DatasetFiles(str(tmp_path)).shard_plan,
        stats=str(tmp_path / "s.json"),
        rejected_dir=str(tmp_path / "r"),
        dataset="demo",
    )
    assert merged["rejected_total"] == len(users) and merged["cuts"] == 56 - len(users)
    assert set(merged["rejected"]) <= {"unreadable_audio", "unreadable_context_audio"}
    cuts = list(read_back(tmp_path))  # lhotse asserts equal ids across fields while reading
    assert len(cuts) == 56 - len(users)
    for c in cuts:
        assert c.target_audio.load_audio().shape[1] == c.target_audio.num_samples


def test_empty_dataset_gives_one_valid_empty_shard(tmp_path):
    empty = tmp_path / "w.jsonl"
    empty.write_text("")
    plan, _, _ = write_all(tmp_path, empty)
    assert plan["num_shards"] == 1
    assert len(list(read_back(tmp_path))) == 0


def test_a_killed_shard_job_leaves_no_file_under_a_final_name(with_context, tmp_path):
    files = DatasetFiles(str(tmp_path))
    plan_shards(
        str(with_context[0]), plan=files.shard_plan, inputs_dir=files.shar_inputs, shard_size=64, seed=0
    )
    job = files.shard(0)
    finals = [Path(p) for p in job.named().values()]
    code = (
        "from sharflow.core.layout import ShardFiles\nfrom sharflow.shar.shard import write_shards\n"
        "from sharflow.shar.audio import EncodeSettings\n"
        f"outputs = {{f'{{k}}_0': v for k, v in {job.named()!r}.items()}}\n"
        f"write_shards(['000000'], outputs, inputs={files.shar_input('000000', 1)!r}, "
        f"settings=EncodeSettings(audio_root={str(DEMO / 'audio')!r}, audio_format='wav'))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.time() + 60
    partial = None
    while time.time() < deadline and partial is None:
        for tmp in (tmp_path / "shar_jobs").glob(".shard-000000.*"):
            tar = tmp / "target.tar"
            if tar.exists() and tar.stat().st_size > 0:
                partial = tar
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert partial is not None, "the shard finished before it could be killed"
    assert not any(p.exists() for p in finals)


def test_a_shard_written_again_first_removes_what_a_killed_run_of_it_left(tmp_path):
    """A run killed while writing shard 1 leaves its temp folder, or the temp file of an output it
    was renaming into place (its stats); writing the shard again removes both, and nothing of another
    shard's."""
    from sharflow.shar.shard import _fresh_work_dir

    jobs = tmp_path / "shar_jobs"
    (jobs / ".shard-000001.k1ll3d").mkdir(parents=True)
    (jobs / ".shard-000001.k1ll3d" / "target.tar").write_bytes(b"partial")
    (jobs / ".shard-000001.stats.json.abcd.tmp").write_text("{")
    (jobs / ".shard-000002.stats.json.efgh.tmp").write_text("{")
    work = _fresh_work_dir(jobs, 1)
    assert work.is_dir() and work.name.startswith(".shard-000001.")
    assert sorted(p.name for p in jobs.iterdir()) == sorted([work.name, ".shard-000002.stats.json.efgh.tmp"])


def test_nemo_magpietts_dataset_reads_a_batch(demo_shards):

    dataset = magpie_dataset(load_16khz_audio=True)
    cuts = CutSet(list(read_back(demo_shards[0]))[:4])
    batch = dataset[cuts]
    assert batch["audio"].shape[0] == 4 and batch["context_audio"].shape[0] == 4
    assert batch["text"].shape[0] == 4 and (batch["text_lens"] > 5).all()
    assert batch["dataset_names"] == ["demo"] * 4


def _as_mp3_tar(records: list[dict], tar_path: Path) -> list[dict]:
    """The records whose target and context are whole files, their files as Emilia ships audio: MP3
    (with an ID3 tag holding a 64 KiB picture) inside a tar; the records pointing there."""
    whole = [
        r
        for r in records
        if r.get("offset", 0) == 0 == r["context_audio_offset"]
        and all(
            sf.info(str(DEMO / "audio" / r[k])).duration <= d + 1e-3
            for k, d in (
                ("audio_filepath", r["duration"]),
                ("context_audio_filepath", r["context_audio_duration"]),
            )
        )
    ]
    files = sorted({r[k] for r in whole for k in ("audio_filepath", "context_audio_filepath")})
    tag = b"ID3\x04\x00\x00" + bytes([0, 4, 0, 0]) + bytes(1 << 16)  # syncsafe 65,536
    with tarfile.open(tar_path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for f in files:
            samples, rate = sf.read(str(DEMO / "audio" / f), dtype="int16")
            data = tag + encode(samples, rate, "mp3")[0]
            info = tarfile.TarInfo(f.rsplit(".", 1)[0] + ".mp3")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    inside = {f: f"{tar_path.name}#{f.rsplit('.', 1)[0]}.mp3" for f in files}
    return [
        {
            **r,
            "audio_filepath": inside[r["audio_filepath"]],
            "context_audio_filepath": inside[r["context_audio_filepath"]],
        }
        for r in whole
    ]


def test_mp3_sources_are_copied_through_into_mp3_shar_and_nemo_reads_them(with_context, tmp_path):
    """Emilia's MP3 in a tar: with audio_format mp3 at its rate the member's bytes go into the Shar as
    they are (its ID3 tag dropped), the cut counts the samples they decode to, and NeMo's dataloader
    reads them; with the default flac they are decoded and encoded losslessly from that decoding."""
    records = _as_mp3_tar(read_jsonl(with_context[0]), tmp_path / "EN.tar")
    assert len(records) >= 6
    small = write_jsonl(tmp_path / "w.jsonl", records[:8])
    root = tmp_path
    _, stats, _ = write_all(
        tmp_path / "mp3", small, shard_size=8, root=root, audio_format="mp3", sample_rate=16000
    )
    summary = json.loads(Path(stats[0]).read_text())
    assert summary["copied_spans"] == 2 * summary["cuts"] and summary["encoded_spans"] == 0
    cuts = list(read_back(tmp_path / "mp3"))
    assert len(cuts) == len(records[:8])
    tag = 10 + (1 << 16)
    with tarfile.open(tmp_path / "EN.tar") as source_tar:
        streams = {source_tar.extractfile(m).read()[tag:]: m.name for m in source_tar.getmembers()}
    (shar_tar,) = (tmp_path / "mp3" / "shar" / "target_audio").glob("*.tar")
    record_of = {}  # cut id -> its record
    with tarfile.open(shar_tar) as shar:
        for c in cuts:
            stored = shar.extractfile(f"{c.id}.mp3").read()
            assert stored in streams and stored[0] == 0xFF  # a source's MP3 stream as it was, its tag gone
            (record_of[c.id],) = [r for r in records[:8] if r["audio_filepath"].endswith(streams[stored])]
            audio = c.target_audio.load_audio()
            decoded, rate = sf.read(io.BytesIO(stored), dtype="float32")
            assert audio.shape[1] == c.target_audio.num_samples == len(decoded)
            assert len(decoded) == compute_num_samples(record_of[c.id]["duration"], rate)
            assert np.abs(decoded).max() > 0.01
    assert len(set(streams)) == len(streams)  # distinct sources: the match above can fail
    paths = {f: data_files(tmp_path / "mp3" / "shar" / f)[0] for f in ("cuts", *AUDIO_LABELS)}
    checked = verify_shard(ShardCheck("demo", 0, paths, (), indexed=True))  # decodes every MP3 member
    assert checked["problems"] == [] and checked["cuts"] == len(cuts) and checked["indexes"] == 3
    dataset = magpie_dataset(load_16khz_audio=True)
    batch = dataset[CutSet(cuts[:4])]
    assert batch["audio"].shape[0] == 4 and batch["context_audio"].shape[0] == 4
    assert (batch["audio_lens"] > 16000).all()

    # flac (the default): the MP3 decoded and written losslessly, as the encode path writes any span
    write_all(tmp_path / "flac", small, shard_size=8, root=root)
    for c in read_back(tmp_path / "flac"):
        r = record_of[c.id]
        decoded = read_span(str(root / r["audio_filepath"]), 0.0, r["duration"])[0]
        stored = c.target_audio.load_audio()[0]
        assert len(stored) == len(decoded) and np.abs(stored - decoded).max() <= 0.5 / 32768 + 1e-7


@pytest.mark.parametrize(
    "audio_format, sample_rate", [("wav", None), ("opus", 24000), ("flac", 16000), ("mp3", 22050)]
)
def test_other_formats_and_rates_read_back(with_context, tmp_path, audio_format, sample_rate):
    records = read_jsonl(with_context[0])[:6]
    small = write_jsonl(tmp_path / "w.jsonl", records)
    write_all(tmp_path, small, shard_size=8, audio_format=audio_format, sample_rate=sample_rate)
    cuts = list(read_back(tmp_path))
    assert len(cuts) == 6
    for c in cuts:
        audio = c.target_audio.load_audio()
        assert audio.shape[1] == c.target_audio.num_samples
        if sample_rate:
            assert c.target_audio.sampling_rate == c.context_audio.sampling_rate == sample_rate
        assert abs(audio.shape[1] / c.target_audio.sampling_rate - c.duration) < 0.01


def flac_with_picture_and_tags(path: Path, samples: np.ndarray, rate: int, picture_bytes: int) -> Path:
    """A FLAC file with tags and a PICTURE metadata block of `picture_bytes` inserted after STREAMINFO."""
    with sf.SoundFile(path, "w", rate, 1, subtype="PCM_16", format="FLAC") as f:
        f.title, f.comment = "a title", "x" * 2000
        f.write(samples)
    data = path.read_bytes()
    streaminfo_end = 4 + 4 + 34
    mime = b"image/png"
    fields = [
        (3).to_bytes(4, "big"),
        len(mime).to_bytes(4, "big"),
        mime,
        bytes(4),
        bytes(16),
    ]  # type..colours
    body = b"".join([*fields, picture_bytes.to_bytes(4, "big"), bytes(picture_bytes)])
    picture = bytes([6]) + len(body).to_bytes(3, "big") + body
    path.write_bytes(
        data[:4] + bytes([data[4] & 0x7F]) + data[5:streaminfo_end] + picture + data[streaminfo_end:]
    )
    return path


def wav_with_junk_chunk(path: Path, samples: np.ndarray, rate: int, junk_bytes: int) -> Path:
    """A PCM16 WAV with a LIST chunk of tags and a `junk_bytes` chunk before its data chunk."""
    with sf.SoundFile(path, "w", rate, 1, subtype="PCM_16", format="WAV") as f:
        f.title = "a title"
        f.write(samples)
    data = path.read_bytes()
    at = data.index(b"data")
    junk = b"junk" + junk_bytes.to_bytes(4, "little") + bytes(junk_bytes)
    body = data[12:at] + junk + data[at:]
    path.write_bytes(b"RIFF" + (4 + len(body)).to_bytes(4, "little") + b"WAVE" + body)
    return path


@pytest.mark.parametrize("audio_format", ["flac", "wav"])
def test_whole_files_are_copied_through_with_the_samples_of_the_encode_path(tmp_path, audio_format):
    rate = 22050
    samples = (np.random.default_rng(0).normal(0, 0.2, rate * 2) * 32767).clip(-32768, 32767).astype(np.int16)
    assert len(np.unique(samples)) > 1000  # the comparison below is over varied samples
    make = flac_with_picture_and_tags if audio_format == "flac" else wav_with_junk_chunk
    src = make(tmp_path / f"a.{audio_format}", samples, rate, 100_000)
    assert np.array_equal(sf.read(src, dtype="int16")[0], samples)  # the crafted file is valid
    settings = EncodeSettings(audio_root=str(tmp_path), audio_format=audio_format)
    duration = len(samples) / rate

    copied = copy_through(str(src), 0.0, duration, settings)
    encoded = encode_span(str(src), 0.0, duration, settings)
    assert copied.copied and not encoded.copied
    assert (copied.sampling_rate, copied.num_samples, copied.clipped, copied.padded) == (
        rate,
        len(samples),
        0,
        0,
    )
    decoded = sf.read(io.BytesIO(copied.data), dtype="int16")[0]
    assert np.array_equal(decoded, sf.read(io.BytesIO(encoded.data), dtype="int16")[0])
    assert np.array_equal(decoded, samples)
    assert len(copied.data) < src.stat().st_size - 100_000  # picture / junk and tags stripped
    assert b"a title" not in copied.data

    # anything but the whole file in the output's form takes the encode path
    stereo = tmp_path / f"stereo.{audio_format}"
    sf.write(stereo, np.stack([samples, samples], axis=1), rate, subtype="PCM_16")
    pcm24 = tmp_path / f"pcm24.{audio_format}"
    sf.write(pcm24, samples, rate, subtype="PCM_24")
    other = tmp_path / ("b.wav" if audio_format == "flac" else "b.flac")
    sf.write(other, samples, rate, subtype="PCM_16")
    for path, offset, span, custom in [
        (src, 0.5, duration - 0.5, {}),  # a segment
        (src, 0.0, duration - 0.5, {}),
        (src, 0.0, duration, {"sample_rate": 16000}),  # resampled
        (stereo, 0.0, duration, {}),
        (pcm24, 0.0, duration, {}),
        (other, 0.0, duration, {}),  # another container
    ]:
        assert (
            copy_through(str(path), offset, span, EncodeSettings(str(tmp_path), audio_format, **custom))
            is None
        )
    assert copy_through(str(src), 0.0, duration, EncodeSettings(str(tmp_path), "opus", 24000)) is None
    assert (
        copy_through(str(src), 0.0, duration, EncodeSettings(str(tmp_path), audio_format, copy_through=False))
        is None
    )
    if audio_format == "flac":  # a truncated or zero-filled file is not copied (the encode path rejects it)
        whole = src.read_bytes()
        for name, damaged in (("cut.flac", whole[:-300]), ("zeros.flac", whole[:-4000] + bytes(4000))):
            (tmp_path / name).write_bytes(damaged)
            assert copy_through(str(tmp_path / name), 0.0, duration, settings) is None, name


@pytest.mark.parametrize("frames", [1, 100, 1152, 4096, 4097, 50_000])
@pytest.mark.parametrize("rate", [8000, 16000, 44100])
def test_flac_frame_headers_are_read_for_any_length_and_rate(tmp_path, frames, rate):
    samples = (np.random.default_rng(frames).normal(0, 0.1, frames) * 32767).astype(np.int16)
    path = tmp_path / "x.flac"
    sf.write(path, samples, rate, subtype="PCM_16")
    stripped = flac_without_metadata(path.read_bytes())
    assert (stripped.rate, stripped.channels, stripped.bits, stripped.frames) == (rate, 1, 16, frames)
    assert np.array_equal(sf.read(io.BytesIO(stripped.data), dtype="int16")[0], samples)
    damaged = bytearray(path.read_bytes())
    damaged[-1] ^= 0x01  # one bit of the last frame's CRC-16
    assert flac_without_metadata(bytes(damaged)) is None


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 60), st.integers(1, 70), st.integers(0, 3))
def test_shard_plans_cover_every_record_once_for_any_size(tmp_path_factory, n, shard_size, seed):
    """Shard sizes at, below and above the record count (and 0 records): contiguous shards of
    shard_size, the last holding the rest, every record exactly once, the same plan for a seed."""
    tmp = tmp_path_factory.mktemp("plan")
    records = [{"audio_filepath": f"a{i}.wav", "offset": 0.0, "duration": 1.0 + i / 8} for i in range(n)]
    write_jsonl(tmp / "w.jsonl", records)

    def plan_as(name: str) -> dict:
        return plan_shards(
            str(tmp / "w.jsonl"),
            plan=str(tmp / f"{name}.json"),
            inputs_dir=str(tmp / name),
            shard_size=shard_size,
            seed=seed,
        )

    plan = plan_as("p")
    expected_shards = max(1, -(-n // shard_size))
    assert plan["num_shards"] == expected_shards and plan["records"] == n
    sizes = [s["records"] for s in plan["shards"]]
    assert sizes == ([shard_size] * (n // shard_size) + ([n % shard_size] if n % shard_size else [])) or (
        n == 0 and sizes == [0]
    )
    lines = (tmp / "w.jsonl").read_bytes().splitlines(keepends=True)
    planned = planned_lines(tmp / "p")
    assert sorted(line for _, line in planned) == sorted(lines)  # every record exactly once
    assert [shard for shard, _ in planned] == sorted(shard for shard, _ in planned)
    for s, shard in enumerate(plan["shards"]):
        mine = [json.loads(line)["duration"] for k, line in planned if k == s]
        assert len(mine) == shard["records"] and shard["seconds"] == round(sum(mine), 3)
    assert plan_as("q") == plan and planned_lines(tmp / "q") == planned


def test_plan_file_holds_the_plan_with_exact_seconds_and_byte_offsets(tmp_path, caplog):
    """Non-ASCII fields (offsets are bytes, not characters) and durations with many decimals
    (seconds are rounded to the millisecond once per shard)."""
    import logging

    records = [
        {"audio_filepath": f"sp/ü{i}.wav", "offset": 0.0, "duration": 1 + i / 7, "speaker": "Zoë"}
        for i in range(10)
    ]
    spans = write_jsonl(tmp_path / "w.jsonl", [json.dumps(r, ensure_ascii=False) for r in records])
    with caplog.at_level(logging.INFO, logger="sharflow.shar.plan"):
        plan = plan_shards(
            str(spans), plan=str(tmp_path / "p.json"), inputs_dir=str(tmp_path / "i"), shard_size=4, seed=3
        )
    assert json.loads((tmp_path / "p.json").read_text()) == plan
    assert (plan["records"], plan["shard_size"], plan["seed"], plan["num_shards"]) == (10, 4, 3, 3)
    assert [s["index"] for s in plan["shards"]] == [0, 1, 2] and [s["records"] for s in plan["shards"]] == [
        4,
        4,
        2,
    ]
    lines = spans.read_bytes().splitlines(keepends=True)
    planned = planned_lines(tmp_path / "i")
    assert sorted(line for _, line in planned) == sorted(lines)  # the lines' bytes, non-ASCII as they were
    order = [lines.index(line) for _, line in planned]
    for s, shard in enumerate(plan["shards"]):
        assert shard["seconds"] == round(sum(records[i]["duration"] for i in order[4 * s : 4 * s + 4]), 3)
    assert "shar plan: 10 records into 3 shards of 4 (seed 3)" in caplog.text


def test_a_clash_anywhere_among_many_records_is_named(tmp_path):
    records = [{"audio_filepath": f"d/u{i}.wav", "offset": 0.0, "duration": 1.0} for i in range(20)]
    for line in (3, 11, 19):
        twin = dict(records[line - 1], audio_filepath=records[line - 1]["audio_filepath"].replace("/", "-"))
        path = write_jsonl(tmp_path / f"w{line}.jsonl", [*records, twin])
        with pytest.raises(SharflowError) as error:
            plan_shards(
                str(path), plan=str(tmp_path / "p.json"), inputs_dir=str(tmp_path / "i"), shard_size=8, seed=0
            )
        cid = f"d-u{line - 1}-0-100000"
        assert str(error.value) == (
            f"{path}: records line {line} ({cid}) and line 21 ({cid}) map to the same cut id; two audio "
            "files differ only in '/' vs '-' or in their extension. Rename one of them."
        )


def test_a_shar_job_reads_its_inputs_a_shard_at_a_time_and_refuses_another_plans_shards(tmp_path):
    """A job's inputs are read shard by shard (a block job holds one shard's records, not its block's),
    in the file's order; a file that holds other shards than the job makes fails naming it, before any
    shard is written."""
    from sharflow.shar.plan import job_input_keys, job_input_shards, read_job_inputs, write_job_inputs
    from sharflow.shar.shard import write_shards

    path = str(tmp_path / "shards-000010-000012.jsonl")
    shards = {
        f"{s:06d}": [json.dumps({"id": f"{s}-{i}"}).encode() + b"\n" for i in range(s % 3 + 1)]
        for s in (10, 11, 12)
    }
    write_job_inputs(path, shards)
    reading = job_input_shards(path)
    assert next(reading) == ("000010", shards["000010"])  # the first shard, before the others are read
    assert list(reading) == [(k, shards[k]) for k in ("000011", "000012")]
    assert job_input_keys(path) == list(shards) and read_job_inputs(path) == shards
    with pytest.raises(SharflowError, match=r"holds shards \['000010', '000011', '000012'\], the job makes "):
        write_shards(["000010", "000011"], {}, inputs=path, settings=EncodeSettings(audio_root=str(tmp_path)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shards-000010-000012.jsonl"]
