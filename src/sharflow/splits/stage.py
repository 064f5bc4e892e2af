"""The splits job of one dataset: every record gets its split, and no audio held out anywhere is
trained on here.

Each record's split comes from its own dataset's rules (splits.assign). A span held out in another
dataset of the run (the same audio: the same span_key) but train here is rejected here
(`held_out_in_another_dataset`): whatever each dataset's settings, or if two datasets name the same
speaker differently, held-out audio never reaches train. Held-out spans of other datasets are the
only thing kept in memory (a fraction of the data); records stream through.
"""

import json
import logging
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from sharflow.core.atomic import atomic_dir, atomic_file, write_json
from sharflow.core.audio import resolve_audio_path
from sharflow.core.ledger import Ledger, RejectWriter, reject_row
from sharflow.core.speakers import parse_speaker
from sharflow.core.splits import SPLITS, TRAIN, SplitRules, span_key

log = logging.getLogger(__name__)
CONFLICT = "held_out_in_another_dataset"
REASONS = {CONFLICT: "a train record whose audio (the same span) another dataset of the run holds out"}


@dataclass(frozen=True)
class DatasetSplits:
    """A dataset as the splits job sees it: its records (the context stage's input), audio root and rules."""

    records: str
    audio_root: str
    rules: Mapping  # the merged `splits` config block (SplitRules.from_config)


def splits_of(name: str, ds: DatasetSplits) -> Iterator[tuple[str, dict, str, str, str]]:
    """(raw line, record, speaker id, span key, split) of each of a dataset's records, in order."""
    rules = SplitRules.from_config(ds.rules, f"datasets.{name}.splits")
    with open(ds.records, encoding="utf-8") as f:
        for raw in f:
            record = json.loads(raw)
            path, _ = resolve_audio_path(ds.audio_root, record["audio_filepath"])
            span = span_key(path, record["offset"], record["duration"])
            speaker = parse_speaker(record["speaker"]).speaker_id
            yield raw, record, speaker, span, rules.split(speaker, record["audio_filepath"], span)


def held_out_elsewhere(dataset: str, datasets: Mapping[str, DatasetSplits]) -> dict[str, tuple[str, str]]:
    """{span key: (dataset, split)} of every span another dataset holds out (the first by name)."""
    held: dict[str, tuple[str, str]] = {}
    for name in sorted(datasets):
        if name != dataset:
            for _, _, _, span, split in splits_of(name, datasets[name]):
                if split != TRAIN:
                    held.setdefault(span, (name, split))
    return held


def assign_splits(
    dataset: str,
    datasets: Mapping[str, DatasetSplits],
    *,
    records_in: int,
    out_records: str,
    rejected_dir: str,
    stats: str,
) -> dict:
    """Write the dataset's records with a `split` field, reject train records whose audio another
    dataset holds out, check records in = out + rejected, and write stats per split."""
    held = held_out_elsewhere(dataset, datasets)
    per_split: dict[str, Counter] = {s: Counter() for s in SPLITS}
    speakers: dict[str, set] = defaultdict(set)
    with (
        atomic_file(out_records, "w", encoding="utf-8") as out,
        atomic_dir(rejected_dir) as rej_dir,
        RejectWriter(rej_dir) as rejects,
    ):
        ledger = Ledger("splits", dataset, rejects)
        for line, (raw, record, speaker, span, split) in enumerate(splits_of(dataset, datasets[dataset])):
            if split == TRAIN and span in held:
                other, other_split = held[span]
                detail = f"the same audio ({span}) is {other_split} in dataset {other}"
                ledger.reject(
                    CONFLICT, record["duration"], reject_row(CONFLICT, detail, raw.rstrip("\n"), line=line)
                )
                continue
            out.write(json.dumps({**record, "split": split}, ensure_ascii=False) + "\n")
            ledger.keep(record["duration"])
            per_split[split].update(records=1, seconds=record["duration"])
            speakers[split].add(speaker)
        ledger.check(records_in, fix=f"rerun with --forcerun splits for dataset {dataset}")
    summary = {
        "dataset": dataset,
        **ledger.counts(),
        **ledger.hours(),
        "splits": {
            s: {
                "records": per_split[s]["records"],
                "hours": round(per_split[s]["seconds"] / 3600, 6),
                "speakers": len(speakers[s]),
            }
            for s in SPLITS
        },
    }
    write_json(stats, summary)
    log.info(
        "splits %s: %s; %d rejected %s",
        dataset,
        ", ".join(f"{s} {v['records']}" for s, v in summary["splits"].items()),
        summary["rejected_total"],
        dict(ledger.rejected),
    )
    return summary
