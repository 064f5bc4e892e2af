"""The prepare stage: a raw manifest in, prepared records + per-reason rejects + stats out.

Lines stream through in chunks; with several workers, chunks are checked in worker processes
and their results consumed in input order, so outputs are byte-identical for any worker count.
Memory is bounded by the chunks in flight plus one small key per accepted record (duplicates).
"""

import hashlib
import json
import logging
import os
from collections import Counter
from functools import partial
from pathlib import Path
from typing import IO, Iterator

from tqdm import tqdm

from sharflow.atomic import atomic_dir, atomic_file
from sharflow.errors import SharflowError
from sharflow.manifest import REASONS, Accepted, CheckSettings, Rejected, check_line
from sharflow.parallel import ordered_map, resolve_workers
from sharflow.rejects import RejectWriter
from sharflow.speakers import parse_speaker

log = logging.getLogger(__name__)

CHUNK_LINES = 2048


def check_chunk(settings: CheckSettings, lines: list[bytes]) -> list[Accepted | Rejected]:
    """Check a chunk of raw lines (runs in a worker process)."""
    return [check_line(raw, settings) for raw in lines]


def _read_chunks(f: IO[bytes], progress: tqdm) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for raw in f:
        progress.update(len(raw))
        chunk.append(raw.rstrip(b"\r\n"))
        if len(chunk) == CHUNK_LINES:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _checked_lines(chunks, settings: CheckSettings, workers: int) -> Iterator[tuple[bytes, object]]:
    """(raw line, result) in input order; with workers > 1 at most 2×workers chunks in flight."""
    for chunk, results in ordered_map(partial(check_chunk, settings), chunks, workers):
        yield from zip(chunk, results)


def _stable_hash(key: tuple) -> int:
    """A 64-bit digest that is the same in every process and run (unlike hash() of a str)."""
    return int.from_bytes(hashlib.blake2b(repr(key).encode(), digest_size=8).digest(), "little")


def prepare_dataset(
    manifest: str,
    prepared: str,
    rejected_dir: str,
    stats: str,
    *,
    dataset: str,
    audio_root: str,
    language: str = "en",
    require_text: bool = True,
    duration_tolerance: float = 0.1,
    max_rejected_fraction: float = 1.0,
    workers: int = 1,
) -> dict:
    """Validate and standardize `manifest`; write prepared records, rejects and stats atomically.

    Every input line ends in `prepared` or in `rejected_dir/<reason>.jsonl` (as
    {"line", "reason", "detail", "original"}), in input order; stats record the counts, so that
    records_in == records_out + sum(rejected). Raises SharflowError if the audio root is missing
    or more than `max_rejected_fraction` of the lines are rejected. Returns the stats.
    """
    if not Path(audio_root).is_dir():
        raise SharflowError(
            f"dataset {dataset!r}: audio_root {audio_root!r} is not a folder; "
            f"fix datasets.{dataset}.audio_root in the config"
        )
    settings = CheckSettings(dataset, audio_root, language, require_text, duration_tolerance)
    workers = resolve_workers(workers)
    log.info("prepare %s: %s (audio root %s) with %d worker(s)", dataset, manifest, audio_root, workers)

    counts: Counter[str] = Counter()
    examples: dict[str, str] = {}
    seconds_in = seconds_out = 0.0
    records_in = records_out = 0
    seen: dict[int, int] = {}  # hash of duplicate key -> first line number
    other_datasets: Counter[str] = Counter()  # speakers' Dataset: names that are not `dataset`
    other_example = ""

    with (
        open(manifest, "rb") as src,
        atomic_file(prepared, "w", encoding="utf-8") as out,
        atomic_dir(rejected_dir) as rej_dir,
        RejectWriter(rej_dir) as rejects,
        tqdm(total=os.path.getsize(manifest), unit="B", unit_scale=True, desc="prepare",
             mininterval=5, file=None) as progress,
    ):
        for line_no, (raw, result) in enumerate(
            _checked_lines(_read_chunks(src, progress), settings, workers), start=1
        ):
            records_in += 1
            if isinstance(result, Accepted):
                first = seen.setdefault(_stable_hash(result.key), line_no)
                if first != line_no:
                    result = Rejected(
                        "duplicate", f"same audio_filepath, offset and duration as line {first}",
                        result.duration,
                    )
            if result.duration is not None:
                seconds_in += result.duration
            if isinstance(result, Accepted):
                out.write(result.line + "\n")
                records_out += 1
                seconds_out += result.duration
                named = parse_speaker(result.speaker).dataset
                if named != dataset:
                    other_datasets[named] += 1
                    other_example = other_example or f"line {line_no}: speaker {result.speaker!r}"
                continue
            counts[result.reason] += 1
            examples.setdefault(result.reason, f"line {line_no}: {result.detail}")
            rejects.write(result.reason, {
                "line": line_no,
                "reason": result.reason,
                "detail": result.detail,
                "original": raw.decode("utf-8", errors="replace"),
            })

        summary = {
            "dataset": dataset,
            "manifest": manifest,
            "records_in": records_in,
            "records_out": records_out,
            "rejected_total": sum(counts.values()),
            "rejected": dict(sorted(counts.items())),
            "hours_in": round(seconds_in / 3600, 6),
            "hours_out": round(seconds_out / 3600, 6),
            "speakers_naming_other_datasets": dict(sorted(other_datasets.items())),
        }
        assert summary["records_in"] == summary["records_out"] + summary["rejected_total"]
        _log_summary(summary, examples)
        if other_datasets:
            log.warning(
                "prepare %s: %d prepared record(s) have speakers naming another dataset (%s), e.g. %s. NeMo "
                "takes the dataset name from the speaker string, so these train as those datasets; rewrite the "
                "speakers as plain ids to have them named %r.", dataset, sum(other_datasets.values()),
                ", ".join(f"{k}: {v}" for k, v in sorted(other_datasets.items())), other_example, dataset)
        fraction = summary["rejected_total"] / max(records_in, 1)
        if fraction > max_rejected_fraction:
            raise SharflowError(
                f"dataset {dataset!r}: {summary['rejected_total']} of {records_in} records of {manifest} "
                f"rejected ({fraction:.0%} > prepare.max_rejected_fraction = {max_rejected_fraction}). "
                f"Most common: {counts.most_common(1)[0][0]} ({examples[counts.most_common(1)[0][0]]}). "
                "Check the manifest and datasets.<name>.audio_root, or raise the limit."
            )
        with atomic_file(stats, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=2)
            f.write("\n")
    return summary


def _log_summary(summary: dict, examples: dict[str, str]) -> None:
    log.info(
        "prepare %s: %d records in (%.3f h), %d prepared (%.3f h), %d rejected",
        summary["dataset"], summary["records_in"], summary["hours_in"],
        summary["records_out"], summary["hours_out"], summary["rejected_total"],
    )
    for reason, n in summary["rejected"].items():
        log.info("  %-18s %7d  %s; first: %s", reason, n, REASONS[reason], examples[reason])
