"""Every reject of a run, by dataset, stage and reason, and the held-out identity links.

Each stage writes its rejects as one JSON-lines file per reason in a folder (sharflow.core.ledger), a
row {<where>, reason, detail, original}; the identity check writes the train records it linked to a
held-out one in results/identity/links.jsonl. A reason is answered only when its file is one of its
stage folder's, so a name from a request never reaches the file system. Their rows are paged by an
offset index (sharflow.explore.lines) and every file is opened through the explorer's Roots.
"""

import json
import os
from pathlib import Path

from sharflow.core.layout import IDENTITY_LINKS, DatasetFiles
from sharflow.explore.lines import LineFiles
from sharflow.explore.roots import Roots

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


def reasons(files: DatasetFiles, lines: LineFiles, roots: Roots) -> list[dict]:
    """[{stage, reason, count}] of every reject file of a dataset, in stage order then by reason (each
    file counted once, by its index, while it is unchanged)."""
    out = []
    for stage in STAGES:
        for reason, path in _reason_files(files, stage).items():
            out.append({"stage": stage, "reason": reason, "count": lines.count(roots.confine(path))})
    return out


def reason_file(files: DatasetFiles, stage: str, reason: str) -> str | None:
    """The file of `reason` in `stage`'s folder, or None when the stage or the reason is not the run's."""
    if stage not in STAGES:
        return None
    return _reason_files(files, stage).get(reason)


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


def links_file(root: str | os.PathLike) -> Path:
    """results/identity/links.jsonl of the run under `root`."""
    return Path(root) / IDENTITY_LINKS
