"""Speakers linked by voice or by id: an unseen speaker stays unseen under any name, in any dataset.

A held-out unseen speaker (dev_unseen, test_unseen) of one dataset may be a speaker of another
dataset, or of its own, under another id. Each speaker (its dataset and who it names, as
core.splits.speaker_identity says) gets a voice: the L2-normalised mean of the speaker embeddings of
its records that have a sound (a content fingerprint: not silence, not too short), with the voiced
seconds behind it. Every held-out unseen speaker's voice is compared with every speaker's that has
train records, by a matrix product of the held-out voices against blocks of the others (memory:
one vector of 256 float32 a speaker, never a matrix over utterances). A pair is **linked**:

- by **id**: the same speaker id in another dataset, both datasets sharing their ids
  (datasets.<name>.speaker_ids: shared, the default: one id, one person);
- by **voice**: both speakers have at least `min_seconds` voiced seconds and their voices' cosine
  similarity is at least `min_similarity` (measured on the demo's synthetic voices with the
  level-normalised GE2E embedder: four utterances of a voice against four others of it >= 0.941,
  against four of another voice <= 0.926;
  docs: splits);
- or by the config: `confirm` links a pair whatever its score, `deny` never links it.

Then every train record of the linked speaker is rejected from train (`linked_speaker_held_out`,
sharflow.identity.links). A pair is decided once and stays decided as the data grows: the decisions
(links, and for each held-out speaker its `NEAR_PER_SPEAKER` closest pairs within `NEAR` below the
threshold, not linked) are kept in the decisions file and reused while the rules are the same, so
a growing speaker's drifting similarity does not flip a decision; a decision the current similarity
would make otherwise is flagged `drifted` for the user to confirm or deny. A pair with too little
audio, or further below the threshold, is not decided: it is decided when both sides have enough
audio and it comes near (a pair that rises to the threshold is then linked).
"""

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from sharflow.core.cache import file_identity
from sharflow.core.errors import SharflowError

LINKED_SPEAKER = "linked_speaker_held_out"
NEAR = 0.1  # pairs this far below min_similarity are decided (not linked) and shown as near misses
NEAR_PER_SPEAKER = 5  # the closest such pairs kept per held-out speaker: memory bounded by speakers
BLOCK = 4096  # speakers compared with the held-out voices at a time
DECIDED = ("voice", "not_linked")  # decisions kept from run to run (id and config ones are re-read)


@dataclass(frozen=True)
class VoiceRules:
    """When two speakers are one person (identity.voices)."""

    enabled: bool = True
    min_similarity: float = 0.935
    min_seconds: float = 12.0
    confirm: tuple = ()  # ("dataset:speaker", "dataset:speaker") pairs linked whatever their score
    deny: tuple = ()  # pairs never linked
    embedder: str = "ge2e"
    embedder_options: tuple = ()  # sorted (key, value) pairs

    @classmethod
    def from_config(cls, block: Mapping) -> "VoiceRules":
        return cls(
            enabled=bool(block.get("enabled", True)),
            min_similarity=float(block.get("min_similarity", cls.min_similarity)),
            min_seconds=float(block.get("min_seconds", cls.min_seconds)),
            confirm=tuple(_pair(p, "confirm") for p in block.get("confirm", []) or []),
            deny=tuple(_pair(p, "deny") for p in block.get("deny", []) or []),
            embedder=str(block.get("embedder", cls.embedder)),
            embedder_options=tuple(sorted((block.get("embedder_options") or {}).items())),
        )

    @property
    def digest(self) -> str:
        """What a decision depends on besides the voices: the threshold, the minimum audio, the
        embedder and its options (a weights or model file by its size and time). Not `confirm`,
        `deny` or `enabled`: those are read afresh every run."""
        what = [
            self.min_similarity,
            self.min_seconds,
            file_identity(self.embedder),
            [[k, file_identity(v)] for k, v in self.embedder_options],
        ]
        return hashlib.blake2b(json.dumps(what, default=str).encode(), digest_size=6).hexdigest()


def _pair(p, key: str) -> frozenset:
    if not (isinstance(p, list | tuple) and len(p) == 2 and all(isinstance(s, str) and ":" in s for s in p)):
        raise SharflowError(
            f'identity.voices.{key}: {p!r} is not a pair of speakers; write ["<dataset>:<speaker id>", '
            '"<dataset>:<speaker id>"]'
        )
    return frozenset(p)


@dataclass
class Speaker:
    """One speaker of one dataset: its voice so far (a sum of embeddings) and its records' splits."""

    dataset: str
    speaker: str
    who: str
    total: np.ndarray
    seconds: float = 0.0
    splits: dict = field(default_factory=dict)  # split -> records

    @property
    def name(self) -> str:
        return f"{self.dataset}:{self.speaker}"

    @property
    def unseen(self) -> str | None:
        """The unseen split all of this speaker's records are in, or None."""
        held = [s for s in self.splits if s.endswith("_unseen")]
        return held[0] if held and len(self.splits) == 1 else None

    def voice(self) -> np.ndarray:
        norm = float(np.linalg.norm(self.total))
        return (self.total / norm).astype(np.float32) if norm > 0 else self.total.astype(np.float32)


class Voices:
    """Every speaker's voice, summed from its records' embeddings as they stream past."""

    def __init__(self):
        self.speakers: dict[tuple[str, str], Speaker] = {}

    def add(self, dataset: str, entry: dict, split: str, embedding: np.ndarray | None) -> None:
        key = (dataset, entry["speaker"])
        s = self.speakers.get(key)
        if s is None:
            s = self.speakers[key] = Speaker(
                dataset, entry["speaker"], entry.get("who") or entry["speaker"], np.zeros(0, np.float32)
            )
        s.splits[split] = s.splits.get(split, 0) + 1
        if embedding is not None and entry.get("hashes", 0) > 0:  # only records with a sound
            if not len(s.total):
                s.total = np.zeros(len(embedding), np.float32)
            s.total += embedding
            s.seconds += entry["duration"]


def link_speakers(voices: Voices, rules: VoiceRules, earlier: Mapping[str, dict]) -> list[dict]:
    """Every decided pair of (held-out unseen speaker, speaker with train records): linked or not,
    how, its similarity now and when decided; `earlier` holds the decisions file's rows by pair key."""
    speakers = [voices.speakers[k] for k in sorted(voices.speakers)]
    held = [s for s in speakers if s.unseen]
    others = [s for s in speakers if s.splits.get("train")]
    if not held or not others:
        return []
    wanted = _wanted(held, others, rules, earlier)
    sims = _similarities(held, others, rules, wanted)
    by_who: dict[str, list[int]] = {}
    for j, o in enumerate(others):
        by_who.setdefault(o.who, []).append(j)
    same_id = {
        (i, j) for i, h in enumerate(held) for j in by_who.get(h.who, []) if others[j].dataset != h.dataset
    }
    decisions = []
    for i, j in sorted(set(sims) | wanted | same_id):
        h, o = held[i], others[j]
        if (h.dataset, h.speaker) != (o.dataset, o.speaker):
            row = _decide(h, o, sims.get((i, j)), rules, earlier)
            if row is not None:
                decisions.append(row)
    return decisions


def _similarities(held: list[Speaker], others: list[Speaker], rules: VoiceRules, wanted: set) -> dict:
    """{(held index, other index): cosine similarity} of the pairs that both have enough audio and
    are at least min_similarity, the NEAR_PER_SPEAKER closest below it (within NEAR) of each held-out
    speaker, and the `wanted` pairs (named in the config or decided earlier: shown with their score
    whatever it is): a matrix product of the held-out voices against blocks of the others."""
    out: dict = {}
    near: dict[int, list[tuple[float, int]]] = {}  # held index -> its closest pairs below the threshold
    h_ok = [i for i, h in enumerate(held) if len(h.total)]
    if not h_ok:
        return out
    hv = np.stack([held[i].voice() for i in h_ok])
    enough_h = np.array([held[i].seconds >= rules.min_seconds for i in h_ok])
    for start in range(0, len(others), BLOCK):
        block = [j for j in range(start, min(start + BLOCK, len(others))) if len(others[j].total)]
        if not block:
            continue
        sim = hv @ np.stack([others[j].voice() for j in block]).T
        enough = (
            enough_h[:, None] & np.array([others[j].seconds >= rules.min_seconds for j in block])[None, :]
        )
        for a, b in zip(*np.nonzero(enough & (sim >= rules.min_similarity)), strict=True):
            out[(h_ok[a], block[b])] = round(float(sim[a, b]), 4)
        band = enough & (sim >= rules.min_similarity - NEAR) & (sim < rules.min_similarity)
        for a in np.flatnonzero(band.any(axis=1)):
            cols = np.flatnonzero(band[a])
            top = cols[np.argsort(-sim[a, cols], kind="stable")[:NEAR_PER_SPEAKER]]
            pairs = near.setdefault(h_ok[a], []) + [(round(float(sim[a, b]), 4), block[b]) for b in top]
            near[h_ok[a]] = sorted(pairs, key=lambda p: (-p[0], p[1]))[:NEAR_PER_SPEAKER]
        row_of, col_of = {i: a for a, i in enumerate(h_ok)}, {j: b for b, j in enumerate(block)}
        for i, j in wanted:
            if (i, j) not in out and i in row_of and j in col_of:
                out[(i, j)] = round(float(sim[row_of[i], col_of[j]]), 4)
    for i, pairs in near.items():
        out.update({(i, j): s for s, j in pairs})
    return out


def _wanted(held: list[Speaker], others: list[Speaker], rules: VoiceRules, earlier: Mapping) -> set:
    """(held index, other index) of the pairs named in confirm/deny or decided earlier."""
    h_of = {s.name: i for i, s in enumerate(held)}
    o_of = {s.name: j for j, s in enumerate(others)}
    pairs = [tuple(p) for p in rules.confirm + rules.deny] + [tuple(k.split("|")) for k in earlier]
    out = set()
    for a, b in pairs:
        for x, y in ((a, b), (b, a)):
            if x in h_of and y in o_of:
                out.add((h_of[x], o_of[y]))
    return out


def pair_key(h: Speaker, o: Speaker) -> str:
    return f"{h.name}|{o.name}"


def _decide(h: Speaker, o: Speaker, sim: float | None, rules: VoiceRules, earlier: Mapping) -> dict | None:
    """The decision row of a pair, or None for a pair not decided (far apart, or too little audio)."""
    pair = frozenset((h.name, o.name))
    before = earlier.get(pair_key(h, o))
    if before is not None and (before.get("rules") != rules.digest or before["how"] not in DECIDED):
        before = None  # decided under other rules, or by the config: decide again
    if pair in rules.deny:
        linked, how, decided = False, "denied", sim
    elif pair in rules.confirm:
        linked, how, decided = True, "confirmed", sim
    elif h.who == o.who and h.dataset != o.dataset:
        linked, how, decided = True, "id", sim
    elif before is not None:
        linked, how, decided = before["linked"], before["how"], before["decided_similarity"]
    elif sim is None:
        return None
    else:
        linked = sim >= rules.min_similarity
        how, decided = ("voice" if linked else "not_linked"), sim
    return _row(h, o, linked, how, sim, decided, rules)


def _row(h: Speaker, o: Speaker, linked: bool, how: str, sim, decided, rules: VoiceRules) -> dict:
    row = {
        "pair": pair_key(h, o),
        "held_out": {
            "dataset": h.dataset,
            "speaker": h.speaker,
            "split": h.unseen,
            "seconds": round(h.seconds, 3),
        },
        "speaker": {"dataset": o.dataset, "speaker": o.speaker, "seconds": round(o.seconds, 3)},
        "linked": linked,
        "how": how,
        "similarity": sim,
        "decided_similarity": decided,
        "rules": rules.digest,
    }
    if how in DECIDED and sim is not None and (sim >= rules.min_similarity) != linked:
        row["drifted"] = True  # decided otherwise earlier: confirm or deny the pair to settle it
    return row


def read_decisions(path: str | None) -> dict[str, dict]:
    """The decisions file's rows by pair key ({} without one: a first run)."""
    if not path or not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return {row["pair"]: row for row in map(json.loads, f)}


def linked_speakers(decisions: Iterable[dict]) -> dict[tuple[str, str], dict]:
    """{(dataset, speaker id): the held-out speaker it is linked to, how and how similar} for every
    linked speaker (the most similar held-out speaker where it is linked to several)."""
    out: dict[tuple[str, str], dict] = {}
    for row in decisions:
        if not row["linked"]:
            continue
        key = (row["speaker"]["dataset"], row["speaker"]["speaker"])
        if key not in out or _rank(row["similarity"]) > _rank(out[key]["score"]):
            out[key] = {"matched": {**row["held_out"], "how": row["how"]}, "score": row["similarity"]}
    return out


def _rank(similarity: float | None) -> float:
    return -2.0 if similarity is None else similarity
