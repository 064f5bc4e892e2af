"""A long_form dataset's recordings as the explorer shows them: each one's timeline (its segments with
their speakers and texts, the stretches dropped and why) read from the segment stage's results, and
the same recording cut again with other thresholds before a run.

Every name comes from the run: a recording is a row of the stage's stats (`per_recording`, in the
plan's order), its result is the file its part's job kept under the results folder the part's stats
name, and its segments' final speaker names are the segment manifest's lines of that recording (the
manifest follows the same order, so they are lines `sum(segments before)` on, read by the offset index
of sharflow.explore.lines). Nothing is looked for by a path the request gives.

Trying thresholds runs the stage's own steps (sharflow.segment.recording) on the recording's audio:
the models' part (VAD probabilities, speech spans, windowed speaker embeddings) once a recording,
kept for the last few asked, then the speakers and segments again for each setting in milliseconds.
The work a request is bounded: at most MAX_TRY_SECONDS of a recording are analysed (a longer one is
tried on its first ones, and the answer says so), one analysis at a time. Transcripts are not made
again, so a try drops nothing for low confidence.
"""

import threading
from collections import OrderedDict
from dataclasses import asdict, replace
from pathlib import Path

from sharflow.segment import cut as cutting
from sharflow.segment.recording import KEPT, Analysis, decide

MAX_TRY_SECONDS = 600.0  # of a recording analysed for a try (~6 CPU-seconds at the stage's speed)
KEEP_ANALYSES = 4  # recordings whose models' part is kept in memory (~2 MB each at 10 minutes)
# the thresholds a try may change, each with its bounds: (where it lives, least, most)
TRY_KEYS = {
    "max_pause": ("cut", 0.0, 10.0),
    "min_segment": ("cut", 0.0, 60.0),
    "max_segment": ("cut", 1.0, 300.0),
    "cluster_similarity": ("turns", -1.0, 1.0),
}


class Unknown(LookupError):
    """The run has no such recording, or no result for it; the message says which."""


def recordings_page(stats: dict, number: int, size: int) -> dict:
    """Page `number` of the stats' recordings: each one's row number, path, length, speakers, segments
    and seconds by what became of them."""
    rows = stats.get("per_recording") or []
    chosen = rows[number * size : (number + 1) * size]
    return {
        "rows": [{"n": number * size + k, **row} for k, row in enumerate(chosen)],
        "total": len(rows),
        "page": number,
    }


def planned_stats(plan: dict) -> dict:
    """The segment plan's recordings as the stats list them, before any is segmented: their path
    and length only (`planned_only`)."""
    rows = [
        {"recording": r["path"], "duration": r["duration"], "speakers": None, "segments": None, "seconds": {}}
        for r in plan["recordings"]
    ]
    return {"per_recording": rows, "planned_only": True}


def first_line(stats: dict, n: int) -> int:
    """The segment manifest's line of recording `n`'s first segment."""
    return sum(row["segments"] for row in stats["per_recording"][:n])


def result_file(plan: dict, part_stats: list[dict], n: int, run: Path, confine) -> str:
    """The result file of the plan's recording `n`: in the results folder its part's stats name (from
    the run's folder `run` when relative, as the workflow writes it)."""
    from sharflow.segment.dataset import planned_recording

    part = next((p for p, rows in enumerate(plan["parts"]) if n in rows), None)
    stats = next((s for s in part_stats if s.get("part") == part), None)
    if stats is None:
        raise Unknown(f"recording {n} has no part with a finished segment job")
    name = planned_recording(plan["recordings"][n]).result_name
    return confine(str(run / stats["results"] / f"{name}.json"))


def timeline(result: dict, names: list[str]) -> dict:
    """A recording's stretches, in order, covering it: kept ones with their segment's speaker (its final
    name, `names[i]` for segment i), text and confidence; dropped ones with their reason."""
    segments = iter(zip(result["segments"], names, strict=True))
    out = []
    for start, end, what in result["stretches"]:
        row = {"start": start, "end": end, "what": what}
        if what == KEPT:
            seg, name = next(segments)
            row |= {"speaker": name, "label": seg["speaker"], "text": seg["text"]}
            if "confidence" in seg:
                row["confidence"] = seg["confidence"]
        out.append(row)
    return {
        "recording": result["recording"],
        "duration": result["duration"],
        "speakers": result["speakers"],
        "seconds": result["seconds"],
        "error": result.get("error"),
        "stretches": out,
    }


def settings_of_run(config: dict):
    """The segment settings the run used: its config's segment block over the schema's defaults."""
    from sharflow.core.config import SCHEMA, validate_config
    from sharflow.segment.dataset import settings_of

    block = validate_config({"datasets": {}, **config}, SCHEMA)["segment"]
    return settings_of(block, None)


def tried_settings(base, asked: dict[str, str]):
    """(turn settings, cut settings) of `base` with the thresholds `asked` changed; ValueError names a
    threshold that is not a number or out of its bounds."""
    changes = {"turns": {}, "cut": {}}
    for key, text in asked.items():
        where, low, high = TRY_KEYS[key]
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{key} must be a number, got {text!r}") from None
        if not low <= value <= high:
            raise ValueError(f"{key} must be between {low:g} and {high:g}, got {value:g}")
        changes[where][key] = value
    turns, cut = replace(base.turns, **changes["turns"]), replace(base.cut, **changes["cut"])
    if cut.min_segment > cut.max_segment:
        raise ValueError(f"min_segment ({cut.min_segment:g}) is more than max_segment ({cut.max_segment:g})")
    return turns, cut


def thresholds_of(turns, cut) -> dict[str, float]:
    """The values of the thresholds a try may change (TRY_KEYS) in these settings."""
    both = asdict(turns) | asdict(cut)
    return {k: both[k] for k in TRY_KEYS}


class Trials:
    """The models' part of the recordings tried last, and the segmenter that makes it (built on the
    first try: torch and the models take seconds to load)."""

    def __init__(self, device: str = "cpu"):
        self.device = device
        self._lock = threading.Lock()  # one analysis at a time: a try's work is bounded, and so is theirs
        self._segmenter = None
        self._analyses: OrderedDict[tuple, Analysis] = OrderedDict()

    def analysis(self, key: tuple, path: str, turns) -> tuple[Analysis, float]:
        """(the models' part of the first MAX_TRY_SECONDS of the audio at `path`, its seconds)."""
        from sharflow.io.audio import probe_audio, read_span
        from sharflow.segment.recording import Segmenter
        from sharflow.segment.turns import RATE

        with self._lock:
            known = self._analyses.get(key)
            if known is None:
                try:
                    seconds = min(probe_audio(path).duration, MAX_TRY_SECONDS)
                    audio, _, _ = read_span(path, 0.0, seconds, RATE, floats=True)
                except Exception as e:  # any decoder's error: the stage accounts it as unreadable
                    raise Unknown(f"its audio cannot be read ({type(e).__name__})") from None
                if self._segmenter is None:
                    self._segmenter = Segmenter(self.device, turns)
                known = self._segmenter.analyse(audio)
                self._analyses[key] = known
                while len(self._analyses) > KEEP_ANALYSES:
                    self._analyses.popitem(last=False)
            self._analyses.move_to_end(key)
        return known, known.num_samples / RATE

    def cut_again(self, key: tuple, path: str, base, asked: dict[str, str], duration: float) -> dict:
        """The recording at `path` segmented with `base` settings changed as `asked`: its stretches
        (speakers by their label in the recording), seconds and how much of it was tried."""
        from sharflow.segment.turns import RATE

        turns, cut = tried_settings(base, asked)
        analysis, seconds = self.analysis(key, path, base.turns)
        found = decide(analysis, turns, cut)
        at = lambda x: round(x / RATE, 6)  # noqa: E731 (as the stage's results say it)
        stretches = [{"start": at(a), "end": at(b), "what": what} for a, b, what in found.stretches]
        labels = iter(found.segments)
        for row in stretches:
            if row["what"] == KEPT:
                row["label"] = next(labels)[2]
        return {
            "settings": thresholds_of(turns, cut),
            "tried_seconds": round(seconds, 6),
            "whole": seconds >= duration - 1e-6,
            "speakers": found.speakers,
            "segments": len(found.segments),
            "seconds": {k: round(v, 6) for k, v in found.seconds().items() if v},
            "stretches": stretches,
            "reasons": list(cutting.REASONS),
        }
