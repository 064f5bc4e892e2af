"""JSON lines keyed by (group, line): the context stage's rank and part files.

Each rank writes its records, rejects and embedding ids sorted by (group key, prepared line);
parts and the dataset merge them k-way in that order, so the output order depends only on the
data, whatever the number of parts and ranks.
"""

import heapq
import json
from collections.abc import Iterator
from typing import IO


def keyed_line(group: str, line: int, **fields) -> str:
    """One line of a keyed file: {"group", "line", **fields} as JSON, with its newline."""
    return json.dumps({"group": group, "line": line, **fields}, ensure_ascii=False) + "\n"


def keyed_rows(f: IO[str], source: int) -> Iterator[tuple[tuple[str, int], int, int, str]]:
    """((group, line), source, row, text) for each line of a keyed file."""
    for row, text in enumerate(f):
        item = json.loads(text)
        yield (item["group"], item["line"]), source, row, text


def merge_keyed(files: list[IO[str]]) -> Iterator[tuple[int, int, str]]:
    """(source, row, text) of keyed files, each sorted by (group, line), merged in that order."""
    merged = heapq.merge(*(keyed_rows(f, s) for s, f in enumerate(files)), key=lambda t: t[0])
    for _, source, row, text in merged:
        yield source, row, text


def merge_sorted(paths: list[str]) -> Iterator[str]:
    """The lines of keyed files, each sorted by (group, line), merged in that order."""
    files = [open(p, encoding="utf-8") for p in paths]  # noqa: SIM115 (closed below)
    try:
        for _, _, text in merge_keyed(files):
            yield text
    finally:
        for f in files:
            f.close()
