"""The quality stage's merge: the parts' metrics, in record line order, into one file (and their
speaker embeddings, a row per line, into another: what the context stage reads).

Every record must be measured exactly once: the merge checks the parts' lines run 1, 2, ...
with nothing missing or repeated, and that they number what the text stage kept.
"""

import json
import logging

import numpy as np

from sharflow.core.atomic import atomic_file, read_json, write_json
from sharflow.core.errors import SharflowError
from sharflow.core.jsonl import count_lines
from sharflow.core.ledger import totals
from sharflow.identity.part import RowsFile

log = logging.getLogger(__name__)


def merge_quality(
    *,
    part_metrics: list[str],
    part_stats: list[str],
    records_stats: str,
    metrics: str,
    stats: str,
    part_embeddings: list[str] | None = None,
    embeddings: str | None = None,
) -> dict:
    """The parts' metrics into `metrics`, checked line by line; the parts' stats summed into `stats`;
    with `part_embeddings`, their rows into `embeddings`, each part's a row per metrics line."""
    expected = read_json(records_stats)["records_out"]
    with atomic_file(metrics, "w", encoding="utf-8") as out:
        line = _copy_in_line_order(part_metrics, out)
    if line != expected:
        raise SharflowError(
            f"the quality parts hold {line} records but the text stage kept {expected}: "
            "rerun with --forcerun quality_part"
        )
    if part_embeddings:
        _merge_rows(part_embeddings, part_metrics, embeddings)
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


def _merge_rows(part_rows: list[str], part_metrics: list[str], out: str) -> None:
    """The parts' embedding rows, one file after another, block by block; each part must hold a row
    per line of its metrics."""
    sources = [np.load(p, mmap_mode="r") for p in part_rows]
    for path, rows, metrics in zip(part_rows, sources, part_metrics, strict=True):
        if len(rows) != count_lines(metrics):
            raise SharflowError(
                f"{path} holds {len(rows)} rows for {count_lines(metrics)} lines of {metrics}: the quality "
                "parts are out of date: rerun with --forcerun quality_part"
            )
    widths = {s.dtype for s in sources if len(s)}
    if len(widths) > 1:
        raise SharflowError(
            f"the quality parts' embeddings differ in width ({widths}): rerun with --forcerun quality_part"
        )
    dtype = widths.pop() if widths else sources[0].dtype
    with RowsFile(out, dtype) as sink:
        for rows in sources:
            for i in range(0, len(rows), RowsFile.BLOCK):
                sink.write(rows[i : i + RowsFile.BLOCK])
