"""Every reject of a run, by dataset, stage and reason, and the held-out identity links.

Each stage writes its rejects as one JSON-lines file per reason in a folder (sharflow.core.ledger), a
row {<where>, reason, detail, original}; the identity check writes the train records it linked to a
held-out one in results/identity/links.jsonl. A reason is answered only when its file is one of its
stage folder's, so a name from a request never reaches the file system.
"""

import json
import os
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from sharflow.core.layout import IDENTITY_LINKS, DatasetFiles

PAGE_SIZE = 50
STAGES = ("prepare", "text", "quality", "splits", "context", "shar")


def stage_folder(files: DatasetFiles, stage: str) -> str:
    """The folder of a stage's reject files (one per reason)."""
    return {
        "prepare": files.prepare_rejected,
        "text": files.text_rejected,
        "quality": files.quality_rejected,
        "splits": files.split_rejected,
        "context": files.context_rejected,
        "shar": files.shar_rejected,
    }[stage]


def reasons(files: DatasetFiles) -> list[dict]:
    """[{stage, reason, count}] of every reject file of a dataset, in stage order then by reason."""
    out = []
    for stage in STAGES:
        for reason, path in _reason_files(files, stage).items():
            out.append({"stage": stage, "reason": reason, "count": _count(path)})
    return out


def reason_file(files: DatasetFiles, stage: str, reason: str) -> str | None:
    """The file of `reason` in `stage`'s folder, or None when the stage or the reason is not the run's."""
    if stage not in STAGES:
        return None
    return _reason_files(files, stage).get(reason)


def rows(path: str, number: int = 0, size: int = PAGE_SIZE) -> list[dict]:
    """Page `number` of a JSON-lines file's rows, each with `n`, its line number from 0."""
    return [{"n": n, **row} for n, row in islice(_numbered(path), number * size, (number + 1) * size)]


def row(path: str, n: int) -> dict | None:
    """Row `n` (from 0) of a JSON-lines file, or None past its end."""
    found = next(islice(_numbered(path), n, n + 1), None) if n >= 0 else None
    return None if found is None else found[1]


def record_of(reject: dict) -> dict | None:
    """The record a reject row is about (its `original`, when that is a JSON object with audio)."""
    try:
        record = json.loads(reject.get("original") or "")
    except (TypeError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("audio_filepath"), str):
        return None
    return record


def _reason_files(files: DatasetFiles, stage: str) -> dict[str, str]:
    folder = Path(stage_folder(files, stage))
    if not folder.is_dir():
        return {}
    return {p.name[: -len(".jsonl")]: str(p) for p in sorted(folder.glob("*.jsonl")) if p.is_file()}


def _numbered(path: str) -> Iterator[tuple[int, dict]]:
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f):
            yield n, json.loads(line)


def _count(path: str) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def links_file(root: str | os.PathLike) -> Path:
    """results/identity/links.jsonl of the run under `root`."""
    return Path(root) / IDENTITY_LINKS
