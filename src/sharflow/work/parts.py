"""The parts of a per-record stage (quality, identity): contiguous runs of record lines, each with an
equal share of the audio seconds, decided from the records file alone (no plan job)."""

import json

from sharflow.core.jsonl import numbered_lines


def part_of(start_seconds: float, total_seconds: float, parts: int) -> int:
    """The part of a record whose audio starts `start_seconds` into the file's total."""
    if total_seconds <= 0:
        return 0
    return min(parts - 1, int(parts * start_seconds / total_seconds))


def part_records(records: str, part: int, parts: int) -> list[tuple[int, int, float]]:
    """(line, byte offset, duration) of the records of one part, in line order."""
    total = sum(json.loads(raw)["duration"] for _, _, raw in numbered_lines(records))
    mine, start = [], 0.0
    for line, offset, raw in numbered_lines(records):
        duration = json.loads(raw)["duration"]
        if part_of(start, total, parts) == part:
            mine.append((line, offset, duration))
        start += duration
    return mine


def part_span(records: str, part: int, parts: int) -> tuple[int, int, int]:
    """(first line, its byte offset, line count) of one part, the same lines as part_records gives,
    found in two passes that hold nothing per record (count 0: a part with no records)."""
    total = sum(json.loads(raw)["duration"] for _, _, raw in numbered_lines(records))
    first, offset, count, start = 0, 0, 0, 0.0
    for line, at, raw in numbered_lines(records):
        if part_of(start, total, parts) == part:
            if not count:
                first, offset = line, at
            count += 1
        elif count:
            break
        start += json.loads(raw)["duration"]
    return first, offset, count
