"""The splits job of one dataset: every record gets its split, and no audio held out anywhere is
trained on here.

Each record's split comes from its own dataset's rules (splits.assign). A train record the identity
job linked to a held-out record of any dataset (sharflow.identity.links: the same span, the same
sound, the same speaker and text) or whose speaker it linked to a held-out unseen speaker (by id or
by voice: sharflow.identity.voices) is rejected here with the link's reason and the record it
matched: whatever each dataset's settings or names, held-out audio never reaches train. The job
reads its own records and the links (a line per linked record), never another dataset's records.

With the identity stage, every record also gets its `fingerprint_hashes` (landmark hashes of its
content fingerprint; 0: too short or silent to have one) and `audio_digest` (of its decoded
samples), read in step from the dataset's own identity parts, and an exact duplicate within train
is dropped (`duplicate_in_train`) or marked (`duplicate_of`) as identity.train_duplicates says.

A held-out split the rules ask for that selects nothing (a fraction of few speakers can hash to
none) is said in the log and the stats (`empty_splits`), with the count expected and the fix; with
`splits.empty: error` it stops the run.
"""

import json
import logging
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from sharflow.core.atomic import atomic_dir, atomic_file, write_json
from sharflow.core.errors import SharflowError
from sharflow.core.ledger import Ledger, RejectWriter, reject_row
from sharflow.core.speakers import parse_speaker
from sharflow.core.splits import HELD_OUT, SPLITS, TRAIN, UNSEEN, SplitRules, speaker_identity
from sharflow.identity.links import read_links
from sharflow.io.audio import resolve_audio_path, span_key

log = logging.getLogger(__name__)
EMPTY_ACTIONS = ("warn", "error")


@dataclass(frozen=True)
class DatasetSplits:
    """A dataset as the splits job sees it: its records (the context stage's input), audio root and rules."""

    records: str
    audio_root: str
    rules: Mapping  # the merged `splits` config block (SplitRules.from_config)
    own_speaker_ids: bool = False  # datasets.<name>.speaker_ids: own (core.splits.speaker_identity)


def splits_of(name: str, ds: DatasetSplits) -> Iterator[tuple[str, dict, str, str, str]]:
    """(raw line, record, speaker id, span key, split) of each of a dataset's records, in order."""
    rules = SplitRules.from_config(ds.rules, f"datasets.{name}.splits")
    with open(ds.records, encoding="utf-8") as f:
        for raw in f:
            record = json.loads(raw)
            path, _ = resolve_audio_path(ds.audio_root, record["audio_filepath"])
            span = span_key(path, record["offset"], record["duration"])
            speaker = parse_speaker(record["speaker"]).speaker_id
            who = speaker_identity(name, speaker, ds.own_speaker_ids)
            yield raw, record, speaker, span, rules.split(speaker, record["audio_filepath"], span, who)


def assign_splits(
    dataset: str,
    ds: DatasetSplits,
    *,
    links: str | None,
    identity: list[str] | None = None,
    records_in: int,
    out_records: str,
    rejected_dir: str,
    stats: str,
    empty: str = "warn",
) -> dict:
    """Write the dataset's records with a `split` field, reject the train records the identity job
    linked to held-out ones (`links`), drop or mark its exact duplicates within train, add each
    record's identity fields from `identity` (the dataset's identity part files, in order), check
    records in = out + rejected, and write stats per split."""
    if empty not in EMPTY_ACTIONS:
        raise SharflowError(f"splits.empty must be one of {EMPTY_ACTIONS}, got {empty!r}")
    linked = read_links(links, dataset) if links else {}
    fields = IdentityFields(identity) if identity else None
    marked = 0
    per_split: dict[str, Counter] = {s: Counter() for s in SPLITS}
    speakers: dict[str, set] = defaultdict(set)
    all_speakers: set[str] = set()
    with (
        atomic_file(out_records, "w", encoding="utf-8") as out,
        atomic_dir(rejected_dir) as rej_dir,
        RejectWriter(rej_dir) as rejects,
    ):
        ledger = Ledger("splits", dataset, rejects)
        for line, (raw, record, speaker, _, split) in enumerate(splits_of(dataset, ds), start=1):
            all_speakers.add(speaker)
            where = (record["audio_filepath"], record["offset"], record["duration"])
            if fields is not None:
                record.update(fields.of(where))
            link = linked.get(where) if split == TRAIN else None
            if link is not None and link.get("action") == "mark":
                record["duplicate_of"] = _first_copy(link["matched"])
                marked += 1
            elif link is not None and link.get("action") != "keep":
                row = reject_row(link["reason"], _detail(link), raw.rstrip("\n"), line=line)
                ledger.reject(link["reason"], record["duration"], row)
                continue
            out.write(json.dumps({**record, "split": split}, ensure_ascii=False) + "\n")
            ledger.keep(record["duration"])
            per_split[split].update(records=1, seconds=record["duration"])
            speakers[split].add(speaker)
        ledger.check(records_in, fix=f"rerun with --forcerun splits for dataset {dataset}")
    seen = sum(per_split[s]["records"] for s in SPLITS if s not in UNSEEN)
    rules = SplitRules.from_config(ds.rules, f"datasets.{dataset}.splits")
    summary = {
        "dataset": dataset,
        **ledger.counts(),
        **ledger.hours(),
        "splits": _per_split(per_split, speakers),
        "empty_splits": empty_splits(dataset, rules, per_split, len(all_speakers), seen),
        "marked_duplicates": marked,
    }
    _finish(summary, stats, empty, dict(ledger.rejected))
    return summary


def _finish(summary: dict, stats: str, empty: str, rejected: dict) -> None:
    """Write the splits stats, say every empty split, log the counts; stop on an empty split if asked."""
    write_json(stats, summary)
    for e in summary["empty_splits"]:
        log.warning("sharflow: %s", e["message"])
    log.info(
        "splits %s: %s; %d rejected %s",
        summary["dataset"],
        ", ".join(f"{s} {v['records']}" for s, v in summary["splits"].items()),
        summary["rejected_total"],
        rejected,
    )
    if summary["empty_splits"] and empty == "error":
        raise SharflowError(
            "; ".join(e["message"] for e in summary["empty_splits"])
            + " (splits.empty: error; set it to warn to go on)"
        )


def _per_split(per_split: Mapping[str, Counter], speakers: Mapping[str, set]) -> dict:
    return {
        s: {
            "records": per_split[s]["records"],
            "hours": round(per_split[s]["seconds"] / 3600, 6),
            "speakers": len(speakers[s]),
        }
        for s in SPLITS
    }


def _first_copy(m: dict) -> str:
    """`duplicate_of` of a marked copy: the first copy's dataset, file and offset."""
    return f"{m['dataset']}:{m['audio_filepath']}@{m['offset']}"


class IdentityFields:
    """A dataset's identity part entries read in step with its records (a subsequence of the text
    stage's records, in the same order): each record's identity fields, in O(1) memory."""

    def __init__(self, index_files: list[str]):
        self._entries = self._read(index_files)

    @staticmethod
    def _read(index_files):
        for path in index_files:
            with open(path, encoding="utf-8") as f:
                for text in f:
                    yield json.loads(text)

    def of(self, where: tuple) -> dict:
        for entry in self._entries:
            if (entry["audio_filepath"], entry["offset"], entry["duration"]) == where:
                return {"fingerprint_hashes": entry["hashes"], "audio_digest": entry.get("digest")}
        raise SharflowError(
            f"the identity parts hold no entry for {where[0]} at {where[1]} s (or not in the records' "
            "order): they are out of date; rerun with --forcerun quality_part (identity_part with quality "
            "off)"
        )


def empty_splits(dataset: str, rules: SplitRules, per_split: Mapping, speakers: int, seen: int) -> list[dict]:
    """The held-out splits the rules ask for that hold no record: split, expected count, message."""
    out = []
    for split in HELD_OUT:
        fraction = rules.fractions.get(split, 0.0)
        listed = rules.speakers if split in UNSEEN else rules.utterances
        named = sorted(k for k, v in listed.items() if v == split)
        if per_split[split]["records"] or not (fraction or named):
            continue
        unit, of = ("speakers", speakers) if split in UNSEEN else ("utterances", seen)
        key = "speakers" if split in UNSEEN else "utterances"
        expected = fraction * of
        why = (
            f"{split}.{key} names {named[:3]}, which have no records"
            if named
            else (
                f"{split}.fraction {fraction} of {of} {unit} expects {expected:.1f}, and the hash picked none"
            )
        )
        out.append(
            {
                "split": split,
                "expected": round(expected, 2),
                "message": f"dataset {dataset}: the {split} split is empty ({why}); list {key} under "
                f"{split}.{key} or raise {split}.fraction",
            }
        )
    return out


def _detail(link: dict) -> str:
    m = link["matched"]
    if "audio_filepath" not in m:  # a speaker link (sharflow.identity.voices)
        return (
            f"the same person as {m['split']} speaker {m['speaker']} of dataset {m['dataset']} (by "
            f"{m['how']}, voice similarity {link['score']})"
        )
    where = f"{m['audio_filepath']} at {m['offset']} s for {m['duration']} s"
    return f"the same as {m['split']} {where} of dataset {m['dataset']} (score {link['score']})"
