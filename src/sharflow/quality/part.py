"""The quality stage's measuring jobs: metrics of every prepared record, cached per part.

Each part takes a contiguous run of prepared lines holding an equal share of the audio seconds
(decided from the prepared file alone, so no plan job is needed); inside a part, records are
bin-packed onto ranks by seconds (sharflow.core.balance, sharflow.core.ranks). Each rank decodes a record
one ahead of measuring it (sharflow.quality.metrics) and writes one line per record, in line order;
a record whose audio cannot be decoded gets an `error` instead of metrics (the filter rejects it).
With the ASR check (quality.asr), a rank also transcribes its records in batches of about
`batch_seconds` of audio (sharflow.models.asr) and adds asr_text, cer and wer. Metrics depend only on the
record, so any number of parts and ranks gives the same bytes.
"""

import heapq
import json
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from sharflow.context.plan import numbered_lines
from sharflow.core.atomic import atomic_file, read_json, write_json
from sharflow.core.audio import load_segment, resample, resolve_audio_path
from sharflow.core.balance import loads, lpt_assign
from sharflow.core.errors import SharflowError
from sharflow.core.parallel import ahead, resolve_workers
from sharflow.core.ranks import job_devices, run_ranks
from sharflow.quality.metrics import MODEL_RATE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AsrOptions:
    """The optional ASR check (quality.asr): a NeMo ASR model and the audio seconds per batch."""

    model: str
    batch_seconds: float = 60.0
    random: bool = False  # built by the workflow from random_from_config: say so loudly


def part_of(start_seconds: float, total_seconds: float, parts: int) -> int:
    """The part of a record whose audio starts `start_seconds` into the file's total."""
    if total_seconds <= 0:
        return 0
    return min(parts - 1, int(parts * start_seconds / total_seconds))


def part_records(prepared: str, part: int, parts: int) -> list[tuple[int, int, float]]:
    """(line, byte offset, duration) of the records of one part, in line order."""
    total = sum(json.loads(raw)["duration"] for _, _, raw in numbered_lines(prepared))
    mine, start = [], 0.0
    for line, offset, raw in numbered_lines(prepared):
        duration = json.loads(raw)["duration"]
        if part_of(start, total, parts) == part:
            mine.append((line, offset, duration))
        start += duration
    return mine


def run_quality_part(
    part: int,
    *,
    prepared: str,
    parts: int,
    audio_root: str,
    out_metrics: str,
    out_stats: str,
    device: str = "auto",
    workers: int = 1,
    gpus: int = 0,
    dnsmos_max_windows: int = 0,
    asr: AsrOptions | None = None,
) -> dict:
    """Measure the records of one part on as many ranks as devices/workers allow."""
    records = part_records(prepared, part, parts)
    devices = job_devices(device, resolve_workers(workers), gpus, f"quality part {part}")
    costs = {line: duration for line, _, duration in records}
    offsets = {line: offset for line, offset, _ in records}
    rank_lines = lpt_assign(costs, len(devices))
    log.info("quality part %d of %d: %d records on ranks %s", part, parts, len(records), devices)
    out_dir = Path(out_metrics).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".ranks.", dir=out_dir) as tmp:
        args = [
            (
                prepared,
                [(ln, offsets[ln]) for ln in lines],
                audio_root,
                f"{tmp}/r{r}.jsonl",
                dnsmos_max_windows,
                asr,
            )
            for r, lines in enumerate(rank_lines)
        ]
        rank_stats = run_ranks(measure_records, devices, args)
        with atomic_file(out_metrics, "w", encoding="utf-8") as out:
            out.writelines(merge_by_line([a[3] for a in args]))
    for r, s in enumerate(rank_stats):
        s["planned_seconds"] = round(loads([rank_lines[r]], costs)[0], 3)
    stats = {
        "part": part,
        "parts": parts,
        "records": len(records),
        "unreadable": sum(s["unreadable"] for s in rank_stats),
        "audio_seconds": round(sum(s["audio_seconds"] for s in rank_stats), 3),
        "seconds": max((s["seconds"] for s in rank_stats), default=0.0),
        "asr_model": asr.model if asr else None,
        "ranks": rank_stats,
    }
    write_json(out_stats, stats)
    return stats


def merge_by_line(paths: list[str]):
    """The lines of files each sorted by their "line" field, merged in that order."""
    files = [open(p, encoding="utf-8") for p in paths]  # noqa: SIM115 (closed below)
    try:
        yield from heapq.merge(*files, key=lambda text: json.loads(text)["line"])
    finally:
        for f in files:
            f.close()


# ---- one rank -----------------------------------------------------------------------------------


def _load(audio_root: str, record: dict):
    """(audio at the source rate, its rate, audio at 16 kHz), or the exception that stopped decoding."""
    try:
        path, _ = resolve_audio_path(audio_root, record["audio_filepath"])
        rate = record["source_audio"]["sampling_rate"]
        audio = load_segment(path, record["offset"], record["duration"])
        return audio, rate, resample(audio, rate, MODEL_RATE)
    except Exception as e:  # reported per record; the part goes on without it
        return e


def measure_records(
    rank: int,
    device: str,
    prepared: str,
    lines: list[tuple[int, int]],
    audio_root: str,
    out_path: str,
    dnsmos_max_windows: int = 0,
    asr: AsrOptions | None = None,
) -> dict:
    """One rank: measure its records (line, byte offset); write {"line", metrics... | error} in line order.

    With `asr`, records wait in line order until about `asr.batch_seconds` of audio is pending, then
    are transcribed as one batch and written with asr_text, cer and wer.
    """
    from sharflow.quality.metrics import Meters, measure

    start = time.perf_counter()
    meters = Meters.load(device, dnsmos_max_windows) if lines else None
    transcriber = None
    if asr and lines:
        from sharflow.models.asr import Transcriber

        transcriber = Transcriber(asr.model, device, random=asr.random)
    unreadable, seconds = 0, 0.0
    pending: list[tuple[dict, dict, object]] = []  # (entry, record, audio for ASR or None), line order
    with (
        open(prepared, "rb") as src,
        open(out_path, "w", encoding="utf-8") as out,
        tqdm(total=len(lines), desc=f"quality rank {rank} ({device})", unit="utt", mininterval=5) as progress,
    ):

        def read(item):
            src.seek(item[1])
            record = json.loads(src.readline())
            return record, _load(audio_root, record)

        def flush():
            if transcriber:
                _transcribe(transcriber, pending)
            for entry, _, _ in pending:
                out.write(json.dumps(entry) + "\n")
            progress.update(len(pending))
            pending.clear()

        # reading the file by offset happens in the loader thread only, one record at a time
        pending_seconds = 0.0
        for (line, _), (record, loaded) in ahead(read, lines):
            if isinstance(loaded, Exception):
                unreadable += 1
                pending.append(
                    ({"line": line, "error": f"{record['audio_filepath']}: {loaded}"}, record, None)
                )
            else:
                audio, rate, audio_16k = loaded
                seconds += len(audio) / rate
                pending_seconds += len(audio) / rate
                entry = {"line": line, **measure(meters, record, audio, rate, audio_16k)}
                wave = None
                if transcriber:
                    rate_asr = transcriber.sample_rate
                    wave = audio_16k if rate_asr == MODEL_RATE else resample(audio, rate, rate_asr)
                pending.append((entry, record, wave))
            if not transcriber or pending_seconds >= asr.batch_seconds:
                flush()
                pending_seconds = 0.0
        flush()
    return {
        "rank": rank,
        "device": device,
        "records": len(lines),
        "unreadable": unreadable,
        "audio_seconds": round(seconds, 3),
        "seconds": round(time.perf_counter() - start, 3),
        "dnsmos_provider": meters.dnsmos.provider if meters else None,
    }


def _transcribe(transcriber, pending: list[tuple[dict, dict, object]]) -> None:
    """Add asr_text, cer and wer to the pending entries that have audio, transcribed as one batch."""
    from sharflow.models.asr import asr_fields
    from sharflow.quality.metrics import DIGITS

    batch = [i for i, (_, _, wave) in enumerate(pending) if wave is not None]
    texts = transcriber.transcribe([pending[i][2] for i in batch])
    for i, text in zip(batch, texts, strict=True):
        entry, record, _ = pending[i]
        entry.update(asr_fields(record, text, DIGITS))


# ---- merge --------------------------------------------------------------------------------------


def merge_quality(
    *, part_metrics: list[str], part_stats: list[str], prepare_stats: str, metrics: str, stats: str
):
    """The parts' metrics, in prepared line order, into one file; checks every record is measured once."""
    expected = read_json(prepare_stats)["records_out"]
    line = 0
    with atomic_file(metrics, "w", encoding="utf-8") as out:
        for path in part_metrics:
            with open(path, encoding="utf-8") as f:
                for text in f:
                    line += 1
                    if json.loads(text)["line"] != line:
                        raise SharflowError(
                            f"{path}: expected prepared line {line}, found {text[:60]!r}; the quality parts "
                            "are out of date: rerun with --forcerun quality_part"
                        )
                    out.write(text)
    if line != expected:
        raise SharflowError(
            f"the quality parts hold {line} records but prepare kept {expected}: "
            "rerun with --forcerun quality_part"
        )
    parts = [read_json(p) for p in part_stats]
    summary = {
        "records": line,
        "unreadable": sum(p["unreadable"] for p in parts),
        "audio_seconds": round(sum(p["audio_seconds"] for p in parts), 3),
        "asr_model": parts[0].get("asr_model") if parts else None,
        "parts": [{k: p[k] for k in ("part", "records", "audio_seconds", "seconds", "ranks")} for p in parts],
    }
    write_json(stats, summary)
    log.info(
        "quality: %d records measured (%d unreadable), %.1f s of audio",
        line,
        summary["unreadable"],
        summary["audio_seconds"],
    )
    return summary
