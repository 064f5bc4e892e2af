"""The shar stage's shard job: NeMo-compatible Lhotse Shar shards, one atomic job per shard.

For one shard index of the plan (sharflow.shar_plan): decode the target and context spans and
encode them in worker processes (results in order), build every part of a cut before writing it
to any writer, and write cuts / target_audio / context_audio (and the shard's catalog fragment,
sharflow.catalog) under temporary names outside the Shar field folders, renamed into place only
when the shard is complete. A cut that fails goes to the shard's reject list and into no field, so
the fields stay aligned. sharflow.shar_merge sums the shards' stats.

Cuts follow lhotse's Shar conventions and NeMo's MagpieTTS reader: one MonoCut per utterance
(start = offset in the source recording, channel 0), one supervision with text, language, the
standardized speaker and every other manifest field in `custom`; target and context audio tars
keyed by the cut id, the context with its own Recording (own duration and sample count).
"""

import gzip
import io
import json
import logging
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

from sharflow.atomic import atomic_file, read_json, write_json
from sharflow.audio import resolve_audio_path
from sharflow.catalog import catalog_row, write_fragment
from sharflow.errors import SharflowError
from sharflow.layout import ShardFiles, shard_key
from sharflow.parallel import ordered_map
from sharflow.shar_audio import EncodedAudio, EncodeSettings, encode_records
from sharflow.shar_plan import cut_id, recording_id, segment_id
from sharflow.speakers import parse_speaker

log = logging.getLogger(__name__)

REASONS: dict[str, str] = {
    "unreadable_audio": "the target span could not be decoded or encoded",
    "unreadable_context_audio": "the context span could not be decoded or encoded",
}
TASK_RECORDS = 8  # records per worker task
# Manifest keys the cut holds in its own fields (validation_status in cut.custom, where NeMo reads it);
# every other key goes to supervision.custom.
_CUT_KEYS = {
    "audio_filepath",
    "context_audio_filepath",
    "text",
    "offset",
    "duration",
    "speaker",
    "source_audio",
    "validation_status",
}


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
        id=cid,
        recording_id=rid,
        start=0.0,
        duration=record["duration"],
        channel=0,
        text=record["text"],
        language=parse_speaker(record["speaker"]).language,
        speaker=record["speaker"],
        custom=custom,
    )
    return MonoCut(
        id=cid,
        start=record["offset"],
        duration=record["duration"],
        channel=0,
        recording=source,
        supervisions=[supervision],
        # NeMo's dataloader reads validation_status from the cut's own custom (quality.action: mark)
        custom={"validation_status": record["validation_status"]} if "validation_status" in record else None,
    )


def audio_placeholder(segment: str, audio: EncodedAudio, duration: float) -> Recording:
    """The Recording stored beside an audio tar member: the segment alone, with its own length,
    its source a Shar placeholder (what lhotse's to_shar_placeholder makes of it)."""
    return Recording(
        id=segment,
        sources=[AudioSource(type="shar", channels=[0], source="")],
        sampling_rate=audio.sampling_rate,
        num_samples=audio.num_samples,
        duration=duration,
    )


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
    shard: int,
    *,
    with_context: str,
    index: str,
    plan: str,
    out: ShardFiles,
    settings: EncodeSettings,
    workers: int = 1,
) -> dict:
    """Write one shard's cuts, target_audio and context_audio files, atomically and aligned.

    `index` and `plan` are the shard plan's files (sharflow.shar_plan); the shard's records are read
    from `with_context` at the index's offsets. Returns the stats written to `out.stats`.
    """
    records = read_shard_records(shard, with_context=with_context, index=index, plan=plan)
    start = time.perf_counter()
    tmp = _fresh_work_dir(Path(out.stats).parent, shard)
    try:
        stats, rejected, rows = _write_fields(records, tmp, shard, settings, workers)
        write_fragment(rows, str(tmp / "catalog.parquet"))
        summary = _shard_summary(shard, len(records), stats, tmp, time.perf_counter() - start)
        assert summary["records_in"] == summary["cuts"] + len(rejected)
        _publish(tmp, out, summary, rejected)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _log_shard(summary)
    return summary


def read_shard_records(shard: int, *, with_context: str, index: str, plan: str) -> list[dict]:
    """The records of one shard, in shard order: `with_context` lines at the plan's index offsets."""
    planned = read_json(plan)
    if not 0 <= shard < planned["num_shards"]:
        raise SharflowError(f"shard {shard} is not in {plan} (0..{planned['num_shards'] - 1})")
    size = planned["shard_size"]
    offsets = np.load(index, mmap_mode="r")[shard * size : (shard + 1) * size]
    records = []
    with open(with_context, "rb") as f:
        for offset in offsets.tolist():
            f.seek(offset)
            records.append(json.loads(f.readline()))
    return records


def _fresh_work_dir(jobs_dir: Path, shard: int) -> Path:
    """A new temp folder for the shard's files, after removing any a killed run of it left."""
    jobs_dir.mkdir(parents=True, exist_ok=True)
    for stale in jobs_dir.glob(f".shard-{shard_key(shard)}.*"):
        shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f".shard-{shard_key(shard)}.", dir=jobs_dir))


def _write_fields(
    records: list[dict], tmp: Path, shard: int, settings: EncodeSettings, workers: int
) -> tuple[Counter, list[dict], list[dict]]:
    """Encode the records' audio in `workers` processes and write the three field files in `tmp`.

    Returns the counts, the rejected records and the catalog rows of the written cuts. A cut goes
    to every writer (and the catalog) or to none.
    """
    stats: Counter = Counter()
    rejected: list[dict] = []
    rows: list[dict] = []
    batches = [records[i : i + TASK_RECORDS] for i in range(0, len(records), TASK_RECORDS)]
    with (
        JsonlShardWriter(str(tmp / "cuts.jsonl"), shard_size=None) as cuts_w,
        EncodedAudioTarWriter(
            str(tmp / "target.tar"), shard_size=None, format=settings.audio_format
        ) as target_w,
        EncodedAudioTarWriter(
            str(tmp / "context.tar"), shard_size=None, format=settings.audio_format
        ) as context_w,
        tqdm(total=len(records), desc=f"shard {shard:06d}", unit="cut", mininterval=5) as progress,
    ):
        for batch, results in ordered_map(partial(encode_records, settings), batches, workers):
            for record, result in zip(batch, results, strict=True):
                progress.update()
                if isinstance(result[0], str):
                    rejected.append(_rejected_entry(record, *result))
                    stats[f"rejected.{result[0]}"] += 1
                    continue
                target, context = result
                cut, target_meta, context_meta = _cut_parts(record, target, context, settings.audio_root)
                # everything for this cut exists; now it goes to every writer
                target_w.write_encoded(cut.id, target.data, target_meta)
                context_w.write_encoded(cut.id, context.data, context_meta)
                cuts_w.write(cut)
                rows.append(_catalog_row(cut, record, target, context, shard, len(rows)))
                _count_cut(stats, record, target, context)
    _finish_gzip(tmp / "cuts.jsonl", tmp / "cuts.jsonl.gz")
    for name in ("target.tar", "context.tar"):
        if not (tmp / name).exists():  # no cut written: still a valid, empty tar
            tarfile.open(tmp / name, "w").close()
    return stats, rejected, rows


def _catalog_row(
    cut: MonoCut, record: dict, target: EncodedAudio, context: EncodedAudio, shard: int, position: int
) -> dict:
    return catalog_row(
        record,
        cut_id=cut.id,
        shard=shard,
        position=position,
        language=cut.supervisions[0].language,
        target=(target.sampling_rate, target.num_samples),
        context=(context.sampling_rate, context.num_samples),
    )


def _rejected_entry(record: dict, reason: str, detail: str) -> dict:
    return {
        "cut_id": cut_id(record),
        "reason": reason,
        "detail": detail,
        "original": json.dumps(record, ensure_ascii=False),
    }


def _cut_parts(
    record: dict, target: EncodedAudio, context: EncodedAudio, audio_root: str
) -> tuple[MonoCut, Recording, Recording]:
    """The cut of a record and the Recording entries of its target and context audio members."""
    cut = build_cut(record, audio_root)
    ctx_id = segment_id(
        record["context_audio_filepath"], record["context_audio_offset"], record["context_audio_duration"]
    )
    target_meta = audio_placeholder(cut.id, target, record["duration"])
    context_meta = audio_placeholder(ctx_id, context, record["context_audio_duration"])
    return cut, target_meta, context_meta


def _count_cut(stats: Counter, record: dict, target: EncodedAudio, context: EncodedAudio) -> None:
    stats["cuts"] += 1
    stats["target_seconds"] += record["duration"]
    stats["context_seconds"] += record["context_audio_duration"]
    stats["clipped_samples"] += target.clipped + context.clipped
    stats["clipped_cuts"] += bool(target.clipped or context.clipped)
    stats["padded_cuts"] += bool(target.padded or context.padded)
    stats["copied_spans"] += target.copied + context.copied
    stats["encoded_spans"] += (not target.copied) + (not context.copied)


def _shard_summary(shard: int, records_in: int, stats: Counter, tmp: Path, seconds: float) -> dict:
    return {
        "shard": shard,
        "records_in": records_in,
        "cuts": stats["cuts"],
        "rejected": {k.split(".", 1)[1]: v for k, v in sorted(stats.items()) if k.startswith("rejected.")},
        "target_seconds": round(stats["target_seconds"], 3),
        "context_seconds": round(stats["context_seconds"], 3),
        "clipped_samples": stats["clipped_samples"],
        "clipped_cuts": stats["clipped_cuts"],
        "padded_cuts": stats["padded_cuts"],
        "copied_spans": stats["copied_spans"],
        "encoded_spans": stats["encoded_spans"],
        "bytes": {
            "cuts": (tmp / "cuts.jsonl.gz").stat().st_size,
            "target_audio": (tmp / "target.tar").stat().st_size,
            "context_audio": (tmp / "context.tar").stat().st_size,
        },
        "seconds": round(seconds, 3),
    }


def _publish(tmp: Path, out: ShardFiles, summary: dict, rejected: list[dict]) -> None:
    """Rename the field files into place, then write the rejects and, last, the stats."""
    for src, dst in (
        (tmp / "cuts.jsonl.gz", out.cuts),
        (tmp / "target.tar", out.target),
        (tmp / "context.tar", out.context),
        (tmp / "catalog.parquet", out.catalog),
    ):
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
    with atomic_file(out.rejected, "w", encoding="utf-8") as f:
        for r in rejected:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    write_json(out.stats, summary)


def _log_shard(summary: dict) -> None:
    if summary["clipped_samples"]:
        log.warning(
            "shard %d: %d samples beyond [-1, 1] clipped in %d cuts",
            summary["shard"],
            summary["clipped_samples"],
            summary["clipped_cuts"],
        )
    log.info(
        "shard %d: %d cuts, %d rejected, %.1f s target audio in %.1f s; %d spans copied through, %d encoded",
        summary["shard"],
        summary["cuts"],
        sum(summary["rejected"].values()),
        summary["target_seconds"],
        summary["seconds"],
        summary["copied_spans"],
        summary["encoded_spans"],
    )


def _finish_gzip(src: Path, dst: Path) -> None:
    """gzip with a fixed header (no name, mtime 0), so equal content gives equal bytes."""
    with open(dst, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        if src.exists():
            with open(src, "rb") as f:
                shutil.copyfileobj(f, gz)
