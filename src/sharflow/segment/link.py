"""Speakers linked across recordings by voice (`segment.link_similarity`).

Speakers are found per recording (sharflow.segment.turns); the same person in two recordings would be
two speakers. With linking on, the merge walks the recordings in order and gives each recording's
speaker the name of an earlier voice whose mean voice is at least `similarity` alike (cosine of the
GE2E voices, unit vectors), else keeps its own name and starts a voice. Two speakers of one
recording never take the same voice (the recording's clustering already told them apart); a speaker
named in the listing keeps its name, and unnamed voices alike to it take that name.

Memory and time are bounded by the number of voices (one mean each), never a matrix over every pair
of recording speakers; the walk is in the recordings' order, so the names are the same for any
number of parts and ranks.
"""

import numpy as np

from sharflow.segment.turns import unit


class Linker:
    """The voices met so far: a name and a running sum of unit voices each."""

    def __init__(self, similarity: float, dim: int = 256):
        self.similarity = similarity
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.sums = np.zeros((0, dim), np.float64)
        self.linked = 0  # recording speakers that took an earlier voice's name

    def _add(self, name: str, voice: np.ndarray) -> str:
        if name in self.index:
            self.sums[self.index[name]] += voice
        else:
            self.index[name] = len(self.names)
            self.names.append(name)
            self.sums = np.vstack([self.sums, voice[None]])
        return name

    def recording(self, voices: np.ndarray, own: list[str], known: list[bool]) -> list[str]:
        """The names of one recording's speakers: `voices` (speakers, dim), their `own` names, and
        whether each was named by the user (`known`: kept as it is)."""
        voices = unit(np.asarray(voices, np.float64))
        names: list[str | None] = [None] * len(own)
        taken: set[int] = set()
        for i in (i for i in range(len(own)) if known[i]):  # the user's names first
            names[i] = self._add(own[i], voices[i])
            taken.add(self.index[own[i]])
        means = unit(self.sums) if len(self.names) else self.sums
        for i in (i for i in range(len(own)) if not known[i]):
            sims = means @ voices[i] if len(means) else np.zeros(0)
            if len(taken):
                sims[sorted(t for t in taken if t < len(sims))] = -np.inf
            best = int(np.argmax(sims)) if len(sims) else -1
            if best >= 0 and sims[best] >= self.similarity:
                names[i] = self._add(self.names[best], voices[i])
                self.linked += 1
            else:
                names[i] = self._add(own[i], voices[i])
            taken.add(self.index[names[i]])
        return names
