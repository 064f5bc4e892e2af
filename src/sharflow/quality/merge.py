"""The quality stage's merge: the parts' metrics, in record line order, into one file.

Every record must be measured exactly once: the merge checks the parts' lines run 1, 2, ...
with nothing missing or repeated, and that they number what the text stage kept.
"""

import json
import logging

from sharflow.core.atomic import atomic_file, read_json, write_json
from sharflow.core.errors import SharflowError
from sharflow.core.ledger import totals

log = logging.getLogger(__name__)


def merge_quality(
    *, part_metrics: list[str], part_stats: list[str], records_stats: str, metrics: str, stats: str
) -> dict:
    """The parts' metrics into `metrics`, checked line by line; the parts' stats summed into `stats`."""
    expected = read_json(records_stats)["records_out"]
    with atomic_file(metrics, "w", encoding="utf-8") as out:
        line = _copy_in_line_order(part_metrics, out)
    if line != expected:
        raise SharflowError(
            f"the quality parts hold {line} records but the text stage kept {expected}: "
            "rerun with --forcerun quality_part"
        )
    parts = [read_json(p) for p in part_stats]
    summed = totals(parts, ("unreadable", "audio_seconds"))
    summary = {
        "records": line,
        "unreadable": summed["unreadable"],
        "audio_seconds": round(summed["audio_seconds"], 3),
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


def _copy_in_line_order(part_metrics: list[str], out) -> int:
    """Copy the parts' lines to `out`, refusing any whose "line" is not the next; the lines copied."""
    line = 0
    for path in part_metrics:
        with open(path, encoding="utf-8") as f:
            for text in f:
                line += 1
                if json.loads(text)["line"] != line:
                    raise SharflowError(
                        f"{path}: expected record line {line}, found {text[:60]!r}; the quality parts "
                        "are out of date: rerun with --forcerun quality_part"
                    )
                out.write(text)
    return line
