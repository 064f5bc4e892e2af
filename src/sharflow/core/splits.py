"""Which split a record is in: train, or held out as dev/test, seen or unseen speaker.

Two levels, each decided by a keyed hash of the thing's own id and the seed, so that adding
records or speakers never moves an existing one between splits:

1. **Unseen speakers**: a speaker listed under `dev_unseen.speakers` / `test_unseen.speakers`, or
   whose hash falls in the first `dev_unseen.fraction` (then the next `test_unseen.fraction`) of
   [0, 1), has every utterance in that split.
2. **Seen utterances** of every other speaker: an utterance listed under `dev_seen.utterances` /
   `test_seen.utterances` (its `audio_filepath` as in the manifest), or whose span's hash falls in
   the first `dev_seen.fraction` (then `test_seen.fraction`), is held out; the rest is train.

A speaker is its speaker id (`core.speakers`), whatever its dataset: the same id in two datasets
is one speaker with one split, unless a dataset says its ids are its own (speaker_identity). An
utterance's hash key is its span (sharflow.io.audio.span_key): the audio file's name and size
in bytes, offset and duration (to the millisecond), so the same audio in two datasets (or moved to
another folder) gets the same decision, whatever its path relative to each dataset's audio root.
"""

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from sharflow.core.errors import SharflowError

TRAIN = "train"
UNSEEN = ("dev_unseen", "test_unseen")
SEEN = ("dev_seen", "test_seen")
SPLITS = (TRAIN, "dev_seen", "dev_unseen", "test_seen", "test_unseen")  # HiFiTTS-2's names
HELD_OUT = SPLITS[1:]


def context_pool(split: str) -> str:
    """The split whose utterances a record of `split` may take as context audio: an unseen
    speaker's own split (its other utterances there); train for train and the seen splits, whose
    speakers the model has heard. So no train record's context is held out, and no held-out
    utterance is the context of a record outside its split."""
    return split if split in UNSEEN else TRAIN


def unit_hash(seed: int, kind: str, key: str) -> float:
    """A number in [0, 1) from blake2b of (seed, kind, key): the same for the same three, and
    independent of anything else."""
    digest = hashlib.blake2b(f"{seed}\0{kind}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


def speaker_identity(dataset: str, speaker: str, own_ids: bool) -> str:
    """Who a speaker id names across datasets: the id itself (datasets.<name>.speaker_ids: shared,
    the default: the same id in two datasets is one person, as in LibriTTS and LibriTTS-R), or the
    id within its dataset (own: `<dataset>/<id>`, for corpora that each number their speakers)."""
    return f"{dataset}/{speaker}" if own_ids else speaker


@dataclass(frozen=True)
class SplitRules:
    """One dataset's split settings (the `splits` config block, its per-dataset override merged)."""

    seed: int = 0
    fractions: Mapping[str, float] = field(default_factory=dict)  # split -> fraction (held-out splits)
    speakers: Mapping[str, str] = field(default_factory=dict)  # listed speaker id -> unseen split
    utterances: Mapping[str, str] = field(default_factory=dict)  # listed audio_filepath -> seen split

    @classmethod
    def from_config(cls, block: Mapping, where: str = "splits") -> "SplitRules":
        """From a config block {seed, dev_unseen: {fraction, speakers}, ..., test_seen: {fraction,
        utterances}}; a SharflowError names the key at `where` when the block contradicts itself."""
        fractions = {s: float(block.get(s, {}).get("fraction", 0.0)) for s in HELD_OUT}
        for level, names in (("unseen", UNSEEN), ("seen", SEEN)):
            if sum(fractions[s] for s in names) >= 1.0:
                raise SharflowError(
                    f"{where}: the {level} fractions ({', '.join(names)}) add up to 1 or more, which leaves "
                    "no train data; lower them"
                )
        speakers = _listed(block, UNSEEN, "speakers", where)
        utterances = _listed(block, SEEN, "utterances", where)
        return cls(int(block.get("seed", 0)), fractions, speakers, utterances)

    @property
    def enabled(self) -> bool:
        return any(self.fractions.values()) or bool(self.speakers) or bool(self.utterances)

    def speaker_split(self, speaker: str, who: str | None = None) -> str | None:
        """The unseen split of a speaker, or None for a seen speaker; `who` is the speaker as the
        hash sees it (speaker_identity), the id itself by default."""
        if speaker in self.speakers:
            return self.speakers[speaker]
        return self._by_hash(UNSEEN, "speaker", who or speaker)

    def split(self, speaker: str, audio_filepath: str, span: str, who: str | None = None) -> str:
        """The split of an utterance of `speaker` (its id; `who`: as speaker_identity names it) at
        `audio_filepath` (as in the manifest), `span` its span_key."""
        unseen = self.speaker_split(speaker, who)
        if unseen:
            return unseen
        if audio_filepath in self.utterances:
            return self.utterances[audio_filepath]
        return self._by_hash(SEEN, "utterance", span) or TRAIN

    def _by_hash(self, splits: tuple[str, str], kind: str, key: str) -> str | None:
        if not any(self.fractions[s] for s in splits):
            return None
        u, edge = unit_hash(self.seed, kind, key), 0.0
        for s in splits:
            edge += self.fractions[s]
            if u < edge:
                return s
        return None


def _listed(block: Mapping, splits: tuple[str, str], key: str, where: str) -> dict[str, str]:
    """{listed item: split} of `key` (speakers or utterances) under `splits`; an item in both fails."""
    out: dict[str, str] = {}
    for s in splits:
        for item in block.get(s, {}).get(key, []) or []:
            if out.get(str(item), s) != s:
                raise SharflowError(
                    f"{where}: {item!r} is listed under both {out[str(item)]}.{key} and {s}.{key}"
                )
            out[str(item)] = s
    return out
