"""The segment stage's jobs: a part's recordings segmented one at a time, resumable by recording, and
the merge of the parts into the dataset's segment manifest and its accounting.

- `plan_parts`: the recordings in parts balanced by hours of audio (LPT, sharflow.work.balance);
- `segment_part`: a part's recordings bin-packed by hours onto the job's ranks (a process per GPU,
  or CPU processes: sharflow.work.ranks), each rank running `run_part` with its own models;
- `run_part`: each recording in turn; its result (segments, transcripts, where every second went)
  is written atomically to `<part dir>/<key>.json` when it is complete, so a killed job resumes at
  the recording it was on. A recording that cannot be read is accounted as unreadable;
- `merge`: every recording's result, in the order of the recordings, into one NeMo manifest (a line
  a segment: the long file, offset, duration, text, speaker) that prepare reads like any other, and
  the stats (seconds in = kept + dropped by reason, per recording and in all).

A recording's result depends only on its audio and the settings, so the manifest is the same bytes
for any number of parts and ranks.
"""

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from sharflow.core.atomic import atomic_file, read_json, write_json
from sharflow.core.speakers import Speaker
from sharflow.io import containers
from sharflow.io.audio import probe_audio, read_span, resolve_audio_path
from sharflow.segment import cut
from sharflow.segment.cut import CutSettings
from sharflow.segment.link import Linker
from sharflow.segment.recording import KEPT, Segmenter
from sharflow.segment.transcripts import transcribe
from sharflow.segment.turns import RATE, TurnSettings
from sharflow.work.balance import lpt_assign
from sharflow.work.ranks import Rank, rank_job

log = logging.getLogger(__name__)

# A segment part fitted to its work (segment.workers 0) starts a CPU rank per this many seconds of its
# recordings: a rank runs ~88 audio-s a second (docs: performance) and its start-up imports NeMo's ASR
# (over 7 CPU-s, by hand), so a rank pays for itself from about ten minutes of audio
SEGMENT_RANK_SECONDS = 600.0


@dataclass(frozen=True)
class Recording:
    """One long recording of a dataset: its path under the dataset's audio root (a local folder or
    an s3:// prefix) and what the user knows of it."""

    path: str
    language: str = "en"
    # known speaker names, in order of first appearance in the recording (optional)
    speakers: tuple[str, ...] = ()
    # the file's version when it was planned ([size, mtime] or [size, ETag]: sharflow.io.storage.stamp)
    stamp: tuple = ()

    @property
    def key(self) -> str:
        """The recording's name in its speakers' names: the stem (a tar member's own) and a digest of
        the whole path."""
        stem = Path(containers.split_member(self.path)[1] or self.path).stem[:40] or "recording"
        return f"{stem}-{hashlib.sha256(self.path.encode()).hexdigest()[:12]}"

    @property
    def result_name(self) -> str:
        """The file name of its result: the key, and a digest of its version where it has one (a file
        replaced under its name is segmented again, never read from the old one's result)."""
        if not self.stamp:
            return self.key
        return f"{self.key}-{hashlib.sha256(json.dumps(list(self.stamp)).encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class Transcription:
    transcriber: object  # sharflow.models.asr.Transcriber built with confidence=True
    source: str  # what the manifest names as the transcript's source ("asr:<model>")
    min_confidence: float = 0.0
    batch_seconds: float = 120.0


@dataclass(frozen=True)
class SegmentSettings:
    """What a rank needs to build its models (picklable: spawned ranks get it)."""

    turns: TurnSettings = field(default_factory=TurnSettings)
    cut: CutSettings = field(default_factory=CutSettings)
    asr_model: str | None = None  # a NeMo ASR .nemo (or a model name where there is internet)
    asr_random: bool = False  # the model was built with random weights (say so in the log)
    min_confidence: float = 0.0
    asr_batch_seconds: float = 120.0

    @property
    def source(self) -> str:
        """The transcript's source, as the manifest names it."""
        return f"asr:{Path(self.asr_model).name}" if self.asr_model else "none"


def segment_part(
    recordings: list[Recording],
    durations: dict[str, float],
    audio_root: str,
    out_dir: Path,
    settings: SegmentSettings,
    *,
    device: str = "auto",
    workers: int = 1,
    gpus: int = 0,
    fit_ranks: bool = False,
    what: str = "segment part",
) -> dict[str, int]:
    """A part's recordings over the job's ranks, bin-packed by hours (with `fit_ranks`, no more CPU
    ranks than their audio pays for: work.ranks.cpu_ranks_for); {"done": n, "resumed": n}."""
    by_path = {r.path: r for r in recordings}
    out_dir.mkdir(parents=True, exist_ok=True)
    # a result a killed run was writing; cleared before the ranks start (not by each: one rank would
    # clear another's result as it is written)
    for stale in out_dir.glob(".*.json.*.tmp"):
        stale.unlink(missing_ok=True)
    seconds = sum(durations[r.path] for r in recordings) if fit_ranks else None
    with rank_job(
        what, device=device, workers=workers, gpus=gpus, seconds=seconds, rank_seconds=SEGMENT_RANK_SECONDS
    ) as job:
        results = job.run(
            _rank,
            {r.path: durations[r.path] for r in recordings},
            unit=lambda path: by_path[path],
            args=(audio_root, str(out_dir), settings),
        )
    return {k: sum(r.value[k] for r in results) for k in ("done", "resumed")}


def _rank(rank: Rank, recordings: list[Recording], audio_root: str, out_dir: str, settings: SegmentSettings):
    """One rank: its models, then its recordings."""
    transcription = None
    if settings.asr_model:
        from sharflow.models.asr import Transcriber

        model, random = settings.asr_model, settings.asr_random
        transcriber = Transcriber(model, rank.device, random=random, confidence=True)
        transcription = Transcription(
            transcriber, settings.source, settings.min_confidence, settings.asr_batch_seconds
        )
    segmenter = Segmenter(rank.device, settings.turns, settings.cut)
    return run_part(recordings, audio_root, Path(out_dir), segmenter, transcription)


def plan_parts(durations: dict[str, float], parts: int) -> list[list[str]]:
    """The recordings' paths in `parts` parts of about equal hours (empty parts dropped)."""
    return [p for p in lpt_assign(durations, max(1, min(parts, len(durations)))) if p]


def run_part(
    recordings: list[Recording],
    audio_root: str,
    out_dir: Path,
    segmenter: Segmenter,
    transcription: Transcription | None = None,
) -> dict[str, int]:
    """Segment every recording of a part not already done; {"done": n, "resumed": n}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {"done": 0, "resumed": 0}
    for recording in tqdm(recordings, desc="recordings", unit="rec", mininterval=5):
        target = out_dir / f"{recording.result_name}.json"
        if target.exists():
            counts["resumed"] += 1
            continue
        write_json(target, segment_one(recording, audio_root, segmenter, transcription))
        counts["done"] += 1
    return counts


def segment_one(
    recording: Recording, audio_root: str, segmenter: Segmenter, transcription: Transcription | None
) -> dict:
    """A recording's result as JSON: its segments and where every second went."""
    path, _ = resolve_audio_path(audio_root, recording.path)  # never outside the root
    try:
        audio, _, _ = read_span(path, 0.0, probe_audio(path).duration, RATE, floats=True)
    except Exception as e:  # any decoder error: the recording is accounted, never lost
        log.warning("recording %s could not be read: %s", recording.path, e)
        duration = _duration_or_zero(path)
        return {
            "recording": recording.path,
            "duration": duration,
            "error": f"{type(e).__name__}: {e}",
            "speakers": 0,
            "voices": [],
            "segments": [],
            "stretches": [[0.0, duration, cut.UNREADABLE]] if duration else [],
            "seconds": {cut.UNREADABLE: duration},
        }
    result = segmenter.segment(audio)
    if transcription is not None:
        t = transcription
        result = transcribe(audio, result, t.transcriber, t.min_confidence, t.batch_seconds)
    seconds = lambda x: round(x / RATE, 6)  # noqa: E731
    segments = []
    for i, (a, b, speaker) in enumerate(result.segments):
        text, confidence = result.transcripts[i] if result.transcripts else ("", None)
        segments.append(
            {"offset": seconds(a), "duration": seconds(b - a), "speaker": speaker, "text": text}
            | ({"confidence": round(confidence, 6)} if confidence is not None else {})
        )
    return {
        "recording": recording.path,
        "duration": seconds(result.num_samples),
        "speakers": result.speakers,
        "segments": segments,
        "stretches": [[seconds(a), seconds(b), what] for a, b, what in result.stretches],
        "seconds": {k: round(v, 6) for k, v in result.seconds().items() if v},
        # each speaker's voice (unit GE2E centroid), for linking across recordings
        "voices": np.round(result.voices, 6).tolist(),
    }


def _duration_or_zero(path: str) -> float:
    try:
        return round(probe_audio(path).duration, 6)
    except Exception:
        return 0.0


def own_name(recording: Recording, label: int) -> tuple[str, bool]:
    """(name, given by the user) of a recording's speaker: a known name where the listing gives one
    for the label, else `<recording key>-s<label>`."""
    if label < len(recording.speakers):
        return recording.speakers[label], True
    return f"{recording.key}-s{label}", False


def _names(recording: Recording, result: dict, linker: Linker | None) -> list[str]:
    """The names of a recording's speakers: their own, or with linking those of the voices they join."""
    own = [own_name(recording, label) for label in range(len(result["voices"]))]
    if linker is None or not own:
        return [name for name, _ in own]
    return linker.recording(np.array(result["voices"]), [n for n, _ in own], [k for _, k in own])


@dataclass
class Merged:
    segments: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    recordings: list[dict] = field(default_factory=list)
    speakers: set[str] = field(default_factory=set)
    linked: int = 0  # recording speakers that took an earlier recording's voice (sharflow.segment.link)

    def stats(self, dataset: str) -> dict:
        """The stage's stats: seconds in = kept + dropped by reason, in all and per recording."""
        return {
            "stage": "segment",
            "dataset": dataset,
            "recordings": len(self.recordings),
            "segments": self.segments,
            "seconds_in": round(sum(r["duration"] for r in self.recordings), 6),
            "speakers": len(self.speakers),
            "linked": self.linked,
            "seconds": {k: self.seconds.get(k, 0.0) for k in (KEPT, *cut.REASONS)},
            "per_recording": self.recordings,
        }


def merge(
    recordings: list[Recording],
    part_dirs: list[Path],
    dataset: str,
    manifest: Path,
    stats: Path,
    source: str,
    link_similarity: float | None = None,
) -> Merged:
    """The parts' results into the dataset's segment manifest and stats, in the recordings' order.
    Every recording must have its result (a part that did not finish is named). With
    `link_similarity`, speakers are linked across recordings by voice (sharflow.segment.link)."""
    found = {p.stem: p for d in part_dirs for p in Path(d).glob("*.json")}
    missing = [r.path for r in recordings if r.result_name not in found]
    if missing:
        raise FileNotFoundError(
            f"{len(missing)} recording(s) have no segment result, e.g. {missing[0]}: rerun the segment "
            "jobs (a killed job resumes at the recording it was on)"
        )
    merged = Merged()
    linker = Linker(link_similarity) if link_similarity is not None else None
    with atomic_file(manifest) as out:
        for recording in recordings:
            result = read_json(found[recording.result_name])
            names = _names(recording, result, linker)
            merged.speakers.update(names[s["speaker"]] for s in result["segments"])
            for seg in result["segments"]:
                line = {
                    "audio_filepath": recording.path,
                    "offset": seg["offset"],
                    "duration": seg["duration"],
                    "text": seg["text"],
                    "speaker": str(Speaker(recording.language, dataset, names[seg["speaker"]])),
                    "lang": recording.language,
                    "transcript_source": source,
                }
                if "confidence" in seg:
                    line["transcript_confidence"] = seg["confidence"]
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
                merged.segments += 1
            for what, value in result["seconds"].items():
                merged.seconds[what] = round(merged.seconds.get(what, 0.0) + value, 6)
            merged.recordings.append(
                {k: result[k] for k in ("recording", "duration", "speakers", "seconds")}
                | {"segments": len(result["segments"])}
            )
    merged.linked = linker.linked if linker else 0
    write_json(stats, merged.stats(dataset))
    return merged
