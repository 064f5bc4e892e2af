"""Reject files: one JSON-lines file per reason in a folder, created on first use."""

import json
from pathlib import Path
from typing import IO


class RejectWriter:
    """Write reject entries to `<folder>/<reason>.jsonl`; use as a context manager.

    Only reasons that occur get a file. `write` takes a dict (dumped as one line) or an already
    serialized line.
    """

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.files: dict[str, IO[str]] = {}

    def write(self, reason: str, entry: dict | str) -> None:
        if reason not in self.files:
            self.files[reason] = open(self.folder / f"{reason}.jsonl", "w", encoding="utf-8")  # noqa: SIM115 (closed by close())
        text = entry if isinstance(entry, str) else json.dumps(entry, ensure_ascii=False) + "\n"
        self.files[reason].write(text)

    def close(self) -> None:
        for f in self.files.values():
            f.close()

    def __enter__(self) -> "RejectWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
