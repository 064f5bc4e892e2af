"""JSON-lines files read by position: numbered lines with byte offsets, and merges of sorted files."""

import heapq
import json
from collections.abc import Iterator


def numbered_lines(path: str) -> Iterator[tuple[int, int, bytes]]:
    """(1-based line number, byte offset, raw line) of a JSON-lines file."""
    with open(path, "rb") as f:
        offset = 0
        for line_no, raw in enumerate(f, start=1):
            yield line_no, offset, raw
            offset += len(raw)


def merge_by_line(paths: list[str]) -> Iterator[str]:
    """The lines of files each sorted by their "line" field, merged in that order."""
    files = [open(p, encoding="utf-8") for p in paths]  # noqa: SIM115 (closed below)
    try:
        yield from heapq.merge(*files, key=lambda text: json.loads(text)["line"])
    finally:
        for f in files:
            f.close()


def count_lines(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def write_jsonl(f, records) -> int:
    """Each record as one JSON line (non-ASCII kept) to the open text file `f`; how many were written."""
    n = 0
    for record in records:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
        n += 1
    return n
