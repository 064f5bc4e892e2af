"""Stage accounting: every record that comes into a stage goes out or is rejected with a reason.

One Ledger per stage job counts records and seconds in and out and rejects by reason, checks
records in = out + rejected (and = what the stage before kept), and gives the counting part of the
stage's stats. Reject files are one JSON-lines file per reason in a folder (RejectWriter), each row
{<where>, "reason", "detail", "original"} (reject_row). Merge jobs add their parts' counts (absorb)
and sum their parts' other figures (totals).

Example::

    ledger = Ledger("quality", "demo")
    ledger.keep(seconds=3.2)
    ledger.reject("quality_dnsmos_bak", seconds=1.5)
    ledger.check(expected_in=2, fix="rerun with --forcerun quality_part")
    stats = {"dataset": "demo", **ledger.counts(), **ledger.hours()}
"""

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO

from sharflow.core.errors import SharflowError


def reject_row(reason: str, detail: str, original: str | dict, **where) -> dict:
    """A reject file's row: where the record was (line=, row= or cut_id=), why, and the record as it
    came in (a dict is written as its JSON text)."""
    text = original if isinstance(original, str) else json.dumps(original, ensure_ascii=False)
    return {**where, "reason": reason, "detail": detail, "original": text}


class RejectWriter:
    """Write reject rows to `<folder>/<reason>.jsonl`; use as a context manager.

    Only reasons that occur get a file. `write` takes a row (dumped as one line) or an already
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


class Ledger:
    """What one stage did with its records (see the module docstring). With `rejects`, the rows given
    to reject() are written there."""

    def __init__(self, stage: str, dataset: str, rejects: RejectWriter | None = None):
        self.stage, self.dataset, self.rejects = stage, dataset, rejects
        self.records_in = self.records_out = 0
        self.seconds_in = self.seconds_out = 0.0
        self.rejected: Counter[str] = Counter()

    def keep(self, seconds: float = 0.0) -> None:
        self.records_in += 1
        self.records_out += 1
        self.seconds_in += seconds
        self.seconds_out += seconds

    def reject(self, reason: str, seconds: float = 0.0, row: dict | str | None = None) -> None:
        self.records_in += 1
        self.rejected[reason] += 1
        self.seconds_in += seconds
        if row is not None and self.rejects is not None:
            self.rejects.write(reason, row)

    def absorb(self, records_out: int, rejected: Mapping[str, int], seconds_out: float = 0.0) -> None:
        """Add a part's (or shard's) counts: its records out and its rejects by reason."""
        self.records_in += records_out + sum(rejected.values())
        self.records_out += records_out
        self.seconds_out += seconds_out
        self.rejected.update(rejected)

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())

    def check(self, expected_in: int | None = None, *, fix: str) -> None:
        """Raise unless records in = out + rejected and, when given, = `expected_in` (what the stage
        before kept); the message says what to do (`fix`)."""
        expected = self.records_in if expected_in is None else expected_in
        if self.records_in == expected == self.records_out + self.rejected_total:
            return
        raise SharflowError(
            f"{self.stage} {self.dataset}: {expected} records in but {self.records_out} kept + "
            f"{self.rejected_total} rejected; {fix}"
        )

    def counts(self, out: str = "records_out") -> dict:
        """{records_in, <out>, rejected_total, rejected (by reason, sorted)} for the stage's stats."""
        return {
            "records_in": self.records_in,
            out: self.records_out,
            "rejected_total": self.rejected_total,
            "rejected": dict(sorted(self.rejected.items())),
        }

    def hours(self) -> dict:
        return {"hours_in": round(self.seconds_in / 3600, 6), "hours_out": round(self.seconds_out / 3600, 6)}


def totals(stats: Iterable[Mapping], keys: Iterable[str]) -> Counter:
    """The sum of each of `keys` over parts' stats (a key a part lacks counts as 0)."""
    out: Counter = Counter()
    for s in stats:
        for key in keys:
            out[key] += s.get(key, 0)
    return out
