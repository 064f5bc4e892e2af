"""The shar stage's merge: per-shard stats and rejects summed per dataset, records in = cuts + rejected.

Imports neither lhotse nor torch: the merge job starts in a blink.
"""

import json
import logging

from sharflow.core.atomic import atomic_dir, read_json, write_json
from sharflow.core.layout import rejected_beside
from sharflow.core.ledger import Ledger, RejectWriter, totals

log = logging.getLogger(__name__)


FIGURES = (
    "target_seconds",
    "context_seconds",
    "clipped_samples",
    "clipped_cuts",
    "padded_cuts",
    "copied_spans",
    "encoded_spans",
)


def merge_shar_stats(
    shard_stats: list[str], *, context_stats: str, plan: str, stats: str, rejected_dir: str, dataset: str
) -> dict:
    """Sum the shards' stats, gather their rejects by reason, and check records in = cuts + rejected
    (records in: the context stage's records out, less those the plan holds out for other splits,
    plus the leaks the plan kept in shards made before: sharflow.shar.plan).

    Each shard's rejects are read from beside its stats (rejected_beside): listing them as
    inputs too would double the merge job's inputs, which Snakemake pays for per file.
    """
    planned = read_json(plan)
    held_out = planned.get("held_out")  # with splits: the held-out splits' records
    leaks = planned.get("leaks", [])  # records now held out, kept in shards made before
    records_in = read_json(context_stats)["records_out"] - sum((held_out or {}).values()) + len(leaks)
    shards = [read_json(path) for path in shard_stats]
    ledger = Ledger("shar", dataset)
    for s in shards:
        ledger.absorb(s["cuts"], s["rejected"])
    ledger.check(records_in, fix="shards are out of date: rerun with --forcerun shar_plan")
    _gather_rejects(shard_stats, rejected_dir)
    figures = totals(shards, FIGURES)
    summary = {
        "dataset": dataset,
        **ledger.counts(out="cuts"),
        "shards": len(shards),
        **({"held_out": held_out} if held_out is not None else {}),
        **({"leaks": len(leaks)} if leaks else {}),
        "hours": round(figures["target_seconds"] / 3600, 6),
        "context_hours": round(figures["context_seconds"] / 3600, 6),
        **{k: figures[k] for k in FIGURES[2:]},
        "bytes": dict(totals([s["bytes"] for s in shards], sorted({f for s in shards for f in s["bytes"]}))),
        "shard_seconds": [s["seconds"] for s in shards],
    }
    write_json(stats, summary)
    log.info(
        "shar %s: %d cuts in %d shards (%.3f h), %d rejected %s; audio spans: %d copied through, %d encoded",
        dataset,
        summary["cuts"],
        len(shards),
        summary["hours"],
        summary["rejected_total"],
        dict(ledger.rejected),
        summary["copied_spans"],
        summary["encoded_spans"],
    )
    return summary


def _gather_rejects(shard_stats: list[str], rejected_dir: str) -> None:
    """Every shard's reject rows (beside its stats) into rejected_dir/<reason>.jsonl, in shard order."""
    with atomic_dir(rejected_dir) as out_dir, RejectWriter(out_dir) as rejects:
        for path in map(rejected_beside, shard_stats):
            with open(path, encoding="utf-8") as f:
                for text in f:
                    rejects.write(json.loads(text)["reason"], text)
