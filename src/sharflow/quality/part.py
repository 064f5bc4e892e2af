"""The quality stage's measuring jobs: metrics of every record, cached per part.

Each part takes a contiguous run of record lines (the text stage's records) holding an equal share
of the audio seconds (decided from the records file alone, so no plan job is needed); inside a part,
records are bin-packed onto the job's ranks by seconds (sharflow.core.ranks.rank_job). Each rank
reads a record one ahead of measuring it (sharflow.core.audio.load_span: the samples the shard
stores), measures it (sharflow.quality.metrics) and writes one line per record, in line order; a
record whose audio cannot be decoded gets an `error` instead of metrics (the filter rejects it).
Each line carries the key of what it measured, and a part keeps the last run's measures of its
records where their keys still match (sharflow.quality.reuse): a grown corpus measures its growth.
With the ASR check (quality.asr), a rank also transcribes its records in batches of about
`batch_seconds` of audio (sharflow.models.asr) and adds asr_text, cer and wer. Metrics depend only
on the record, so any number of parts and ranks gives the same bytes.
"""

import json
import logging
import time
from dataclasses import dataclass
from functools import partial

from tqdm import tqdm

from sharflow.core.atomic import atomic_file, write_json
from sharflow.core.audio import load_span, resample, resolve_audio_path
from sharflow.core.jsonl import merge_by_line
from sharflow.core.metrics import TEXT_METRICS
from sharflow.core.parallel import ahead
from sharflow.core.parts import part_records
from sharflow.core.ranks import Rank, rank_job
from sharflow.quality.metrics import MODEL_RATE
from sharflow.quality.reuse import kept_measures, measure_digest, record_key, reused_lines

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AsrOptions:
    """The optional ASR check (quality.asr): a NeMo ASR model and the audio seconds per batch."""

    model: str
    batch_seconds: float = 60.0
    random: bool = False  # built by the workflow from random_from_config: say so loudly


@dataclass(frozen=True)
class MeasureSettings:
    """What a rank needs besides its records (picklable, sent to spawned ranks)."""

    audio_root: str
    dnsmos_max_windows: int = 0
    asr: AsrOptions | None = None


def text_metrics(record: dict) -> dict:
    """The text stage's metrics of a record, passed on with the audio's (None where it has none)."""
    return {name: record.get(name) for name in TEXT_METRICS}


def run_quality_part(
    part: int,
    *,
    records: str,
    parts: int,
    out_metrics: str,
    out_stats: str,
    settings: MeasureSettings,
    device: str = "auto",
    workers: int = 1,
    gpus: int = 0,
    previous: str | None = None,
) -> dict:
    """Measure the records of one part on as many ranks as devices/workers allow, keeping the
    measures in `previous` (the last run's metrics, if any) whose keys still match."""
    mine = part_records(records, part, parts)
    digest = measure_digest(settings)
    keyed = _keyed(records, mine, settings, digest)
    kept = kept_measures(previous, (key for _, key, _ in keyed))
    todo = [
        (line, offset, duration)
        for (line, offset, duration), (_, key, _) in zip(mine, keyed, strict=True)
        if key not in kept
    ]
    costs = {line: duration for line, _, duration in todo}
    offsets = {line: offset for line, offset, _ in todo}
    what = f"quality part {part}"
    with rank_job(what, device=device, workers=workers, gpus=gpus, scratch_beside=out_metrics) as job:
        log.info(
            "quality part %d of %d: %d kept from the last run, %d records on ranks %s",
            part,
            parts,
            len(mine) - len(todo),
            len(todo),
            job.devices,
        )
        ranks = job.run(
            measure_records, costs, unit=lambda line: (line, offsets[line]), args=(records, settings, digest)
        )
        reused = f"{job.scratch}/reused.jsonl"
        with open(reused, "w", encoding="utf-8") as f:
            f.writelines(reused_lines(kept, (k for k in keyed if k[1] in kept)))
        with atomic_file(out_metrics, "w", encoding="utf-8") as out:
            out.writelines(merge_by_line([*(r.rank.file(".jsonl") for r in ranks), reused]))
    rank_stats = [{**r.value, "planned_seconds": round(r.planned_cost, 3)} for r in ranks]
    stats = {
        "part": part,
        "parts": parts,
        "records": len(mine),
        "measured": len(todo),
        "reused": len(mine) - len(todo),
        "unreadable": sum(s["unreadable"] for s in rank_stats),
        "audio_seconds": round(sum(s["audio_seconds"] for s in rank_stats), 3),
        "seconds": max((s["seconds"] for s in rank_stats), default=0.0),
        "asr_model": settings.asr.model if settings.asr else None,
        "ranks": rank_stats,
    }
    write_json(out_stats, stats)
    return stats


def _keyed(records: str, mine, settings: MeasureSettings, digest: str) -> list[tuple[int, str, dict]]:
    """(line, key, record) of a part's records (sharflow.quality.reuse.record_key)."""
    out = []
    with open(records, "rb") as src:
        for line, offset, _ in mine:
            src.seek(offset)
            record = json.loads(src.readline())
            key = record_key(
                record, _audio_path(settings.audio_root, record), digest, settings.asr is not None
            )
            out.append((line, key, text_metrics(record)))  # no whole records held
    return out


def _audio_path(audio_root: str, record: dict) -> str:
    try:
        return resolve_audio_path(audio_root, record["audio_filepath"])[0]
    except Exception:  # an escaping or unreadable path: keyed as unreadable, measured (and rejected)
        return ""


# ---- one rank -----------------------------------------------------------------------------------


def _read(src, settings: MeasureSettings, digest: str, item: tuple[int, int]):
    """(record, its key, (audio at its rate, the rate, audio at 16 kHz) or the exception that
    stopped decoding)."""
    src.seek(item[1])
    record = json.loads(src.readline())
    path = _audio_path(settings.audio_root, record)  # resolved once: for the key and for reading
    key = record_key(record, path, digest, settings.asr is not None)
    try:
        if not path:  # an escaping or unreadable path: the reason, as resolve_audio_path gives it
            resolve_audio_path(settings.audio_root, record["audio_filepath"])
        audio, rate = load_span(path, record["offset"], record["duration"])
        return record, key, (audio, rate, resample(audio, rate, MODEL_RATE))
    except Exception as e:  # reported per record; the part goes on without it
        return record, key, e


class _Pending:
    """Measured entries waiting, in line order, for their ASR batch; written at once without ASR."""

    def __init__(self, out, progress, transcriber, batch_seconds: float):
        self.out, self.progress = out, progress
        self.transcriber, self.batch_seconds = transcriber, batch_seconds
        self.items: list[tuple[dict, dict, object]] = []  # (entry, record, audio for ASR or None)
        self.seconds = 0.0

    def add(self, entry: dict, record: dict, wave, seconds: float) -> None:
        self.items.append((entry, record, wave))
        self.seconds += seconds
        if not self.transcriber or self.seconds >= self.batch_seconds:
            self.flush()

    def flush(self) -> None:
        if self.transcriber:
            _transcribe(self.transcriber, self.items)
        for entry, _, _ in self.items:
            self.out.write(json.dumps(entry) + "\n")
        self.progress.update(len(self.items))
        self.items.clear()
        self.seconds = 0.0


def measure_records(
    rank: Rank,
    lines: list[tuple[int, int]],
    records: str,
    settings: MeasureSettings,
    digest: str | None = None,
) -> dict:
    """One rank: measure its records (line, byte offset); write {"line", metrics... | error, "key"}
    in line order to its scratch file `.jsonl`.

    With the ASR check, records wait in line order until about `batch_seconds` of audio is pending,
    then are transcribed as one batch and written with asr_text, cer and wer.
    """
    from sharflow.quality.metrics import Meters, measure

    start = time.perf_counter()
    digest = digest or measure_digest(settings)
    meters = Meters.load(rank.device, settings.dnsmos_max_windows) if lines else None
    transcriber = _transcriber(settings.asr, rank.device) if lines else None
    if lines:  # once per rank and job (tests/test_workflow.py counts these lines)
        models = "DNSMOS, VAD" + (", ASR" if transcriber else "")
        log.info(
            "quality models loaded on %s in %.1f s: %s", rank.device, time.perf_counter() - start, models
        )
    unreadable, seconds = 0, 0.0
    with (
        open(records, "rb") as src,
        open(rank.file(".jsonl"), "w", encoding="utf-8") as out,
        tqdm(
            total=len(lines), desc=f"quality rank {rank.index} ({rank.device})", unit="utt", mininterval=5
        ) as bar,
    ):
        pending = _Pending(out, bar, transcriber, settings.asr.batch_seconds if settings.asr else 0.0)
        # the file is read by offset in the loader thread only, one record at a time
        for (line, _), (record, key, loaded) in ahead(partial(_read, src, settings, digest), lines):
            if isinstance(loaded, Exception):
                unreadable += 1
                entry = {"line": line, "error": f"{record['audio_filepath']}: {loaded}", "key": key}
                pending.add(entry, record, None, 0.0)
                continue
            audio, rate, audio_16k = loaded
            seconds += len(audio) / rate
            measured = measure(meters, record, audio, rate, audio_16k)
            entry = {"line": line, **measured, **text_metrics(record), "key": key}
            pending.add(entry, record, _asr_wave(transcriber, audio, rate, audio_16k), len(audio) / rate)
        pending.flush()
    return {
        "rank": rank.index,
        "device": rank.device,
        "records": len(lines),
        "unreadable": unreadable,
        "audio_seconds": round(seconds, 3),
        "seconds": round(time.perf_counter() - start, 3),
        "dnsmos_provider": meters.dnsmos.provider if meters else None,
    }


def _transcriber(asr: AsrOptions | None, device: str):
    if asr is None:
        return None
    from sharflow.models.asr import Transcriber

    return Transcriber(asr.model, device, random=asr.random)


def _asr_wave(transcriber, audio, rate: int, audio_16k):
    """The record's audio at the ASR model's rate (None without the ASR check)."""
    if transcriber is None:
        return None
    return (
        audio_16k if transcriber.sample_rate == MODEL_RATE else resample(audio, rate, transcriber.sample_rate)
    )


def _transcribe(transcriber, pending: list[tuple[dict, dict, object]]) -> None:
    """Add asr_text, cer and wer to the pending entries that have audio, transcribed as one batch."""
    from sharflow.quality.metrics import DIGITS
    from sharflow.quality.text import asr_fields

    batch = [i for i, (_, _, wave) in enumerate(pending) if wave is not None]
    texts = transcriber.transcribe([pending[i][2] for i in batch])
    for i, text in zip(batch, texts, strict=True):
        entry, record, _ = pending[i]
        entry.update(asr_fields(record, text, DIGITS))
