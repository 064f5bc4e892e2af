"""The index of every dataset's held-out records, which the identity jobs look train records up in:
their span keys, utterance keys and fingerprints, and a lookup that finds a record's best match
(sharflow.identity.links: the jobs that build and ask it)."""

import json
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from sharflow.core.atomic import atomic_file
from sharflow.core.errors import SharflowError
from sharflow.core.layout import IdentityIndexFiles
from sharflow.identity.fingerprint import HASH_DTYPE, shared, triplets

CANDIDATE_VOTES = 2  # triplets a held-out record shares with a query at one offset to be scored
MAX_CANDIDATES = 64  # held-out records scored per query at most: those sharing the most triplets
_INDEX_ARRAYS = ("hashes", "times", "sizes", "triplets")
_LOW = np.uint64(0xFFFFFFFF)  # a triplet's pair position, below its key
OWNER_BLOCK = 9  # pairs a block of the owners' table (512; a record has ~100 pairs a second)
OFFSET_BITS = 24  # a time offset of ± 8 M frames (18 hours at 8 ms) fits below the record index


def where(dataset: str, entry: dict) -> dict:
    """A record's place in a link or the index: its dataset, file and span."""
    return {
        "dataset": dataset,
        "audio_filepath": entry["audio_filepath"],
        "offset": entry["offset"],
        "duration": entry["duration"],
    }


@dataclass(frozen=True)
class MatchRules:
    """When two fingerprints are the same content (identity.min_score, identity.min_matched)."""

    min_score: float = 0.15
    min_matched: int = 8
    train_duplicates: str = "keep"  # keep | drop | mark


class HeldOut:
    """The held-out records of every dataset: their span keys, utterance keys and fingerprints.

    Two arrays index the fingerprints: their pairs (hashes and times), each record's run sorted by
    hash (8 bytes a hash), and their triplets (sharflow.identity.fingerprint.triplets), each a
    key and the position of one of its anchor's pairs (whose record and time it takes), sorted (8
    bytes a triplet, about one a hash; 4 more of bucket bounds when loaded). A lookup (`best`) finds
    its candidates by triplets, which are rare, then scores each candidate by its pairs. The
    triplets it meets grow with the held-out set (~28 a lookup of ~6,200 keys at 10^4 records, ~320
    at 10^6), each a few reads and a place in two sorts; a pair's posting list would grow the same
    way and name thousands of records."""

    def __init__(self):
        self.items: list[dict] = []
        self.spans: dict[str, int] = {}
        self.utterances: dict[str, int] = {}
        self._chunks: list[tuple[np.ndarray, np.ndarray]] = []
        self._pairs = 0
        self.hashes = self.times = self.sizes = self.starts = self.triplets = self.bounds = None
        self.next_starts = self.block_owners = None
        self.shift = 32

    def add(self, dataset: str, entry: dict, split: str, hashes: np.ndarray) -> None:
        i = len(self.items)
        self.items.append({**where(dataset, entry), "split": split})
        self.spans.setdefault(entry["span"], i)
        if entry.get("utterance"):
            self.utterances.setdefault(entry["utterance"], i)
        pairs = np.asarray(hashes, dtype=HASH_DTYPE)
        pairs = pairs[np.lexsort((pairs["time"], pairs["hash"]))]
        keys, rows = triplets(pairs["hash"], pairs["time"])
        self._chunks.append(
            (pairs, (keys.astype(np.uint64) << np.uint64(32)) | (rows + self._pairs).astype(np.uint64))
        )
        self._pairs += len(pairs)

    def freeze(self) -> None:
        """Join the records' pairs (in record order) and sort their triplets by key, then position
        (each (key, position) is one triplet's: one order, deterministic)."""
        sizes = np.array([len(pairs) for pairs, _ in self._chunks], dtype=np.int64)
        self.sizes = sizes
        pairs = np.concatenate([c[0] for c in self._chunks] or [np.zeros(0, HASH_DTYPE)])
        self.hashes, self.times = np.ascontiguousarray(pairs["hash"]), np.ascontiguousarray(pairs["time"])
        del pairs
        self.triplets = np.concatenate([c[1] for c in self._chunks] or [np.zeros(0, np.uint64)])
        self._chunks = []
        self.triplets.sort()
        self._derive()

    def _derive(self) -> None:
        """What the saved arrays give: where each record's pairs start (and the next's), the first
        record of each block of 2^OWNER_BLOCK pairs (_owners), and where each bucket of triplet keys
        (by their top bits, about one triplet a bucket) starts: a lookup reads its bucket, not a
        binary search's ~25 scattered reads. The keys are hashed, so the buckets are even. 4 bytes a
        triplet at most, and 8 a held-out record."""
        self.starts = np.concatenate(([0], np.cumsum(self.sizes)[:-1])).astype(np.int64)
        self.next_starts = np.append(self.starts[1:], np.iinfo(np.int64).max)
        blocks = np.arange(0, int(self.sizes.sum()), 1 << OWNER_BLOCK)
        self.block_owners = np.searchsorted(self.starts, blocks, side="right") - 1
        bits = max(1, min(31, int(len(self.triplets)).bit_length() - 1))
        self.shift = 32 - bits
        counts = np.bincount((self.triplets >> np.uint64(64 - bits)).astype(np.int64), minlength=1 << bits)
        self.bounds = np.concatenate(([0], np.cumsum(counts))).astype(
            np.int64 if len(self.triplets) >> 31 else np.int32
        )

    def save(self, files: IdentityIndexFiles) -> dict:
        """Write the frozen index (its arrays and records) for the check parts; the {span: record} and
        {utterance: record} keys, for the index's summary."""
        with atomic_file(files.index, "wb") as f:
            np.savez(f, **{name: getattr(self, name) for name in _INDEX_ARRAYS})
        with atomic_file(files.held_out, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(item, ensure_ascii=False) + "\n" for item in self.items)
        return {"spans": self.spans, "utterances": self.utterances}

    @classmethod
    def load(cls, files: IdentityIndexFiles, keys: Mapping) -> "HeldOut":
        """The index `save` wrote, with its keys (the summary's)."""
        held = cls()
        with np.load(files.index) as arrays:
            missing = sorted(set(_INDEX_ARRAYS) - set(arrays.files))
            if missing:
                raise SharflowError(
                    f"{files.index} is an identity index an older sharflow wrote (it has no {missing}): "
                    "rerun with --forcerun identity_index to index the held-out records again"
                )
            for name in _INDEX_ARRAYS:
                setattr(held, name, arrays[name])
        held._derive()
        with open(files.held_out, encoding="utf-8") as f:
            held.items = [json.loads(line) for line in f]
        held.spans, held.utterances = dict(keys["spans"]), dict(keys["utterances"])
        return held

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, name).nbytes for name in _INDEX_ARRAYS)

    def best(self, hashes: np.ndarray, rules: MatchRules) -> tuple[int, float, int] | None:
        """(held-out record, score, matched hashes) of the best content match of a fingerprint
        (a structured array of hash and time), or None below the rules. Of the records that share
        at least CANDIDATE_VOTES triplets with it at one offset (± 1 frame), the MAX_CANDIDATES
        that share the most are scored by their pairs (as fingerprint.match scores them)."""
        if len(hashes) == 0 or len(self.triplets) == 0:
            return None
        query = np.asarray(hashes, dtype=HASH_DTYPE)
        keys, rows = triplets(query["hash"], query["time"], moved=True)
        candidates = self._candidates(keys, query["time"][rows])
        if len(candidates) == 0:
            return None
        query = query[np.argsort(query["hash"], kind="stable")]
        owners, tolerant = self._pair_votes(query, candidates)
        scores = tolerant / np.minimum(len(query), self.sizes[owners])
        ok = (scores >= rules.min_score) & (tolerant >= rules.min_matched)
        if not ok.any():
            return None
        i = np.flatnonzero(ok)[np.argmax(scores[ok])]  # the first (lowest owner) of the best
        return int(owners[i]), float(scores[i]), int(tolerant[i])

    def _candidates(self, keys: np.ndarray, at: np.ndarray) -> np.ndarray:
        """The records (ascending) whose triplets meet a query's (`keys` at times `at`) at one offset
        CANDIDATE_VOTES times or more, the MAX_CANDIDATES with the most (then the lowest record)."""
        pos, key = self._triplet_postings(keys)
        if len(pos) == 0:
            return pos
        offsets = self.times[(self.triplets[pos] & _LOW).astype(np.int64)].astype(np.int64) - at[key]
        # one vote a stored triplet at an offset: a key the query holds twice, or finds by two of its
        # time steps' variants, meets that triplet once
        met = _distinct(((offsets + (1 << (OFFSET_BITS - 1))) << 32) | pos)
        owners = self._owners((self.triplets[met & 0xFFFFFFFF] & _LOW).astype(np.int64))
        owners, votes = _votes(owners, (met >> 32) - (1 << (OFFSET_BITS - 1)))
        firsts = _run_starts(owners)
        owners, votes = owners[firsts], np.maximum.reduceat(votes, firsts)
        owners, votes = owners[votes >= CANDIDATE_VOTES], votes[votes >= CANDIDATE_VOTES]
        chosen = np.lexsort((owners, -votes))[:MAX_CANDIDATES]
        return np.sort(owners[chosen])

    def _owners(self, pairs: np.ndarray) -> np.ndarray:
        """The record of each pair position: the last record starting at or before it (an empty
        record starts where the next does), walked from the first record of its block of
        2^OWNER_BLOCK pairs (a step or two; a binary search over every record's start takes ~17
        reads, and a lookup asks for every triplet it finds, more as the held-out set grows)."""
        owners = self.block_owners[pairs >> OWNER_BLOCK]
        later = self.next_starts[owners] <= pairs
        while later.any():
            owners = owners + later
            later = self.next_starts[owners] <= pairs
        return owners

    def _triplet_postings(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The positions in the triplets of every entry whose key equals one of `keys`, in key order,
        and which key (its index in `keys`) each is: each key's bucket read whole, its equal keys
        kept."""
        bucket = (keys >> np.uint32(self.shift)).astype(np.int64)
        lo = self.bounds[bucket].astype(np.int64)
        size = self.bounds[bucket + 1] - lo
        which = np.repeat(np.arange(len(keys)), size)
        pos = np.repeat(lo - np.concatenate(([0], np.cumsum(size)[:-1])), size) + np.arange(len(which))
        equal = (self.triplets[pos] >> np.uint64(32)) == keys[which]
        return pos[equal], which[equal]

    def _pair_votes(self, query: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(record, hashes at one offset ± 1 frame) for every offset at which a candidate's pairs
        meet the query's, by record then offset."""
        spans = [(self.starts[o], self.starts[o] + self.sizes[o]) for o in candidates.tolist()]
        tag = np.repeat(np.arange(len(candidates), dtype=np.uint64), self.sizes[candidates]) << np.uint64(32)
        index = tag | np.concatenate([self.hashes[a:b] for a, b in spans]).astype(np.uint64)
        times = np.concatenate([self.times[a:b] for a, b in spans])
        q = (np.arange(len(candidates), dtype=np.uint64)[:, None] << np.uint64(32)) | query["hash"].astype(
            np.uint64
        )
        iq, ii = shared(q.ravel(), index)
        offsets = times[ii].astype(np.int64) - np.tile(query["time"], len(candidates))[iq]
        which, tolerant = _votes((index[ii] >> np.uint64(32)).astype(np.int64), offsets)
        return candidates[which], tolerant


def _votes(owners: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, count) of each (owner, offset) the matches fall on, by owner then offset, each count
    with its owner's counts one frame either side (a copy's offsets agree to within a frame)."""
    keys = np.sort((owners.astype(np.int64) << OFFSET_BITS) | (offsets + (1 << (OFFSET_BITS - 1))))
    firsts = _run_starts(keys)
    keys, counts = keys[firsts], np.diff(np.r_[firsts, len(keys)])
    near = np.diff(keys) == 1  # the same owner, offsets one frame apart
    tolerant = counts.copy()
    tolerant[1:] += np.where(near, counts[:-1], 0)
    tolerant[:-1] += np.where(near, counts[1:], 0)
    return keys >> OFFSET_BITS, tolerant


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, ascending (np.unique's, without its overheads on a few hundred)."""
    values = np.sort(values)
    return values[_run_starts(values)]


def _run_starts(ordered: np.ndarray) -> np.ndarray:
    """Where each run of equal values of `ordered` (sorted) starts: its first index."""
    return np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]][: len(ordered)])
