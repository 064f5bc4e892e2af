"""The context stage's merge: the parts into with_context.jsonl, rejects by reason, and stats.

A k-way merge of the parts by (group key, input line) gives with_context.jsonl (grouped by
speaker); the stats prove records in = out + rejected.
"""

import json
import logging

import numpy as np

from sharflow.context.keyed_lines import merge_sorted
from sharflow.context.part import HIST_EDGES, REASONS
from sharflow.core.atomic import atomic_dir, atomic_file, read_json, write_json
from sharflow.core.ledger import Ledger, RejectWriter, reject_row
from sharflow.core.splits import SPLITS

log = logging.getLogger(__name__)


def merge_context(
    *,
    part_records: list[str],
    part_rejected: list[str],
    part_stats: list[str],
    records_stats: str,
    with_context: str,
    rejected_dir: str,
    stats: str,
    dataset: str,
) -> dict:
    """Merge the parts into with_context.jsonl + rejected/<reason>.jsonl + stats.json, checking accounting."""
    records_in = read_json(records_stats)["records_out"]  # what quality (or prepare) kept
    parts = [read_json(p) for p in part_stats]
    by_split: dict[str, Ledger] = {}
    with atomic_dir(rejected_dir) as rej_dir, RejectWriter(rej_dir) as rejects:
        ledger = Ledger("context", dataset, rejects)
        _merge_records(part_records, with_context, ledger, by_split)
        _merge_rejects(part_rejected, ledger, by_split)
        ledger.check(records_in, fix="the parts are out of date: rerun with --forcerun context_plan")
    hist = np.sum([r["similarity_hist"] for p in parts for r in p["ranks"]], axis=0).tolist() if parts else []
    summary = {
        "dataset": dataset,
        **ledger.counts(),
        "hours_out": ledger.hours()["hours_out"],
        "similarity_histogram": {"edges": HIST_EDGES.tolist(), "counts": hist},
        **({"splits": {s: _split_counts(by_split[s]) for s in SPLITS if s in by_split}} if by_split else {}),
        "parts": [_part_summary(p) for p in parts],
    }
    write_json(stats, summary)
    log.info(
        "context %s: %d records in, %d with context (%.3f h), %d rejected %s",
        dataset,
        records_in,
        ledger.records_out,
        summary["hours_out"],
        ledger.rejected_total,
        dict(ledger.rejected),
    )
    for reason, n in sorted(ledger.rejected.items()):
        log.info("  %-28s %7d  %s", reason, n, REASONS[reason])
    return summary


def _split_counts(ledger: Ledger) -> dict:
    return {**ledger.counts(), "hours_out": ledger.hours()["hours_out"]}


def _split_ledger(by_split: dict[str, Ledger], record: dict, dataset: str) -> Ledger | None:
    """The ledger of a record's split (records carry one with splits configured), else None."""
    split = record.get("split")
    if split is None:
        return None
    return by_split.setdefault(split, Ledger(f"context {split}", dataset))


def _merge_records(part_records: list[str], with_context: str, ledger: Ledger, by_split: dict) -> None:
    """The parts' records, merged by (group, line), into with_context.jsonl."""
    with atomic_file(with_context, "w", encoding="utf-8") as out:
        for text in merge_sorted(part_records):
            record = json.loads(text)["record"]
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            ledger.keep(record["duration"])
            if split := _split_ledger(by_split, record, ledger.dataset):
                split.keep(record["duration"])


def _merge_rejects(part_rejected: list[str], ledger: Ledger, by_split: dict) -> None:
    """The parts' rejects, merged by (group, line), into the ledger's reject files."""
    for text in merge_sorted(part_rejected):
        item = json.loads(text)
        row = reject_row(item["reason"], item["detail"], item["record"], line=item["line"])
        ledger.reject(item["reason"], row=row)
        if isinstance(item["record"], dict) and (
            split := _split_ledger(by_split, item["record"], ledger.dataset)
        ):
            split.reject(item["reason"])


_RANK_KEYS = (
    "rank",
    "device",
    "groups",
    "records_in",
    "planned_cost",
    "seconds",
    "audio_seconds",
    "widened_rows",
)


def _part_summary(part: dict) -> dict:
    return {
        "part": part["part"],
        "groups": part["groups"],
        "records": part["records_in"],
        "planned_cost": part["planned_cost"],
        "seconds": part["seconds"],
        "ranks": [{k: r[k] for k in _RANK_KEYS} for r in part["ranks"]],
    }
