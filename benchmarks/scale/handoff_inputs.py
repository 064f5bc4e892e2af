"""bench_scale's inputs of prepare and of the jobs after the Shar: sparse WAVs and a manifest, audio
shards, plans, the evaluation set's, verify's and the report's inputs."""

import json
import struct
from pathlib import Path

import numpy as np

from scale.corpus import CONTAINERS, SHARD_SIZE

PREPARE_RATE = 16_000


def write_sparse_wav(path: Path, samples: int, rate: int) -> None:
    """A 16-bit mono WAV of `samples` samples whose data is a hole in a sparse file: a real header over
    silence, a few KB on disk whatever its length (prepare reads the header only)."""
    data = 2 * samples
    header = (
        b"RIFF"
        + struct.pack("<I", 36 + data)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, rate, 2 * rate, 2, 16)
        + b"data"
        + struct.pack("<I", data)
    )
    with open(path, "wb") as f:
        f.write(header)
        f.truncate(len(header) + data)


def write_prepare_inputs(columns: dict[str, np.ndarray], folder: Path) -> None:
    """What prepare reads: a NeMo manifest of the corpus's records, each a span (offset, duration) of
    one of CONTAINERS long recordings, one after another in it; the recordings as sparse WAVs as long
    as their spans (prepare/audio: its audio root)."""
    audio = folder / "prepare" / "audio"
    audio.mkdir(parents=True, exist_ok=True)
    ends = np.zeros(CONTAINERS)
    with open(folder / "prepare" / "manifest.json", "w", encoding="utf-8") as f:
        for i in range(len(columns["duration"])):
            c, s, d = int(columns["container"][i]), int(columns["speaker"][i]), float(columns["duration"][i])
            record = {
                "audio_filepath": f"{c:06d}.wav",
                "offset": round(float(ends[c]), 3),
                "duration": d,
                "text": f"utterance {i} of speaker {s}, spoken for the benchmark",
                "speaker": f"S{s:07d}",
            }
            ends[c] = round(ends[c] + d, 3)
            f.write(json.dumps(record) + "\n")
    for c in range(CONTAINERS):
        write_sparse_wav(audio / f"{c:06d}.wav", int(np.ceil((ends[c] + 1.0) * PREPARE_RATE)), PREPARE_RATE)


def _flac_clip(seconds: float, rate: int) -> tuple[bytes, int]:
    """(FLAC bytes, samples) of `seconds` of a tone at `rate` (as lhotse counts the samples): small, so
    that a million cuts' Shar fits on a laptop's disk."""
    import io

    import soundfile as sf

    from sharflow.io.audio import compute_num_samples

    samples = compute_num_samples(seconds, rate)
    clip = io.BytesIO()
    tone = 0.1 * np.sin(2 * np.pi * 220 * np.arange(samples) / rate)
    sf.write(clip, tone, rate, format="FLAC", subtype="PCM_16")
    return clip.getvalue(), samples


def write_audio_shard(shar: Path, shard: int, records: list[dict], seconds: float, rate: int) -> list[dict]:
    """One shard of a Shar set's cuts and target and context audio, in the shar job's byte layout
    (sharflow.shar.format): each record's cut, and `seconds` of a tone at `rate` as both its target
    and its context audio (their members and manifests). Returns the cuts."""
    import gzip

    from sharflow.core.shar_fields import AUDIO_FIELDS
    from sharflow.core.shar_fields import CUTS_GZ as CUTS  # write_plan's plan is of an unindexed set
    from sharflow.shar.format import (
        TarMemberWriter,
        audio_member_names,
        cut_dict,
        cut_line,
        placeholder_bytes,
    )

    clip, samples = _flac_clip(seconds, rate)
    for fd in (CUTS, *AUDIO_FIELDS):
        (shar / fd.folder).mkdir(parents=True, exist_ok=True)
    cuts = [cut_dict(r) for r in records]
    with gzip.open(shar / CUTS.folder / CUTS.name(shard), "wt", encoding="utf-8") as out:
        out.writelines(cut_line(c) for c in cuts)
    for fd in AUDIO_FIELDS:
        with TarMemberWriter(str(shar / fd.folder / fd.name(shard))) as tar:
            for c in cuts:
                audio, manifest = audio_member_names(c["id"], "flac")
                tar.write(audio, clip)
                tar.write(manifest, placeholder_bytes(c["id"], rate, samples, seconds))
    return cuts


def write_plan(path: Path, shards: int) -> None:
    """A shard plan of one generation of `shards` shards from 0 (what the jobs read of a plan)."""
    path.write_text(json.dumps({"generations": [{"first": 0, "shards": shards}], "num_shards": shards}))


EVALUATION_SECONDS = 0.25  # each test cut's target and context audio in the evaluation set's Shar
# The test split's share, as a fixed one: 1 record in 64, so that it follows the corpus at any size
# (the draw of held-out speakers holds none out of 10^3 records); Emilia's held-out sets are ~1.5 %
EVALUATION_EVERY = 64


def write_evaluation_inputs(with_context: Path, folder: Path) -> None:
    """What an evaluation set's export reads: a test split's Shar (evaluation/shar: one record in
    EVALUATION_EVERY), SHARD_SIZE cuts a shard, written with the shar job's own byte layout
    (sharflow.shar.format: the cut, its audio tar members and their manifests). Each cut's target
    and context audio is EVALUATION_SECONDS of 24 kHz FLAC (one tone for all: the export's cost per
    cut, not per second of audio, is what grows with the split; per second it only decodes and
    writes)."""
    with open(with_context, encoding="utf-8") as f:
        tests = [json.loads(line) for i, line in enumerate(f) if i % EVALUATION_EVERY == 0]
    for shard, first in enumerate(range(0, len(tests), SHARD_SIZE)):
        write_audio_shard(
            folder / "evaluation" / "shar",
            shard,
            tests[first : first + SHARD_SIZE],
            EVALUATION_SECONDS,
            24_000,
        )


VERIFY_SECONDS = 0.1  # each train cut's target and context audio in verify's Shar
VERIFY_CODEC = {"sample_rate": 24_000, "samples_per_frame": 1024, "num_codebooks": 8, "codebook_size": 1024}


def write_verify_inputs(with_context: Path, folder: Path) -> None:
    """What verify reads: the train split's Shar (verify/shar), SHARD_SIZE cuts a shard, every field
    (cuts, target and context audio, target and context codes of one codec) in the layouts the shar
    and codes jobs write (sharflow.shar.format; lhotse's ArrayTarWriter, as the codes job uses it);
    the catalog over it (the shar job's fragments merged by the catalog job's code); the plan and the
    shar and codes stats. Each cut is VERIFY_SECONDS long, target and context: verify decodes every
    member, and its cost per second of audio is measured on real audio (bench_plan); what grows
    with the corpus is the walk, the catalog check and the totals."""
    from lhotse.array import Array, TemporalArray
    from lhotse.shar.writers import ArrayTarWriter

    from sharflow.core.shar_fields import codes_fields
    from sharflow.dataset.catalog import catalog_row, write_fragment
    from sharflow.io.audio import compute_num_samples

    rate = VERIFY_CODEC["sample_rate"]
    samples = compute_num_samples(VERIFY_SECONDS, rate)
    frames = -(-samples // VERIFY_CODEC["samples_per_frame"])
    codes = (
        np.random.default_rng(0).integers(0, 1024, (VERIFY_CODEC["num_codebooks"], frames)).astype(np.int16)
    )
    shape = [VERIFY_CODEC["num_codebooks"], frames]
    frame_shift = VERIFY_CODEC["samples_per_frame"] / rate
    root = folder / "verify"
    shar = root / "shar"
    with open(with_context, encoding="utf-8") as f:
        train = [
            {**r, "duration": VERIFY_SECONDS, "context_audio_duration": VERIFY_SECONDS}
            for r in map(json.loads, f)
            if r["split"] == "train"
        ]
    starts = range(0, len(train), SHARD_SIZE)
    for shard, first in enumerate(starts):
        records = train[first : first + SHARD_SIZE]
        cuts = write_audio_shard(shar, shard, records, VERIFY_SECONDS, rate)
        for fd in codes_fields("codec"):
            path = shar / fd.folder / fd.name(shard)
            path.parent.mkdir(parents=True, exist_ok=True)
            with ArrayTarWriter(str(path), shard_size=None, compression="numpy") as tar:
                for c in cuts:
                    array = Array(storage_type="shar", storage_path="", storage_key="", shape=shape)
                    tar.write(
                        c["id"],
                        codes,
                        TemporalArray(array, temporal_dim=-1, frame_shift=frame_shift, start=0),
                    )
        rows = [
            catalog_row(
                r,
                cut_id=c["id"],
                shard=shard,
                position=i,
                language="en",
                target=(rate, samples),
                context=(rate, samples),
            )
            for i, (r, c) in enumerate(zip(records, cuts, strict=True))
        ]
        write_fragment(rows, str(root / "fragments" / f"shard-{shard:06d}.catalog.parquet"))
    shards = len(starts)
    write_plan(root / "plan.json", shards)
    hours = round(len(train) * VERIFY_SECONDS / 3600, 6)
    (root / "shar_stats.json").write_text(json.dumps({"cuts": len(train), "hours": hours}))
    (root / "codes_stats.json").write_text(json.dumps({"cuts": len(train), "shards": shards, **VERIFY_CODEC}))
    from scale.jobs import merge_fragments  # the catalog made as the catalog job makes it

    merge_fragments(root / "fragments", root / "codes_stats.json", root / "catalog.parquet")


REPORT_STATS = (  # the jobs whose stats the report reads, with the key it reads them under
    ("prepare", "prepare"),
    ("text", "text_merge"),
    ("quality", "quality_filter"),
    ("splits", "splits"),
    ("context", "context_merge"),
    ("shar", "shar_merge"),
    ("identity", "identity_merge"),
)


def write_report_inputs(folder: Path) -> None:
    """What the report reads besides the catalog, buckets, records and metrics: every stage's stats as
    its job writes them (the jobs measured here, run once more into report/<job>/), and verify's
    summary in its form (verify.json: its counts from the catalog, since verify itself reads audio)."""
    import pyarrow.parquet as pq

    from scale.jobs import JOBS  # each stage's stats made by its job, as the report reads them
    from sharflow.core.shar_fields import fields

    report = folder / "report"
    for _, job in (*REPORT_STATS, ("codes", "codes_merge")):
        (report / job).mkdir(parents=True, exist_ok=True)
        JOBS[job](folder, report / job)
    catalog = pq.read_table(folder / "card" / "catalog.parquet", columns=["duration", "context_duration"])
    shards = len(list((folder / "shards").glob("*.stats.json")))
    hours = {
        k: round(float(catalog[c].to_numpy().sum()) / 3600, 6)
        for k, c in (("hours", "duration"), ("context_hours", "context_duration"))
    }
    verify = {
        "dataset": "emilia",
        "ok": True,
        "shards": shards,
        "fields": [fd.label for fd in fields(["codec"])],
        "cuts": catalog.num_rows,
        **hours,
        "catalog_rows": catalog.num_rows,
    }
    (report / "verify.json").write_text(json.dumps(verify))


def report_files(folder: Path) -> dict:
    """The report's files of the dataset ({key: path}, as the report rule gives them)."""
    report = folder / "report"
    files = {key: str(report / job / "stats.json") for key, job in REPORT_STATS}
    return {
        **files,
        "codes": {"codec": str(report / "codes_merge" / "stats.json")},
        "buckets": str(folder / "card" / "buckets.yaml"),
        "verify": str(report / "verify.json"),
        "catalog": str(folder / "card" / "catalog.parquet"),
        "records": str(folder / "quality" / "records.jsonl"),
        "quality_metrics": str(folder / "quality" / "metrics.jsonl"),
    }


# The input steps each step reads (made before it), and those each job reads: make_inputs makes only
# what its jobs need, with what that needs
