"""One long recording into speaker segments, with every second accounted for.

`Segmenter` holds the models of one rank (Silero VAD, the speaker embedder) and runs the steps of
sharflow.segment.turns and sharflow.segment.cut over a recording's 16 kHz mono audio. Its result
partitions the recording, sample by sample, into kept segments (with the recording's speaker
label) and dropped stretches with their reason, so that seconds in = kept + dropped exactly.

A recording's result depends on its audio and the settings alone: the VAD's probabilities do not
depend on the other clips of a batch (sharflow.models.vad), the GE2E embedder's fixed-shape batches
neither, so any number of parts, ranks or batch sizes gives the same segments.
"""

from dataclasses import dataclass, field

import numpy as np

from sharflow.segment import cut, turns

EMBED_CHUNK = 512  # windows a call to the embedder (bounds the partials it holds)
VAD_CHUNK = 960  # VAD frames (30.72 s) a row of the VAD's batch
VAD_WARMUP = 64  # frames (2.05 s) before a chunk that the LSTM runs over and whose output is dropped
KEPT = "kept"


@dataclass
class Segmented:
    """A recording's segments and accounting, in samples at 16 kHz."""

    num_samples: int
    speakers: int
    # (start, end, speaker): speakers numbered 0, 1, ... in order of their first segment
    segments: list[tuple[int, int, int]]
    stretches: list[tuple[int, int, str]]  # the whole recording: KEPT or a drop reason
    transcripts: list[tuple[str, float]] = field(default_factory=list)  # (text, confidence) a segment
    # (speakers, dim) unit voice of each speaker, in their numbering: what links them across recordings
    voices: np.ndarray | None = None

    def seconds(self) -> dict[str, float]:
        """Seconds kept and dropped by reason; they sum to the recording's duration."""
        out = dict.fromkeys((KEPT, *cut.REASONS), 0)
        for start, end, what in self.stretches:
            out[what] += end - start
        return {k: v / turns.RATE for k, v in out.items()}


class Segmenter:
    """Speech regions, speaker turns and segments of recordings, on one device."""

    def __init__(
        self,
        device: str = "cpu",
        turn_settings: turns.TurnSettings | None = None,
        cut_settings: cut.CutSettings | None = None,
        embedder=None,
    ):
        from sharflow.models.speaker_embedders.ge2e import GE2EEmbedder
        from sharflow.models.vad import SileroVad

        self.turns = turn_settings or turns.TurnSettings()
        self.cut = cut_settings or cut.CutSettings()
        self.vad = SileroVad(device)
        # the volume normalised: a voice louder or quieter in one stretch is the same voice
        self.embedder = embedder or GE2EEmbedder(device, level="normalize")

    def probabilities(self, audio: np.ndarray) -> np.ndarray:
        """The VAD's speech probability per frame of a recording, computed in chunks of VAD_CHUNK
        frames that the VAD steps through side by side (one LSTM step for many chunks), each chunk
        after VAD_WARMUP frames of the audio before it, whose output is dropped. The chunks depend
        on the recording alone, so the probabilities do too."""
        frames = -(-len(audio) // turns.FRAME)
        step = VAD_CHUNK * turns.FRAME
        clips = [audio[max(0, k - VAD_WARMUP * turns.FRAME) : k + step] for k in range(0, len(audio), step)]
        out = self.vad.probabilities(clips)
        probs = [p if k == 0 else p[VAD_WARMUP:] for k, p in enumerate(out)]
        joined = np.concatenate(probs) if probs else np.zeros(0, np.float32)
        assert len(joined) == frames, (len(joined), frames)
        return joined

    def embed(self, audio: np.ndarray, wins: list[tuple[int, int, int]]) -> np.ndarray:
        if not wins:
            return np.zeros((0, self.embedder.dim), np.float32)
        out = []
        for first in range(0, len(wins), EMBED_CHUNK):
            chunk = wins[first : first + EMBED_CHUNK]
            out.append(self.embedder.embed([audio[s:e] for _, s, e in chunk]))
        return np.concatenate(out)

    def analyse(self, audio: np.ndarray) -> "Analysis":
        """The models' part of segmenting one recording (mono float32 at 16 kHz): the VAD's
        probabilities, the speech spans and the windows' speaker embeddings."""
        probs = self.probabilities(audio)
        spans = turns.speech_spans(probs, len(audio), self.turns)
        wins = turns.windows(spans, self.turns)
        return Analysis(len(audio), self.turns, probs, spans, wins, self.embed(audio, wins))

    def segment(self, audio: np.ndarray) -> Segmented:
        """The segments and accounting of one recording (mono float32 at 16 kHz)."""
        return decide(self.analyse(audio), self.turns, self.cut)


@dataclass(frozen=True)
class Analysis:
    """What the models found in a recording, from which its speakers and segments are decided
    (`decide`): the turn settings' min_pause, window and hop made it, its thresholds did not."""

    num_samples: int
    turns: turns.TurnSettings
    probs: np.ndarray
    spans: list[tuple[int, int]]
    wins: list[tuple[int, int, int]]
    embeddings: np.ndarray


MADE_BY = ("min_pause", "window", "hop")  # the turn settings an Analysis was made with


def decide(analysis: Analysis, turn_settings: turns.TurnSettings, cut_settings: cut.CutSettings) -> Segmented:
    """A recording's speakers, segments and accounting from its Analysis: the clustering, attribution
    and cutting, with no model (milliseconds: the explorer tries thresholds with it)."""
    made = {k: getattr(analysis.turns, k) for k in MADE_BY}
    if made != {k: getattr(turn_settings, k) for k in MADE_BY}:
        raise ValueError(f"the analysis was made with {made}: decide with those")
    probs, spans, wins, embeddings = analysis.probs, analysis.spans, analysis.wins, analysis.embeddings
    centroids = turns.speakers(spans, wins, embeddings, turn_settings)
    pieces = []
    owner = np.array([w[0] for w in wins], np.int64)
    bounds = np.searchsorted(owner, np.arange(len(spans) + 1))
    for i, span in enumerate(spans):
        a, b = bounds[i], bounds[i + 1]
        cells = turns.labels(span, [w[1:] for w in wins[a:b]], embeddings[a:b], centroids, turn_settings)
        pieces.extend(turns.pieces(span, cells, probs, turn_settings))
    kept, dropped = cut.segments(pieces, probs, cut_settings)
    order = {}  # speakers numbered in order of their first kept segment
    for _, _, k in kept:
        order.setdefault(k, len(order))
    kept = [(a, b, order[k]) for a, b, k in kept]
    stretches = cut.account(analysis.num_samples, [(s, e, KEPT) for s, e, _ in kept] + dropped)
    voices = centroids[list(order)] if order else np.zeros((0, centroids.shape[1]), np.float32)
    return Segmented(analysis.num_samples, len(centroids), kept, stretches, voices=voices)
