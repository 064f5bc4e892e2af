"""The prepare stage: a raw manifest in, prepared records + per-reason rejects + stats out.

The corpus is read by the reader of the dataset's form (sharflow.prepare.readers: a NeMo manifest in
JSON lines, gzip or Parquet; lhotse's cuts, or supervisions over recordings; WebDataset tars; Parquet
with the audio inside). Records stream through in chunks; with several workers, chunks
are checked in worker processes and their results consumed in input order, so outputs are
byte-identical for any worker count. Memory is bounded by the chunks in flight plus one small key
per accepted record (duplicates).
"""

import hashlib
import logging
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path

from tqdm import tqdm

from sharflow.core.atomic import atomic_dir, atomic_file, write_json
from sharflow.core.errors import SharflowError
from sharflow.core.ledger import Ledger, RejectWriter, reject_row
from sharflow.core.speakers import parse_speaker
from sharflow.io import storage
from sharflow.prepare.manifest import REASONS, Accepted, CheckSettings, Probed, Refused, Rejected, check_line
from sharflow.prepare.readers import Mapping, Source, open_reader
from sharflow.work.parallel import ordered_map, resolve_workers

log = logging.getLogger(__name__)


def check_chunk(settings: CheckSettings, lines: list[bytes | Probed | Refused]) -> list[Accepted | Rejected]:
    """Check a chunk of raw lines (runs in a worker process); a record its reader refused stays so, and
    one whose audio its reader probed is checked with that header."""
    return [
        check_line(raw, settings)
        if isinstance(raw, bytes)
        else check_line(raw.line, settings, raw)
        if isinstance(raw, Probed)
        else Rejected(raw.reason, raw.detail, raw.duration)
        for raw in lines
    ]


def _checked_lines(chunks, settings: CheckSettings, workers: int) -> Iterator[tuple[bytes, object]]:
    """(raw line, result) in input order; with workers > 1 at most 2×workers chunks in flight."""
    for chunk, results in ordered_map(partial(check_chunk, settings), chunks, workers):
        for raw, result in zip(chunk, results, strict=True):
            yield (
                (raw if isinstance(raw, bytes) else raw.line if isinstance(raw, Probed) else raw.original),
                result,
            )


def _stable_hash(key: tuple) -> int:
    """A 64-bit digest that is the same in every process and run (unlike hash() of a str)."""
    return int.from_bytes(hashlib.blake2b(repr(key).encode(), digest_size=8).digest(), "little")


def prepare_dataset(
    manifest: str,
    *,
    prepared: str,
    rejected_dir: str,
    stats: str,
    dataset: str,
    audio_root: str,
    language: str = "en",
    require_text: bool = True,
    duration_tolerance: float = 0.1,
    duration_from_file: bool = False,
    max_rejected_fraction: float = 1.0,
    form: str = "nemo",
    recordings: str | None = None,
    default_speaker: str | None = None,
    fields: dict | None = None,
    extra_fields: list | None = None,
    workers: int = 1,
) -> dict:
    """Validate and standardize `manifest`; write prepared records, rejects and stats atomically.

    Every input record ends in `prepared` or in `rejected_dir/<reason>.jsonl` (as
    {"line", "reason", "detail", "original"}, "row" instead of "line" for a Parquet manifest,
    "supervision" for a lhotse one, "sample" for WebDataset tars), in input order; stats record
    the counts, so that records_in == records_out + sum(rejected). Raises SharflowError if the audio
    root is missing or more than `max_rejected_fraction` of the lines are rejected. Returns the stats.
    """
    _check_inputs(dataset, manifest if form in ("nemo", "lhotse") else None, audio_root, recordings)
    settings = CheckSettings(
        dataset, audio_root, language, require_text, duration_tolerance, duration_from_file, default_speaker
    )
    workers = resolve_workers(workers)
    source = _source(form, manifest, recordings, settings, fields, extra_fields)
    where = f"{manifest} ({source.format}, audio root {audio_root})"
    log.info("prepare %s: %s with %d worker(s)", dataset, where, workers)
    total, unit = source.size()
    with (
        atomic_file(prepared, "w", encoding="utf-8") as out,
        atomic_dir(rejected_dir) as rej_dir,
        RejectWriter(rej_dir) as rejects,
        tqdm(total=total, unit=unit, unit_scale=True, desc="prepare", mininterval=5) as progress,
    ):
        tally = _Tally(dataset, source.unit, rejects)
        lines = _checked_lines(source.chunks(progress), settings, workers)
        for position, (raw, checked) in enumerate(lines, start=source.first):
            accepted = tally.add(position, raw, checked)
            if accepted is not None:
                out.write(accepted.line + "\n")
        summary = tally.summary(manifest)
        _log_summary(summary, tally.examples)
        tally.warn_about_other_datasets()
        _check_rejected_fraction(summary, tally, max_rejected_fraction)
        write_json(stats, summary)
    return summary


def _source(form: str, manifest: str, recordings, settings: CheckSettings, fields, extra_fields):
    """The reader of the dataset's form (sharflow.prepare.readers): chunks of record lines (and
    records its reader refused)."""
    mapping = Mapping(fields or {}, None if extra_fields is None else tuple(extra_fields))
    required = ("text",) * settings.require_text + ("speaker",) * (settings.default_speaker is None)
    return open_reader(form, Source(manifest, settings.audio_root, recordings, mapping, required))


def _check_inputs(dataset: str, manifest: str | None, audio_root: str, recordings: str | None = None) -> None:
    if storage.is_url(audio_root):
        storage.split_url(audio_root)  # a scheme sharflow reads
        if not storage.bucket_exists(audio_root):
            raise SharflowError(
                f"dataset {dataset!r}: the bucket of audio_root {audio_root!r} does not exist at "
                f"{storage.endpoint()}; fix datasets.{dataset}.audio_root or AWS_ENDPOINT_URL"
            )
    elif not Path(audio_root).is_dir():
        raise SharflowError(
            f"dataset {dataset!r}: audio_root {audio_root!r} is not a folder; "
            f"fix datasets.{dataset}.audio_root in the config"
        )
    for key, path in (("manifest", manifest), ("recordings", recordings)):
        there = path is None or (storage.exists(path) if storage.is_url(path) else Path(path).is_file())
        if not there:
            fix = f"fix datasets.{dataset}.{key} in the config"
            raise SharflowError(f"dataset {dataset!r}: {key} {path!r} is not a file; {fix}")


class _Tally:
    """The stage's ledger over the checked lines, the duplicate check (one 8-byte key per accepted
    record), and what the log reports: an example per reason, speakers naming other datasets."""

    def __init__(self, dataset: str, unit: str, rejects: RejectWriter):
        self.dataset = dataset
        self.unit = unit  # what a record is called in messages: "line" (JSON lines) or "row" (Parquet)
        self.ledger = Ledger("prepare", dataset, rejects)
        self.examples: dict[str, str] = {}
        self.seen: dict[int, int] = {}  # hash of duplicate key -> first line (row) number
        self.other_datasets: Counter[str] = Counter()  # speakers' Dataset: names that are not `dataset`
        self.other_example = ""
        self.durations_from_file = 0  # accepted whole-file records given the file's exact length

    @property
    def counts(self) -> Counter:
        return self.ledger.rejected

    def add(self, position: int, raw: bytes, result: Accepted | Rejected) -> Accepted | None:
        """Count a checked record (an accepted record seen before becomes a duplicate reject) and write
        a reject's row; the accepted record, or None."""
        if isinstance(result, Accepted):
            first = self.seen.setdefault(_stable_hash(result.key), position)
            if first != position:
                detail = f"same audio_filepath, offset and duration as {self.unit} {first}"
                result = Rejected("duplicate", detail, result.duration)
        if isinstance(result, Rejected):
            original = raw.decode("utf-8", errors="replace")
            row = reject_row(result.reason, result.detail, original, **{self.unit: position})
            self.ledger.reject(result.reason, result.duration or 0.0, row)
            self.examples.setdefault(result.reason, f"{self.unit} {position}: {result.detail}")
            return None
        self.ledger.keep(result.duration)
        self.durations_from_file += result.from_file
        named = parse_speaker(result.speaker).dataset
        if named != self.dataset:
            self.other_datasets[named] += 1
            self.other_example = self.other_example or f"{self.unit} {position}: speaker {result.speaker!r}"
        return result

    def summary(self, manifest: str) -> dict:
        self.ledger.check(fix="this is a bug in sharflow's prepare stage")
        return {
            "dataset": self.dataset,
            "manifest": manifest,
            **self.ledger.counts(),
            **self.ledger.hours(),
            "durations_from_file": self.durations_from_file,
            "speakers_naming_other_datasets": dict(sorted(self.other_datasets.items())),
        }

    def warn_about_other_datasets(self) -> None:
        if not self.other_datasets:
            return
        log.warning(
            "prepare %s: %d prepared record(s) have speakers naming another dataset (%s), e.g. %s. NeMo "
            "takes the dataset name from the speaker string, so these train as those datasets; "
            "rewrite the speakers as plain ids to have them named %r.",
            self.dataset,
            sum(self.other_datasets.values()),
            ", ".join(f"{k}: {v}" for k, v in sorted(self.other_datasets.items())),
            self.other_example,
            self.dataset,
        )


def _check_rejected_fraction(summary: dict, tally: _Tally, max_rejected_fraction: float) -> None:
    fraction = summary["rejected_total"] / max(summary["records_in"], 1)
    if fraction > max_rejected_fraction:
        common = tally.counts.most_common(1)[0][0]
        raise SharflowError(
            f"dataset {summary['dataset']!r}: {summary['rejected_total']} of {summary['records_in']} "
            f"records of {summary['manifest']} rejected ({fraction:.0%} > prepare.max_rejected_fraction = "
            f"{max_rejected_fraction}). Most common: {common} ({tally.examples[common]}). "
            "Check the manifest and datasets.<name>.audio_root, or raise the limit."
        )


def _log_summary(summary: dict, examples: dict[str, str]) -> None:
    log.info(
        "prepare %s: %d records in (%.3f h), %d prepared (%.3f h), %d rejected",
        summary["dataset"],
        summary["records_in"],
        summary["hours_in"],
        summary["records_out"],
        summary["hours_out"],
        summary["rejected_total"],
    )
    for reason, n in summary["rejected"].items():
        log.info("  %-18s %7d  %s; first: %s", reason, n, REASONS[reason], examples[reason])
