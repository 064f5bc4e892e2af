"""The shar stage's merge: per-shard stats and rejects summed per dataset, records in = cuts + rejected.

Imports neither lhotse nor torch: the merge job starts in a blink.
"""

import json
import logging
from collections import Counter

from sharflow.core.atomic import atomic_dir, read_json, write_json
from sharflow.core.errors import SharflowError
from sharflow.core.layout import rejected_beside
from sharflow.core.ledger import RejectWriter

log = logging.getLogger(__name__)


def merge_shar_stats(
    shard_stats: list[str], *, context_stats: str, stats: str, rejected_dir: str, dataset: str
) -> dict:
    """Sum the shards' stats, gather their rejects by reason, and check records in = cuts + rejected.

    Each shard's rejects are read from beside its stats (rejected_beside): listing them as
    inputs too would double the merge job's inputs, which Snakemake pays for per file.
    """
    records_in = read_json(context_stats)["records_out"]
    totals: Counter = Counter()
    rejected: Counter = Counter()
    shards = []
    for path in shard_stats:
        s = read_json(path)
        shards.append(s)
        rejected.update(s["rejected"])
        for key in (
            "cuts",
            "target_seconds",
            "context_seconds",
            "clipped_samples",
            "clipped_cuts",
            "padded_cuts",
            "copied_spans",
            "encoded_spans",
        ):
            totals[key] += s[key]
        for field, n in s["bytes"].items():
            totals[f"bytes.{field}"] += n
    with atomic_dir(rejected_dir) as out_dir, RejectWriter(out_dir) as rejects:
        for path in map(rejected_beside, shard_stats):
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
        "copied_spans": totals["copied_spans"],
        "encoded_spans": totals["encoded_spans"],
        "bytes": {k.split(".", 1)[1]: v for k, v in sorted(totals.items()) if k.startswith("bytes.")},
        "shard_seconds": [s["seconds"] for s in shards],
    }
    if summary["cuts"] + summary["rejected_total"] != records_in:
        raise SharflowError(
            f"shar {dataset}: {records_in} records with context but {summary['cuts']} cuts + "
            f"{summary['rejected_total']} rejected; shards are out of date: rerun with --forcerun shar_plan"
        )
    write_json(stats, summary)
    log.info(
        "shar %s: %d cuts in %d shards (%.3f h), %d rejected %s; audio spans: %d copied through, %d encoded",
        dataset,
        summary["cuts"],
        len(shards),
        summary["hours"],
        summary["rejected_total"],
        dict(rejected),
        summary["copied_spans"],
        summary["encoded_spans"],
    )
    return summary
