"""The identity jobs: over every dataset at once, which train records are held-out utterances again.

Three jobs: the index job (index_identities) indexes the held-out records, finds the duplicates
within train and links speakers; `identity.check_parts` check jobs (check_identities) each look an
equal share of the train records up in that index, side by side; the merge (merge_identities)
joins their links in order, the same bytes for any count. A lookup finds its candidates by
fingerprint triplets, which are rare, so its cost grows slowly with the held-out set (each triplet
of another record that it meets costs a little: more of them, the larger the set); at millions of
records the lookups are still most of the stage's CPU: in parts, no one job holds it.
link_identities runs the three in one process.

Held out means held out for content, not for names. A record of any dataset whose split (its own
dataset's rules, sharflow.core.splits) is train is linked to a held-out record of any dataset,
its own included, when it is

1. the same audio: the same span key (file name and size, offset, duration): `same_audio_held_out`;
2. the same sound: its content fingerprint matches the held-out one's
   (sharflow.identity.fingerprint: at least `min_matched` landmark hashes at one time offset, and
   at least `min_score` of the shorter fingerprint's hashes), whatever its file name, format, rate,
   gain or trim: `same_content_held_out`;
3. the same utterance: the same speaker id and the same text (sharflow.identity.keys), another
   recording of it: `same_utterance_held_out`;
4. the same person: its speaker is linked to a held-out unseen speaker by id or by voice
   (sharflow.identity.voices): `linked_speaker_held_out`.

Held-out records are never linked (a record two datasets both hold out stays in each held-out set);
only train records go, each listed with the held-out record it matched and the score.

Exact duplicates within train (the same decoded samples: a clip listed twice, in one dataset or
two) are found too, by sorting the train records' sample digests (8 bytes a record): every copy
after the first (by dataset name, then line) is linked to the first as `duplicate_in_train`, and
`identity.train_duplicates` says what the splits job does with it: keep (counted only), drop
(rejected with that reason) or mark (kept, with `duplicate_of` naming the first). The links
(`links.jsonl`, one line per linked train record, by dataset and line) are what each dataset's
splits job reads, so no dataset reads another's records.

Memory: the held-out records' keys and fingerprints (their pairs by record, 8 bytes a hash, and
their triplets sorted by key, 8 bytes a triplet, with 4 bytes of bucket bounds), one voice vector
a speaker (the index job) and 8 bytes a train record (its first copy); every other record streams
through, one at a time, and a check part reads the fingerprints of its own only. A query gathers
the index entries of its triplets and counts them by (held-out record, time offset), then scores
the few records that share the most by their pairs: never a matrix over records.
"""

import json
import logging
import shutil
import tempfile
import time
from array import array
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from sharflow.core.atomic import atomic_file, read_json, write_json
from sharflow.core.errors import SharflowError
from sharflow.core.layout import IdentityCheckFiles, IdentityIndexFiles
from sharflow.core.splits import TRAIN, SplitRules
from sharflow.identity.held_out import HeldOut, MatchRules, where
from sharflow.identity.voices import (
    LINKED_SPEAKER,
    VoiceRules,
    Voices,
    link_speakers,
    linked_speakers,
    read_decisions,
)

log = logging.getLogger(__name__)

SAME_AUDIO = "same_audio_held_out"
SAME_CONTENT = "same_content_held_out"
SAME_UTTERANCE = "same_utterance_held_out"
DUPLICATE = "duplicate_in_train"
DUPLICATE_ACTIONS = ("keep", "drop", "mark")
REASONS = {
    SAME_AUDIO: "a train record whose audio span (file name and size, offset, duration) is held out "
    "in this or another dataset",
    SAME_CONTENT: "a train record whose sound matches a held-out record's content fingerprint (a "
    "renamed, re-encoded, resampled, louder or quieter, trimmed or padded copy)",
    SAME_UTTERANCE: "a train record of the same speaker and text as a held-out record (another "
    "recording of the same utterance)",
    LINKED_SPEAKER: "a train record of a speaker linked to a held-out unseen speaker: the same id in "
    "datasets that share their ids, a voice as similar as identity.voices.min_similarity, or a pair "
    "confirmed in identity.voices.confirm",
    DUPLICATE: "a train record whose decoded samples equal an earlier train record's (with "
    "identity.train_duplicates: drop)",
}
HELD_OUT_REASONS = (SAME_AUDIO, SAME_CONTENT, SAME_UTTERANCE, LINKED_SPEAKER)
EXAMPLES = 5  # links shown per reason in the stats (the report and card show them)


@dataclass(frozen=True)
class DatasetIdentity:
    """A dataset as the identity job sees it: its identity parts and its splits block."""

    parts: list  # [(part-NNNN.jsonl, part-NNNN.npy[, part-NNNN.voices.npy])]
    rules: Mapping


def link_identities(
    datasets: Mapping[str, DatasetIdentity],
    *,
    rules: MatchRules,
    out_links: str,
    out_stats: str,
    voices: VoiceRules | None = None,
    decisions: str | None = None,
    check_parts: int = 1,
) -> dict:
    """The identity stage's three jobs in this process, in a temporary folder beside `out_links`:
    index_identities, `check_parts` check_identities, merge_identities. Returns the stats."""
    _check_rules(datasets, rules)
    folder = Path(out_links).parent
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".identity.", dir=folder) as tmp:
        index = IdentityIndexFiles.under(tmp)
        index_identities(datasets, rules=rules, out=index, voices=voices, decisions=decisions)
        checks = [IdentityCheckFiles(f"{tmp}/{p}.jsonl", f"{tmp}/{p}.stats.json") for p in range(check_parts)]
        for p, out in enumerate(checks):
            check_identities(datasets, index=index, part=p, parts=check_parts, rules=rules, out=out)
        return merge_identities(index.summary, checks, rules=rules, out_links=out_links, out_stats=out_stats)


def _check_rules(datasets: Mapping[str, DatasetIdentity], rules: MatchRules) -> None:
    if rules.train_duplicates not in DUPLICATE_ACTIONS:
        raise SharflowError(
            f"identity.train_duplicates must be one of {DUPLICATE_ACTIONS}, got {rules.train_duplicates!r}"
        )
    _Records(datasets)  # each dataset's splits block, read (a bad one names its key)


def index_identities(
    datasets: Mapping[str, DatasetIdentity],
    *,
    rules: MatchRules,
    out: IdentityIndexFiles,
    voices: VoiceRules | None = None,
    decisions: str | None = None,
) -> dict:
    """The identity index job, over every dataset: index the held-out records' fingerprints and keys,
    find the train records' first copies (duplicates within train, by sample digest), link speakers
    to held-out unseen ones (by id, by the config, and with `voices` enabled by voice; the decisions
    file `decisions`, if given, is read, then rewritten), and write what the check parts read.
    Returns the summary."""
    _check_rules(datasets, rules)
    start = time.perf_counter()
    held, train, digests, speakers = _Records(datasets).index()
    first_of = _first_copies(np.frombuffer(digests, dtype=np.uint64))
    voices = voices or VoiceRules(enabled=False)  # speakers are still linked by id and confirm
    pairs = link_speakers(speakers, voices, read_decisions(decisions))
    log.info(
        "identity: %d held-out records indexed (%d hashes, %d triplets, %.1f MB); %d train records to "
        "check; %d speakers linked to held-out unseen ones",
        len(held.items),
        len(held.hashes),
        len(held.triplets),
        held.nbytes / 1e6,
        sum(train.values()),
        sum(p["linked"] for p in pairs),
    )
    keys = held.save(out)
    with atomic_file(out.firsts, "wb") as f:
        np.save(f, first_of)
    if decisions:
        write_decisions(decisions, pairs)
    summary = {
        "datasets": sorted(datasets),
        "held_out": len(held.items),
        "held_out_hashes": int(len(held.hashes)),
        "held_out_triplets": int(len(held.triplets)),
        "index_mb": round(held.nbytes / 1e6, 3),
        "train_checked": dict(sorted(train.items())),
        "speakers": speaker_stats(speakers, voices, pairs),
        "linked_speakers": [[*key, link] for key, link in sorted(linked_speakers(pairs).items())],
        **keys,
        "seconds": round(time.perf_counter() - start, 3),
    }
    write_json(out.summary, summary)
    _warn_drifted(pairs)
    return summary


def check_identities(
    datasets: Mapping[str, DatasetIdentity],
    *,
    index: IdentityIndexFiles,
    part: int,
    parts: int,
    rules: MatchRules,
    out: IdentityCheckFiles,
) -> dict:
    """An identity check part: the train records numbered from `part` / `parts` of them to the next
    part's first (every dataset's, by dataset name and line), each looked up in the held-out index
    (the same audio, the same sound, the same utterance, a linked speaker, else a duplicate within
    train); their link rows and the part's counts written. Parts run side by side. Returns the
    part's stats."""
    start = time.perf_counter()
    summary = read_json(index.summary)
    total = sum(summary["train_checked"].values())
    first, last = total * part // parts, total * (part + 1) // parts
    held = HeldOut.load(index, summary)
    first_of = np.load(index.firsts)
    speakers = {(d, s): link for d, s, link in summary["linked_speakers"]}
    rows = _Records(datasets).links(held, first_of, rules, speakers, first, last)
    tally = _Tally()
    with (
        atomic_file(out.links, "w", encoding="utf-8") as f,
        tqdm(total=last - first, desc=f"identity check {part}", unit="utt", mininterval=5) as bar,
    ):
        for row in rows:
            bar.update()
            if row is not None:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
                tally.add(row)
    stats = {
        "part": part,
        "parts": parts,
        "first": first,
        "records": last - first,
        **tally.state(),
        "seconds": round(time.perf_counter() - start, 3),
    }
    write_json(out.stats, stats)
    log.info(
        "identity check %d of %d: %d train records checked, links %s",
        part,
        parts,
        last - first,
        dict(tally.by_reason),
    )
    return stats


def merge_identities(
    summary: str,
    checks: list[IdentityCheckFiles],
    *,
    rules: MatchRules,
    out_links: str,
    out_stats: str,
) -> dict:
    """Join the check parts' links, in order, into the links every splits job reads (one line per
    linked train record, by dataset and line), checking that the parts cover every train record
    once; write the stats (per reason and dataset pair, examples, speaker links), with the index
    job's (its `summary`). Returns them."""
    summary = read_json(summary)
    tally, expected, seconds = _Tally(), 0, summary["seconds"]
    for files in checks:
        part = read_json(files.stats)
        if part["first"] != expected:
            raise SharflowError(
                f"{files.stats}: identity part {part['part']} starts at train record {part['first']}, not "
                f"{expected}: the identity parts are out of date; rerun with --forcerun identity_check"
            )
        expected += part["records"]
        tally.absorb(part)
        seconds += part["seconds"]
    train = sum(summary["train_checked"].values())
    if expected != train:
        raise SharflowError(
            f"the identity parts checked {expected} train records of {train}: "
            "rerun with --forcerun identity_check"
        )
    with atomic_file(out_links, "wb") as out:
        for files in checks:
            with open(files.links, "rb") as f:
                shutil.copyfileobj(f, out)
    stats = {
        **{k: summary[k] for k in ("datasets", "held_out", "held_out_hashes", "held_out_triplets")},
        **{k: summary[k] for k in ("index_mb", "train_checked")},
        "links": sum(tally.by_reason[r] for r in HELD_OUT_REASONS),
        "by_reason": {r: tally.by_reason[r] for r in REASONS},
        "by_dataset_pair": dict(sorted(tally.by_pair.items())),
        "train_duplicates": {"found": tally.by_reason[DUPLICATE], "action": rules.train_duplicates},
        "examples": tally.examples,
        "rules": {"min_score": rules.min_score, "min_matched": rules.min_matched},
        "speakers": summary["speakers"],
        "seconds": round(seconds, 3),
    }
    write_json(out_stats, stats)
    log.info("identity: links %s, duplicates within train: %s", dict(tally.by_reason), rules.train_duplicates)
    return stats


def _warn_drifted(pairs: list[dict]) -> None:
    """Say each pair decided earlier that its similarity now would decide otherwise."""
    for p in pairs:
        if p.get("drifted"):
            log.warning(
                "sharflow: the speakers %s were decided %s at similarity %s and score %s now; "
                "confirm or deny the pair under identity.voices to settle it",
                p["pair"],
                "linked" if p["linked"] else "not linked",
                p["decided_similarity"],
                p["similarity"],
            )


def write_decisions(path: str, pairs: list[dict]) -> None:
    """The decided speaker pairs, one line each, by pair (read again by the next run)."""
    with atomic_file(path, "w", encoding="utf-8") as f:
        for row in sorted(pairs, key=lambda r: r["pair"]):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def speaker_stats(speakers: Voices, voices: VoiceRules, pairs: list[dict]) -> dict:
    """Speakers, those held out unseen, those with enough audio to compare, the links and the
    closest pairs not linked (the report and card show them)."""
    every = speakers.speakers.values()
    out = {
        "speakers": len(every),
        "held_out_unseen": sum(1 for s in every if s.unseen),
        "voices": voices.enabled,
        "linked": [p for p in pairs if p["linked"]],
        "near_misses": sorted(
            (p for p in pairs if not p["linked"]), key=lambda p: -(p["similarity"] or -1.0)
        )[:EXAMPLES],
    }
    if voices.enabled:
        out["with_enough_audio"] = sum(1 for s in every if s.seconds >= voices.min_seconds)
        out["rules"] = {"min_similarity": voices.min_similarity, "min_seconds": voices.min_seconds}
    return out


class _Tally:
    """The links written: per reason, per (train dataset, held-out dataset), a few examples each."""

    def __init__(self):
        self.by_reason: Counter = Counter()
        self.by_pair: Counter = Counter()
        self.examples: dict[str, list] = {r: [] for r in REASONS}

    def add(self, row: dict) -> None:
        reason = row["reason"]
        self.by_reason[reason] += 1
        if reason != DUPLICATE:
            self.by_pair[f"{row['dataset']} <- {row['matched']['dataset']}"] += 1
        if len(self.examples[reason]) < EXAMPLES:
            self.examples[reason].append(row)

    def state(self) -> dict:
        """What a check part counted (absorb adds it to the merge's)."""
        return {"by_reason": dict(self.by_reason), "by_pair": dict(self.by_pair), "examples": self.examples}

    def absorb(self, state: Mapping) -> None:
        """Add a part's counts (the parts in order: the first examples of each reason stay)."""
        self.by_reason.update(state["by_reason"])
        self.by_pair.update(state["by_pair"])
        for reason, rows in state["examples"].items():
            self.examples[reason] = (self.examples[reason] + rows)[:EXAMPLES]


class _Records:
    """Every dataset's identity entries with their splits, streamed twice: to index, then to link."""

    def __init__(self, datasets: Mapping[str, DatasetIdentity]):
        self.datasets = datasets
        self.rules = {n: SplitRules.from_config(d.rules, f"datasets.{n}.splits") for n, d in datasets.items()}

    def __iter__(self) -> Iterator[tuple[str, dict, "_Run", str, np.ndarray | None]]:
        for name in sorted(self.datasets):
            for entry, hashes, voice in _entries(self.datasets[name]):
                split = self.rules[name].split(
                    entry["speaker"], entry["audio_filepath"], entry["span"], entry.get("who")
                )
                yield name, entry, hashes, split, voice

    def index(self) -> tuple[HeldOut, Counter, array, Voices]:
        """The held-out index, train records per dataset, the train records' sample digests, and
        every speaker's voice and splits."""
        held, train, digests, voices = HeldOut(), Counter(), array("Q"), Voices()  # 8 bytes a train record
        for name, entry, hashes, split, voice in self:
            voices.add(name, entry, split, voice)
            if split == TRAIN:
                train[name] += 1
                digests.append(int(entry["digest"], 16))
            else:
                held.add(name, entry, split, hashes.read())
        held.freeze()
        return held, train, digests, voices

    def links(
        self, held: HeldOut, first_of: np.ndarray, rules: MatchRules, speakers: Mapping, first: int, last: int
    ) -> Iterator[dict | None]:
        """The link row (held-out match first, else a duplicate), or None, of each train record
        numbered `first` to `last` (not included); `speakers`: {(dataset, speaker id): link} of the
        speakers linked to held-out unseen ones."""
        firsts: dict[int, dict] = {}  # train record number -> where, of the first copies of duplicates
        wanted = set(first_of[first_of >= 0].tolist())
        n = -1
        for name, entry, hashes, split, _ in self:
            if split != TRAIN:
                continue
            n += 1
            if n >= last:
                return
            if n in wanted:
                firsts[n] = {**where(name, entry), "split": TRAIN}
            if n < first:
                continue
            link = _link(entry, hashes, held, rules)
            if link is not None:
                reason, owner, score = link
                yield {
                    **where(name, entry),
                    "reason": reason,
                    "score": round(score, 4),
                    "matched": held.items[owner],
                }
            elif (name, entry["speaker"]) in speakers:
                yield {**where(name, entry), "reason": LINKED_SPEAKER, **speakers[(name, entry["speaker"])]}
            elif first_of[n] >= 0:
                matched = firsts[int(first_of[n])]
                yield {
                    **where(name, entry),
                    "reason": DUPLICATE,
                    "score": 1.0,
                    "matched": matched,
                    "action": rules.train_duplicates,
                }
            else:
                yield None


def _first_copies(digests: np.ndarray) -> np.ndarray:
    """For each train record, the number of the first record with its digest, or -1 if it is first."""
    first = np.full(len(digests), -1, dtype=np.int64)
    if len(digests) < 2:
        return first
    order = np.argsort(digests, kind="stable")  # equal digests keep record order
    d = digests[order]
    starts = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
    group_first = np.repeat(order[starts], np.diff(np.r_[starts, len(d)]))
    repeats = order != group_first
    first[order[repeats]] = group_first[repeats]
    return first


def _link(entry: dict, hashes: "_Run", held: HeldOut, rules: MatchRules) -> tuple[str, int, float] | None:
    """(reason, held-out record, score) of a train record's first link, or None."""
    if entry["span"] in held.spans:
        return SAME_AUDIO, held.spans[entry["span"]], 1.0
    best = held.best(hashes.read(), rules)
    if best is not None:
        return SAME_CONTENT, best[0], best[1]
    if entry.get("utterance") in held.utterances:
        return SAME_UTTERANCE, held.utterances[entry["utterance"]], 1.0
    return None


class _Rows:
    """A part's .npy of rows (fingerprint hashes, voices), read a run of rows at a time. Not mapped:
    a mapped file's pages stay in the job's RSS once touched (~8 KB a record of hashes), and the
    jobs touch every record's; read, each run is freed when its record has passed."""

    def __init__(self, path: str):
        self.file = open(path, "rb")  # noqa: SIM115 (closed by close())
        version = np.lib.format.read_magic(self.file)
        header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
        _, _, self.dtype = header[version](self.file)
        self.offset = self.file.tell()

    def read(self, start: int, count: int) -> np.ndarray:
        if not self.dtype.itemsize:  # rows of nothing (the voices of a part without voices)
            return np.zeros(count, self.dtype)
        self.file.seek(self.offset + start * self.dtype.itemsize)
        return np.fromfile(self.file, self.dtype, count)

    def close(self) -> None:
        self.file.close()


class _Run:
    """A record's fingerprint, read when asked (read()): a check part reads only its own records'."""

    def __init__(self, rows: _Rows, start: int, count: int):
        self.rows, self.start, self.count = rows, start, count

    def read(self) -> np.ndarray:
        return self.rows.read(self.start, self.count)


def _entries(ds: DatasetIdentity) -> Iterator[tuple[dict, _Run, np.ndarray | None]]:
    """(index entry, its fingerprint to read, voice or None) of every decodable record of a dataset,
    in part and line order."""
    for index, hashes_file, *voices_file in ds.parts:
        hashes = _Rows(hashes_file)
        voices = _Rows(voices_file[0]) if voices_file else None
        try:
            with open(index, encoding="utf-8") as f:
                for row, text in enumerate(f):
                    entry = json.loads(text)
                    if "error" in entry:
                        continue  # undecodable: quality rejects it, nothing to compare
                    voice = voices.read(row, 1)[0]["voice"] if voices is not None else None
                    yield entry, _Run(hashes, entry["start"], entry["hashes"]), voice
        finally:
            hashes.close()
            if voices is not None:
                voices.close()


def read_links(path: str, dataset: str) -> dict[tuple[str, float, float], dict]:
    """{(audio_filepath, offset, duration): link} of one dataset's linked train records."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for text in f:
            row = json.loads(text)
            if row["dataset"] == dataset:
                out[(row["audio_filepath"], row["offset"], row["duration"])] = row
    return out
