"""The shar stage: NeMo-compatible Lhotse Shar shards, one atomic job per shard.

- plan (a Snakemake checkpoint): a seeded shuffle of with_context.jsonl (grouped by speaker, so
  training needs it mixed) into shards of `shard_size` records with contiguous indices from 0.
  shard_plan.json holds the counts; shar_index.npy the byte offset of every record in shuffled
  order (8 bytes per record), so a shard job reads only its own lines.
- shard: for one index, decode the target and context spans and encode them in worker processes
  (results in order), build every part of a cut before writing it to any writer, and write
  cuts / target_audio / context_audio under temporary names outside the Shar field folders,
  renamed into place only when the shard is complete. A cut that fails goes to the shard's reject
  list and into no field, so the fields stay aligned.
- merge: per-shard stats and rejects summed per dataset, with records in = cuts + rejected.

Cuts follow lhotse's Shar conventions and NeMo's MagpieTTS reader: one MonoCut per utterance
(start = offset in the source recording, channel 0), one supervision with text, language, the
standardized speaker and every other manifest field in `custom`; target and context audio tars
keyed by the cut id, the context with its own Recording (own duration and sample count).
"""

import gzip
import hashlib
import io
import json
import logging
import math
import os
import shutil
import tarfile
import tempfile
import time
from collections import Counter
from functools import partial
from pathlib import Path

import numpy as np
from lhotse import AudioSource, MonoCut, Recording, SupervisionSegment
from lhotse.shar.writers import AudioTarWriter, JsonlShardWriter
from tqdm import tqdm

from sharflow.atomic import atomic_dir, atomic_file
from sharflow.audio import resolve_audio_path
from sharflow.errors import SharflowError
from sharflow.parallel import ordered_map
from sharflow.rejects import RejectWriter
from sharflow.shar_audio import EncodedAudio, EncodeSettings, encode_records
from sharflow.speakers import parse_speaker

log = logging.getLogger(__name__)

REASONS: dict[str, str] = {
    "unreadable_audio": "the target span could not be decoded or encoded",
    "unreadable_context_audio": "the context span could not be decoded or encoded",
}
# Manifest keys the cut holds in its own fields; every other key goes to supervision.custom.
TASK_RECORDS = 8  # records per worker task
_CUT_KEYS = {"audio_filepath", "context_audio_filepath", "text", "offset", "duration", "speaker", "source_audio"}


# ---- ids ----------------------------------------------------------------------------------------

def recording_id(audio_filepath: str) -> str:
    """A recording id from a path relative to the audio root: extension dropped, `/` -> `-`."""
    stem = audio_filepath.rsplit(".", 1)[0] if "." in Path(audio_filepath).name else audio_filepath
    return stem.replace("/", "-")


def segment_id(audio_filepath: str, offset: float, duration: float) -> str:
    """A stable id for a span of a file, at 10 µs resolution (two segments never collide)."""
    return f"{recording_id(audio_filepath)}-{round(offset * 1e5)}-{round(duration * 1e5)}"


def cut_id(record: dict) -> str:
    return segment_id(record["audio_filepath"], record["offset"], record["duration"])


# ---- plan ---------------------------------------------------------------------------------------

def plan_shards(with_context: str, plan_path: str, index_path: str, *, shard_size: int, seed: int) -> dict:
    """Shuffle the records with `seed` into shards of `shard_size`; write the plan and the index.

    Raises SharflowError if two records would get the same cut id.
    """
    offsets, hashes, seconds = [], [], []
    with open(with_context, "rb") as f:
        offset = 0
        for raw in f:
            record = json.loads(raw)
            offsets.append(offset)
            hashes.append(int.from_bytes(hashlib.blake2b(cut_id(record).encode(), digest_size=8).digest(), "little"))
            seconds.append(record["duration"])
            offset += len(raw)
    offsets_arr = np.asarray(offsets, dtype=np.int64)
    del offsets
    _check_unique_ids(np.asarray(hashes, dtype=np.uint64), with_context)
    n = len(offsets_arr)
    order = np.random.default_rng(seed).permutation(n)
    num_shards = max(1, math.ceil(n / shard_size))
    durations = np.asarray(seconds)[order]
    plan = {
        "records": n,
        "shard_size": shard_size,
        "seed": seed,
        "num_shards": num_shards,
        "shards": [
            {"index": s, "records": int(min(shard_size, n - s * shard_size)) if n else 0,
             "seconds": round(float(durations[s * shard_size:(s + 1) * shard_size].sum()), 3)}
            for s in range(num_shards)
        ],
    }
    final = Path(index_path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp.npy")
    np.save(tmp, offsets_arr[order])
    os.replace(tmp, final)
    with atomic_file(plan_path, "w", encoding="utf-8") as f:
        json.dump(plan, f, indent=1)
        f.write("\n")
    log.info("shar plan: %d records into %d shards of %d (seed %d)", n, num_shards, shard_size, seed)
    return plan


def _check_unique_ids(hashes: np.ndarray, path: str) -> None:
    ordered = np.sort(hashes)
    clash = ordered[1:][ordered[1:] == ordered[:-1]]
    if len(clash):
        lines = []
        with open(path, "rb") as f:
            for line_no, raw in enumerate(f, start=1):
                cid = cut_id(json.loads(raw))
                if int.from_bytes(hashlib.blake2b(cid.encode(), digest_size=8).digest(), "little") == clash[0]:
                    lines.append(f"line {line_no} ({cid})")
        raise SharflowError(
            f"{path}: records {' and '.join(lines)} map to the same cut id; two audio files differ only "
            "in '/' vs '-' or in their extension. Rename one of them."
        )


# ---- cuts ---------------------------------------------------------------------------------------

def build_cut(record: dict, audio_root: str) -> MonoCut:
    """The cut of a with_context record: the target span of its source recording, one supervision."""
    cid = cut_id(record)
    rid = recording_id(record["audio_filepath"])
    src = record["source_audio"]
    full, _ = resolve_audio_path(audio_root, record["audio_filepath"])
    source = Recording(
        id=rid,
        sources=[AudioSource(type="file", channels=list(range(src["num_channels"])), source=full)],
        sampling_rate=src["sampling_rate"],
        num_samples=src["num_samples"],
        duration=src["num_samples"] / src["sampling_rate"],
    )
    custom = {k: v for k, v in record.items() if k not in _CUT_KEYS}
    custom["context_recording_id"] = recording_id(record["context_audio_filepath"])
    supervision = SupervisionSegment(
        id=cid, recording_id=rid, start=0.0, duration=record["duration"], channel=0, text=record["text"],
        language=parse_speaker(record["speaker"]).language, speaker=record["speaker"], custom=custom,
    )
    return MonoCut(id=cid, start=record["offset"], duration=record["duration"], channel=0,
                   recording=source, supervisions=[supervision])


def audio_placeholder(segment: str, audio: EncodedAudio, duration: float) -> Recording:
    """The Recording stored beside an audio tar member: the segment alone, with its own length,
    its source a Shar placeholder (what lhotse's to_shar_placeholder makes of it)."""
    return Recording(id=segment, sources=[AudioSource(type="shar", channels=[0], source="")],
                     sampling_rate=audio.sampling_rate, num_samples=audio.num_samples, duration=duration)


class EncodedAudioTarWriter(AudioTarWriter):
    """lhotse's AudioTarWriter, taking audio already encoded (in worker processes).

    Members and manifests are laid out exactly as AudioTarWriter.write lays them out; `manifest`
    must already be a Shar placeholder (see audio_placeholder).
    """

    def write_encoded(self, key: str, data: bytes, manifest: Recording) -> None:
        self.tar_writer.write(f"{key}.{self.format}", io.BytesIO(data))
        meta = io.BytesIO((json.dumps(manifest.to_dict()) + "\n").encode("utf-8"))
        self.tar_writer.write(f"{key}.json", meta, count=False)


# ---- shard --------------------------------------------------------------------------------------

def write_shard(
    with_context: str, index_path: str, plan_path: str, shard: int,
    out_cuts: str, out_target: str, out_context: str, out_stats: str, out_rejected: str,
    *, settings: EncodeSettings, workers: int = 1,
) -> dict:
    """Write one shard's cuts, target_audio and context_audio files, atomically and aligned."""
    with open(plan_path, encoding="utf-8") as f:
        plan = json.load(f)
    if not 0 <= shard < plan["num_shards"]:
        raise SharflowError(f"shard {shard} is not in {plan_path} (0..{plan['num_shards'] - 1})")
    size = plan["shard_size"]
    offsets = np.load(index_path, mmap_mode="r")[shard * size:(shard + 1) * size]
    records = []
    with open(with_context, "rb") as f:
        for offset in offsets.tolist():
            f.seek(offset)
            records.append(json.loads(f.readline()))

    jobs_dir = Path(out_stats).parent
    jobs_dir.mkdir(parents=True, exist_ok=True)
    for stale in jobs_dir.glob(f".shard-{shard:06d}.*"):  # left by a killed run of this shard
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".shard-{shard:06d}.", dir=jobs_dir))
    start = time.perf_counter()
    stats = Counter()
    rejected: list[dict] = []
    try:
        with (
            JsonlShardWriter(str(tmp / "cuts.jsonl"), shard_size=None) as cuts_w,
            EncodedAudioTarWriter(str(tmp / "target.tar"), shard_size=None, format=settings.audio_format) as target_w,
            EncodedAudioTarWriter(str(tmp / "context.tar"), shard_size=None, format=settings.audio_format) as context_w,
            tqdm(total=len(records), desc=f"shard {shard:06d}", unit="cut", mininterval=5) as progress,
        ):
            batches = [records[i:i + TASK_RECORDS] for i in range(0, len(records), TASK_RECORDS)]
            encoded = ordered_map(partial(encode_records, settings), batches, workers)
            for record, result in ((r, e) for batch, results in encoded for r, e in zip(batch, results)):
                progress.update()
                if isinstance(result[0], str):
                    rejected.append({"cut_id": cut_id(record), "reason": result[0], "detail": result[1],
                                     "original": json.dumps(record, ensure_ascii=False)})
                    stats[f"rejected.{result[0]}"] += 1
                    continue
                target, context = result
                cut = build_cut(record, settings.audio_root)
                ctx_id = segment_id(record["context_audio_filepath"], record["context_audio_offset"],
                                    record["context_audio_duration"])
                target_meta = audio_placeholder(cut.id, target, record["duration"])
                context_meta = audio_placeholder(ctx_id, context, record["context_audio_duration"])
                # everything for this cut exists; now it goes to every writer
                target_w.write_encoded(cut.id, target.data, target_meta)
                context_w.write_encoded(cut.id, context.data, context_meta)
                cuts_w.write(cut)
                stats["cuts"] += 1
                stats["target_seconds"] += record["duration"]
                stats["context_seconds"] += record["context_audio_duration"]
                stats["clipped_samples"] += target.clipped + context.clipped
                stats["clipped_cuts"] += bool(target.clipped or context.clipped)
                stats["padded_cuts"] += bool(target.padded or context.padded)
        _finish_gzip(tmp / "cuts.jsonl", tmp / "cuts.jsonl.gz")
        for name in ("target.tar", "context.tar"):
            if not (tmp / name).exists():  # no cut written: still a valid, empty tar
                tarfile.open(tmp / name, "w").close()
        summary = {
            "shard": shard,
            "records_in": len(records),
            "cuts": stats["cuts"],
            "rejected": {k.split(".", 1)[1]: v for k, v in sorted(stats.items()) if k.startswith("rejected.")},
            "target_seconds": round(stats["target_seconds"], 3),
            "context_seconds": round(stats["context_seconds"], 3),
            "clipped_samples": stats["clipped_samples"],
            "clipped_cuts": stats["clipped_cuts"],
            "padded_cuts": stats["padded_cuts"],
            "bytes": {
                "cuts": (tmp / "cuts.jsonl.gz").stat().st_size,
                "target_audio": (tmp / "target.tar").stat().st_size,
                "context_audio": (tmp / "context.tar").stat().st_size,
            },
            "seconds": round(time.perf_counter() - start, 3),
        }
        assert summary["records_in"] == summary["cuts"] + len(rejected)
        for src, dst in ((tmp / "cuts.jsonl.gz", out_cuts), (tmp / "target.tar", out_target),
                         (tmp / "context.tar", out_context)):
            Path(dst).parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
        with atomic_file(out_rejected, "w", encoding="utf-8") as f:
            for r in rejected:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        with atomic_file(out_stats, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if summary["clipped_samples"]:
        log.warning("shard %d: %d samples beyond [-1, 1] clipped in %d cuts", shard,
                    summary["clipped_samples"], summary["clipped_cuts"])
    log.info("shard %d: %d cuts, %d rejected, %.1f s target audio in %.1f s", shard, summary["cuts"],
             len(rejected), summary["target_seconds"], summary["seconds"])
    return summary


def _finish_gzip(src: Path, dst: Path) -> None:
    """gzip with a fixed header (no name, mtime 0), so equal content gives equal bytes."""
    with open(dst, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        if src.exists():
            with open(src, "rb") as f:
                shutil.copyfileobj(f, gz)


# ---- merge --------------------------------------------------------------------------------------

def shard_rejected_path(stats_path: str) -> str:
    """A shard job's rejects file, beside its stats (shard-N.stats.json -> shard-N.rejected.jsonl)."""
    if not stats_path.endswith(".stats.json"):
        raise ValueError(f"not a shard stats file: {stats_path}")
    return stats_path[: -len(".stats.json")] + ".rejected.jsonl"


def merge_shar_stats(shard_stats: list[str], context_stats: str, stats_path: str, rejected_dir: str, *,
                     dataset: str) -> dict:
    """Sum the shards' stats, gather their rejects by reason, and check records in = cuts + rejected.

    Each shard's rejects are read from beside its stats (shard_rejected_path): listing them as
    inputs too would double the merge job's inputs, which Snakemake pays for per file.
    """
    with open(context_stats, encoding="utf-8") as f:
        records_in = json.load(f)["records_out"]
    totals: Counter = Counter()
    rejected: Counter = Counter()
    shards = []
    for path in shard_stats:
        with open(path, encoding="utf-8") as f:
            s = json.load(f)
        shards.append(s)
        rejected.update(s["rejected"])
        for key in ("cuts", "target_seconds", "context_seconds", "clipped_samples", "clipped_cuts", "padded_cuts"):
            totals[key] += s[key]
        for field, n in s["bytes"].items():
            totals[f"bytes.{field}"] += n
    with atomic_dir(rejected_dir) as out_dir, RejectWriter(out_dir) as rejects:
        for path in map(shard_rejected_path, shard_stats):
            with open(path, encoding="utf-8") as f:
                for text in f:
                    rejects.write(json.loads(text)["reason"], text)
    summary = {
        "dataset": dataset,
        "records_in": records_in,
        "cuts": totals["cuts"],
        "rejected_total": sum(rejected.values()),
        "rejected": dict(sorted(rejected.items())),
        "shards": len(shards),
        "hours": round(totals["target_seconds"] / 3600, 6),
        "context_hours": round(totals["context_seconds"] / 3600, 6),
        "clipped_samples": totals["clipped_samples"],
        "clipped_cuts": totals["clipped_cuts"],
        "padded_cuts": totals["padded_cuts"],
        "bytes": {k.split(".", 1)[1]: v for k, v in sorted(totals.items()) if k.startswith("bytes.")},
        "shard_seconds": [s["seconds"] for s in shards],
    }
    if summary["cuts"] + summary["rejected_total"] != records_in:
        raise SharflowError(
            f"shar {dataset}: {records_in} records with context but {summary['cuts']} cuts + "
            f"{summary['rejected_total']} rejected; shards are out of date: rerun with --forcerun shar_plan"
        )
    with atomic_file(stats_path, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    log.info("shar %s: %d cuts in %d shards (%.3f h), %d rejected %s", dataset, summary["cuts"], len(shards),
             summary["hours"], summary["rejected_total"], dict(rejected))
    return summary
