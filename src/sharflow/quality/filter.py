"""The quality stage's filter: apply the thresholds to the measured metrics (cheap; reruns alone).

Reads the text stage's records and metrics.jsonl in step (one metrics line per record) and writes
every record with its metrics added. A threshold `{min: x}` keeps values >= x, `{max: y}` values <=
y (the threshold value itself passes); a metric that could not be measured (null) fails any
threshold on it, except one whose null passes (tokenizer_dropped_chars: a tokenizer that cannot be
built here). With action `drop`, a failing record is rejected with reason `quality_<metric>` (its
first failing filter in config order; the detail names every failure); with `mark`, it is kept with
`validation_status: fail` (others get `pass`), which NeMo's dataloader filters on, and the context
stage never picks it as anyone's context. A record whose audio could not be decoded is rejected as
`unreadable_audio`. A manifest's own value of a measured field is kept as `manifest_<field>`, never
overwritten silently.
"""

import json
import logging
from collections import Counter
from itertools import zip_longest

from sharflow.core.atomic import atomic_dir, atomic_file, read_json, write_json
from sharflow.core.errors import SharflowError
from sharflow.core.ledger import Ledger, RejectWriter, reject_row
from sharflow.core.metrics import FILTERABLE, MEASURED, NULL_PASSES
from sharflow.quality.text import ASR_FIELDS

log = logging.getLogger(__name__)

ACTIONS = ("drop", "mark")
REASONS: dict[str, str] = {
    "unreadable_audio": "the audio span could not be decoded (its header passed in prepare)",
    **{f"quality_{m}": f"{m} outside the threshold in quality.filters" for m in FILTERABLE},
}


def failures(metrics: dict, filters: dict) -> list[tuple[str, str]]:
    """(metric, detail) of every filter a record's metrics fail, in the filters' order."""
    out = []
    for metric, bounds in filters.items():
        value = metrics.get(metric)
        if value is None and metric in NULL_PASSES:
            continue
        if value is None:
            out.append((metric, f"{metric} not measurable (null); thresholds {bounds}"))
            continue
        if "min" in bounds and value < bounds["min"]:
            out.append((metric, f"{metric} {value} < min {bounds['min']}"))
        if "max" in bounds and value > bounds["max"]:
            out.append((metric, f"{metric} {value} > max {bounds['max']}"))
    return out


def check_filters(filters: dict) -> None:
    """Refuse a filter on an unknown metric or without bounds, naming what to write instead."""
    for metric, bounds in filters.items():
        if metric not in FILTERABLE:
            raise SharflowError(f"quality.filters: unknown metric {metric!r}; known: {', '.join(FILTERABLE)}")
        if not bounds or set(bounds) - {"min", "max"}:
            raise SharflowError(
                f"quality.filters.{metric}: give {{min: x}}, {{max: y}} or both, got {bounds!r}"
            )


def _check_measured(filters: dict, measured: dict, path: str) -> None:
    """Refuse a filter on a metric the quality parts did not measure (cer/wer without quality.asr)."""
    for metric in filters:
        if metric not in measured:
            raise SharflowError(
                f"quality.filters.{metric}: {path} holds no {metric}; the ASR check measures cer and wer: "
                "set quality.asr.model (or random_from_config), or remove the filter"
            )


def in_step(records: str, metrics: str):
    """(line, raw record line, its metrics) of every record, the two files read in step.

    Refuses files out of step (a metrics file left from other records) naming the line.
    """
    with open(records, encoding="utf-8") as lines, open(metrics, encoding="utf-8") as measured:
        for line, (raw, mline) in enumerate(zip_longest(lines, measured), start=1):
            m = None if mline is None else json.loads(mline)
            if raw is None or m is None or m["line"] != line:
                raise SharflowError(
                    f"{metrics} does not match {records} at line {line}: rerun with --forcerun quality_part"
                )
            yield line, raw, m


def with_metrics(record: dict, metrics: dict) -> dict:
    """The record with its measured metrics; a manifest's own value of one moves to manifest_<name>.

    The ASR fields (asr_text, cer, wer) are added, and a manifest's own moved, only when the ASR
    check ran: without it a manifest's `cer` stays where NeMo's max_cer reads it.
    """
    out = dict(record)
    for name in (*MEASURED, *(f for f in ASR_FIELDS if f in metrics)):
        if name in record:
            out[f"manifest_{name}"] = record[name]
        out[name] = metrics[name]
    return out


def filter_quality(
    *,
    records: str,
    metrics: str,
    records_stats: str,
    kept: str,
    rejected_dir: str,
    stats: str,
    filters: dict,
    action: str,
    dataset: str,
) -> dict:
    """Apply the thresholds; write kept.jsonl, rejected/<reason>.jsonl, stats.json (in = out + rejected)."""
    check_filters(filters)
    if action not in ACTIONS:
        raise SharflowError(f"quality.action must be one of {ACTIONS}, got {action!r}")
    records_in = read_json(records_stats)["records_out"]
    failing: Counter = Counter()
    marked = 0
    with (
        atomic_file(kept, "w", encoding="utf-8") as out,
        atomic_dir(rejected_dir) as rej_dir,
        RejectWriter(rej_dir) as rejects,
    ):
        ledger = Ledger("quality", dataset, rejects)
        for line, raw, m in in_step(records, metrics):
            record, fails, reason, detail = _judge(json.loads(raw), m, filters, action, metrics)
            failing.update(metric for metric, _ in fails)
            if reason:
                ledger.reject(
                    reason, record["duration"], reject_row(reason, detail, raw.rstrip("\n"), line=line)
                )
                continue
            if action == "mark":
                record["validation_status"] = "fail" if fails else "pass"
                marked += bool(fails)
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            ledger.keep(record["duration"])
        ledger.check(records_in, fix="rerun with --forcerun quality_part")  # else nothing is written
    summary = {
        "dataset": dataset,
        "action": action,
        "filters": filters,
        **ledger.counts(),
        "marked_fail": marked,
        "failing_by_metric": dict(sorted(failing.items())),
        **ledger.hours(),
    }
    write_json(stats, summary)
    log.info(
        "quality %s (%s): %d records in, %d kept (%d marked fail), %d rejected %s",
        dataset,
        action,
        ledger.records_in,
        ledger.records_out,
        marked,
        ledger.rejected_total,
        dict(ledger.rejected),
    )
    return summary


def _judge(record: dict, m: dict, filters: dict, action: str, metrics: str):
    """(record with its metrics, failed filters, reject reason or None, detail) of one record."""
    if "error" in m:
        return record, [], "unreadable_audio", m["error"]
    _check_measured(filters, m, metrics)
    fails = failures(m, filters)
    reason = f"quality_{fails[0][0]}" if fails and action == "drop" else None
    return with_metrics(record, m), fails, reason, "; ".join(d for _, d in fails)
