"""The context stage's merge: the parts into with_context.jsonl, rejects by reason, and stats.

A k-way merge of the parts by (group key, input line) gives with_context.jsonl (grouped by
speaker); the stats prove records in = out + rejected.
"""

import json
import logging
from collections import Counter

import numpy as np

from sharflow.context.keyed_lines import merge_sorted
from sharflow.context.part import HIST_EDGES, REASONS
from sharflow.core.atomic import atomic_dir, atomic_file, read_json, write_json
from sharflow.core.errors import SharflowError
from sharflow.core.ledger import RejectWriter

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
    kept, seconds_out = _merge_records(part_records, with_context)
    counts = _merge_rejects(part_rejected, rejected_dir)
    rejected_total = sum(counts.values())
    if kept + rejected_total != records_in:
        raise SharflowError(
            f"context {dataset}: {records_in} records in but {kept} kept + {rejected_total} rejected; "
            "the parts are out of date: rerun with --forcerun context_plan"
        )
    hist = np.sum([r["similarity_hist"] for p in parts for r in p["ranks"]], axis=0).tolist() if parts else []
    summary = {
        "dataset": dataset,
        "records_in": records_in,
        "records_out": kept,
        "rejected_total": rejected_total,
        "rejected": dict(sorted(counts.items())),
        "hours_out": round(seconds_out / 3600, 6),
        "similarity_histogram": {"edges": HIST_EDGES.tolist(), "counts": hist},
        "parts": [_part_summary(p) for p in parts],
    }
    write_json(stats, summary)
    log.info(
        "context %s: %d records in, %d with context (%.3f h), %d rejected %s",
        dataset,
        records_in,
        kept,
        summary["hours_out"],
        rejected_total,
        dict(counts),
    )
    for reason, n in sorted(counts.items()):
        log.info("  %-28s %7d  %s", reason, n, REASONS[reason])
    return summary


def _merge_records(part_records: list[str], with_context: str) -> tuple[int, float]:
    """The parts' records, merged by (group, line), into with_context.jsonl; (records, seconds)."""
    kept, seconds = 0, 0.0
    with atomic_file(with_context, "w", encoding="utf-8") as out:
        for text in merge_sorted(part_records):
            record = json.loads(text)["record"]
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            kept += 1
            seconds += record["duration"]
    return kept, seconds


def _merge_rejects(part_rejected: list[str], rejected_dir: str) -> Counter:
    """The parts' rejects, merged by (group, line), into rejected_dir/<reason>.jsonl; counts by reason."""
    counts: Counter[str] = Counter()
    with atomic_dir(rejected_dir) as rej_dir, RejectWriter(rej_dir) as rejects:
        for text in merge_sorted(part_rejected):
            item = json.loads(text)
            counts[item["reason"]] += 1
            rejects.write(
                item["reason"],
                {
                    "line": item["line"],
                    "reason": item["reason"],
                    "detail": item["detail"],
                    "original": json.dumps(item["record"], ensure_ascii=False),
                },
            )
    return counts


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
