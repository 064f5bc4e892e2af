"""The codes stage's merge: one codec's shard jobs summed per dataset."""

import logging

from sharflow.core.atomic import read_json, write_json
from sharflow.core.ledger import totals

log = logging.getLogger(__name__)


def merge_codes_stats(shard_stats: list[str], out: str) -> dict:
    """Totals of one codec's shard jobs for a dataset: cuts, audio, padding efficiency, time."""
    shards = [read_json(path) for path in shard_stats]
    summed = totals(shards, ("cuts", "audio_seconds", "seconds"))
    audio = summed["audio_seconds"]
    padded = sum(s["audio_seconds"] / s["padding_efficiency"] for s in shards if s["padding_efficiency"])
    first = shards[0] if shards else {}
    summary = {
        "codec": first.get("codec"),
        "shards": len(shards),
        "cuts": summed["cuts"],
        "audio_hours": round(audio / 3600, 6),
        "padding_efficiency": round(audio / padded, 4) if padded else 1.0,
        **{
            k: first.get(k)
            for k in ("sample_rate", "samples_per_frame", "num_codebooks", "codebook_size", "dtype")
        },
        "seconds": round(summed["seconds"], 3),
    }
    write_json(out, summary)
    log.info(
        "codes %s: %d cuts in %d shards, %.3f h of audio, padding efficiency %.3f",
        summary["codec"],
        summary["cuts"],
        summary["shards"],
        summary["audio_hours"],
        summary["padding_efficiency"],
    )
    return summary
