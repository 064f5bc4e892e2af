"""The identity job: over every dataset at once, which train records are held-out utterances again.

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

Memory: the held-out records' keys and fingerprints (an index sorted by hash, 12 bytes a hash) and
one voice vector a speaker; every other record streams through, one at a time. A query gathers the
index entries of its hashes and counts them by (held-out record, time offset): never a matrix over
records.
"""

import json
import logging
import time
from array import array
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from sharflow.core.atomic import atomic_file, write_json
from sharflow.core.errors import SharflowError
from sharflow.core.splits import TRAIN, SplitRules
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
OFFSET_BITS = 24  # a time offset of ± 8 M frames (18 hours at 8 ms) fits below the record index
EXAMPLES = 5  # links shown per reason in the stats (the report and card show them)


@dataclass(frozen=True)
class MatchRules:
    """When two fingerprints are the same content (identity.min_score, identity.min_matched)."""

    min_score: float = 0.15
    min_matched: int = 8
    train_duplicates: str = "keep"  # keep | drop | mark


@dataclass(frozen=True)
class DatasetIdentity:
    """A dataset as the identity job sees it: its identity parts and its splits block."""

    parts: list  # [(part-NNNN.jsonl, part-NNNN.npy[, part-NNNN.voices.npy])]
    rules: Mapping


class HeldOut:
    """The held-out records of every dataset: their span keys, utterance keys and fingerprints."""

    def __init__(self):
        self.items: list[dict] = []
        self.spans: dict[str, int] = {}
        self.utterances: dict[str, int] = {}
        self._chunks: list[tuple[np.ndarray, int]] = []
        self.hashes = self.owners = self.times = self.sizes = None

    def add(self, dataset: str, entry: dict, split: str, hashes: np.ndarray) -> None:
        i = len(self.items)
        self.items.append({**_where(dataset, entry), "split": split})
        self.spans.setdefault(entry["span"], i)
        if entry.get("utterance"):
            self.utterances.setdefault(entry["utterance"], i)
        self._chunks.append((np.asarray(hashes), i))

    def freeze(self) -> None:
        """Sort the fingerprints into one index by hash (then owner, then time: deterministic)."""
        sizes = np.zeros(len(self.items), dtype=np.int64)
        parts = [c for c in self._chunks if len(c[0])]
        for hashes, i in parts:
            sizes[i] = len(hashes)
        self.sizes = sizes
        if parts:
            h = np.concatenate([c["hash"] for c, _ in parts])
            t = np.concatenate([c["time"] for c, _ in parts]).astype(np.int32)
            o = np.concatenate([np.full(len(c), i, dtype=np.int32) for c, i in parts])
        else:
            h, t, o = np.zeros(0, np.uint32), np.zeros(0, np.int32), np.zeros(0, np.int32)
        order = np.lexsort((t, o, h))
        self.hashes, self.owners, self.times = h[order], o[order], t[order]
        self._chunks = []

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.hashes, self.owners, self.times, self.sizes))

    def best(self, hashes: np.ndarray, rules: MatchRules) -> tuple[int, float, int] | None:
        """(held-out record, score, matched hashes) of the best content match of a fingerprint
        (a structured array of hash and time), or None below the rules."""
        if len(hashes) == 0 or len(self.hashes) == 0:
            return None
        lo = np.searchsorted(self.hashes, hashes["hash"], side="left")
        n = np.searchsorted(self.hashes, hashes["hash"], side="right") - lo
        total = int(n.sum())
        if total == 0:
            return None
        pos = np.repeat(lo - np.concatenate(([0], np.cumsum(n)[:-1])), n) + np.arange(total)
        offsets = self.times[pos].astype(np.int64) - np.repeat(hashes["time"].astype(np.int64), n)
        owners = self.owners[pos].astype(np.int64)
        keys, counts = np.unique(
            (owners << OFFSET_BITS) | (offsets + (1 << (OFFSET_BITS - 1))), return_counts=True
        )
        near = np.diff(keys) == 1  # the same owner, offsets one frame apart
        tolerant = counts.copy()
        tolerant[1:] += np.where(near, counts[:-1], 0)
        tolerant[:-1] += np.where(near, counts[1:], 0)
        owners = keys >> OFFSET_BITS
        scores = tolerant / np.minimum(len(hashes), self.sizes[owners])
        ok = (scores >= rules.min_score) & (tolerant >= rules.min_matched)
        if not ok.any():
            return None
        i = np.flatnonzero(ok)[np.argmax(scores[ok])]  # the first (lowest owner) of the best
        return int(owners[i]), float(scores[i]), int(tolerant[i])


def link_identities(
    datasets: Mapping[str, DatasetIdentity],
    *,
    rules: MatchRules,
    out_links: str,
    out_stats: str,
    voices: VoiceRules | None = None,
    decisions: str | None = None,
) -> dict:
    """Index every dataset's held-out records, link speakers to held-out unseen ones (by id, by the
    config, and with `voices` enabled by voice; the decisions file `decisions`, if given, is read,
    then rewritten), stream every train record past them, find exact duplicates within train, and
    write the links (one line per linked train record) and stats (per reason and dataset pair,
    examples, speaker links)."""
    if rules.train_duplicates not in DUPLICATE_ACTIONS:
        raise SharflowError(
            f"identity.train_duplicates must be one of {DUPLICATE_ACTIONS}, got {rules.train_duplicates!r}"
        )
    start = time.perf_counter()
    records = _Records(datasets)
    held, train, digests, speakers = records.index()
    first_of = _first_copies(np.frombuffer(digests, dtype=np.uint64))
    voices = voices or VoiceRules(enabled=False)  # speakers are still linked by id and confirm
    pairs = link_speakers(speakers, voices, read_decisions(decisions))
    log.info(
        "identity: %d held-out records indexed (%d hashes, %.1f MB); %d train records to check; "
        "%d speakers linked to held-out unseen ones",
        len(held.items),
        len(held.hashes),
        held.nbytes / 1e6,
        sum(train.values()),
        sum(p["linked"] for p in pairs),
    )
    tally = _write_links(records.links(held, first_of, rules, linked_speakers(pairs)), out_links, train)
    if decisions:
        write_decisions(decisions, pairs)
    stats = {
        "datasets": sorted(datasets),
        "held_out": len(held.items),
        "held_out_hashes": int(len(held.hashes)),
        "index_mb": round(held.nbytes / 1e6, 3),
        "train_checked": dict(sorted(train.items())),
        "links": sum(tally.by_reason[r] for r in HELD_OUT_REASONS),
        "by_reason": {r: tally.by_reason[r] for r in REASONS},
        "by_dataset_pair": dict(sorted(tally.by_pair.items())),
        "train_duplicates": {"found": tally.by_reason[DUPLICATE], "action": rules.train_duplicates},
        "examples": tally.examples,
        "rules": {"min_score": rules.min_score, "min_matched": rules.min_matched},
        "speakers": speaker_stats(speakers, voices, pairs),
        "seconds": round(time.perf_counter() - start, 3),
    }
    write_json(out_stats, stats)
    log.info("identity: links %s, duplicates within train: %s", dict(tally.by_reason), rules.train_duplicates)
    _warn_drifted(pairs)
    return stats


def _write_links(rows: Iterator[dict | None], out_links: str, train: Counter) -> "_Tally":
    """Write each train record's link row (None: not linked) and count them."""
    tally = _Tally()
    with (
        atomic_file(out_links, "w", encoding="utf-8") as out,
        tqdm(total=sum(train.values()), desc="identity", unit="utt", mininterval=5) as bar,
    ):
        for row in rows:
            bar.update()
            if row is not None:
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
                tally.add(row)
    return tally


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


class _Records:
    """Every dataset's identity entries with their splits, streamed twice: to index, then to link."""

    def __init__(self, datasets: Mapping[str, DatasetIdentity]):
        self.datasets = datasets
        self.rules = {n: SplitRules.from_config(d.rules, f"datasets.{n}.splits") for n, d in datasets.items()}

    def __iter__(self) -> Iterator[tuple[str, dict, np.ndarray, str, np.ndarray | None]]:
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
                held.add(name, entry, split, hashes)
        held.freeze()
        return held, train, digests, voices

    def links(
        self, held: HeldOut, first_of: np.ndarray, rules: MatchRules, speakers: Mapping
    ) -> Iterator[dict | None]:
        """Each train record's link row (held-out match first, else a duplicate), or None;
        `speakers`: {(dataset, speaker id): link} of the speakers linked to held-out unseen ones."""
        firsts: dict[int, dict] = {}  # train record number -> where, of the first copies of duplicates
        wanted = set(first_of[first_of >= 0].tolist())
        n = -1
        for name, entry, hashes, split, _ in self:
            if split != TRAIN:
                continue
            n += 1
            if n in wanted:
                firsts[n] = {**_where(name, entry), "split": TRAIN}
            link = _link(entry, hashes, held, rules)
            if link is not None:
                reason, owner, score = link
                yield {
                    **_where(name, entry),
                    "reason": reason,
                    "score": round(score, 4),
                    "matched": held.items[owner],
                }
            elif (name, entry["speaker"]) in speakers:
                yield {**_where(name, entry), "reason": LINKED_SPEAKER, **speakers[(name, entry["speaker"])]}
            elif first_of[n] >= 0:
                matched = firsts[int(first_of[n])]
                yield {
                    **_where(name, entry),
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


def _link(entry: dict, hashes: np.ndarray, held: HeldOut, rules: MatchRules) -> tuple[str, int, float] | None:
    """(reason, held-out record, score) of a train record's first link, or None."""
    if entry["span"] in held.spans:
        return SAME_AUDIO, held.spans[entry["span"]], 1.0
    best = held.best(hashes, rules)
    if best is not None:
        return SAME_CONTENT, best[0], best[1]
    if entry.get("utterance") in held.utterances:
        return SAME_UTTERANCE, held.utterances[entry["utterance"]], 1.0
    return None


def _entries(ds: DatasetIdentity) -> Iterator[tuple[dict, np.ndarray, np.ndarray | None]]:
    """(index entry, fingerprint, voice or None) of every decodable record of a dataset, in part
    and line order."""
    for index, hashes_file, *voices_file in ds.parts:
        hashes = np.load(hashes_file, mmap_mode="r")
        voices = np.load(voices_file[0], mmap_mode="r")["voice"] if voices_file else None
        with open(index, encoding="utf-8") as f:
            for row, text in enumerate(f):
                entry = json.loads(text)
                if "error" in entry:
                    continue  # undecodable: quality rejects it, nothing to compare
                voice = np.asarray(voices[row]) if voices is not None else None
                yield entry, np.asarray(hashes[entry["start"] : entry["start"] + entry["hashes"]]), voice


def _where(dataset: str, entry: dict) -> dict:
    return {
        "dataset": dataset,
        "audio_filepath": entry["audio_filepath"],
        "offset": entry["offset"],
        "duration": entry["duration"],
    }


def read_links(path: str, dataset: str) -> dict[tuple[str, float, float], dict]:
    """{(audio_filepath, offset, duration): link} of one dataset's linked train records."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for text in f:
            row = json.loads(text)
            if row["dataset"] == dataset:
                out[(row["audio_filepath"], row["offset"], row["duration"])] = row
    return out
