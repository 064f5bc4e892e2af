"""A long-form dataset through the segment stage in the workflow: which recordings, the plan of the
parts, a part's job and the merge (rules/segment.smk calls these through workflow_scripts/segment_*).

- `list_recordings`: the dataset's recordings: every audio file under its audio root (a folder or an
  `s3://` prefix), or what its `manifest` names: tars (every audio member a recording, read in place
  as `x.tar#member`), a glob of files under the root, or a JSON-lines listing (one recording a line:
  `audio_filepath`, optional `lang` and `speakers`, the known names in order of first voice);
- `plan_segments`: each recording's length (its header) and version (size and mtime, or ETag), and
  the parts balanced by hours (LPT): `segment/plan.json`;
- `run_planned_part`: one part's recordings through `job.segment_part`; results are kept under a
  folder named by the settings' digest and each under its recording's version, so a killed job
  resumes at the recording it was on and a changed setting or a replaced file is never served stale;
- `merge_planned`: every recording's result into the NeMo manifest prepare reads, and the stats.
"""

import fnmatch
import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from sharflow.core.atomic import read_json, write_json
from sharflow.core.errors import SharflowError
from sharflow.io import containers, storage
from sharflow.io.audio import PathEscapeError, probe_audio, resolve_audio_path
from sharflow.segment.cut import CutSettings
from sharflow.segment.job import Merged, Recording, SegmentSettings, merge, segment_part
from sharflow.segment.turns import TurnSettings
from sharflow.work.balance import lpt_assign

AUDIO_SUFFIXES = (".flac", ".wav", ".mp3", ".ogg", ".opus")
# the segment block's keys that are TurnSettings' and CutSettings' fields
TURN_KEYS = (
    "min_pause",
    "cluster_similarity",
    "min_speaker_seconds",
    "attribute_similarity",
    "overlap_share",
    "min_overlap",
)
CUT_KEYS = ("min_segment", "max_segment", "max_pause")
# what a recording's result holds, and how it was made; a new form is never read from an older result
# (settings_key). 2: each speaker's voice, for linking across recordings; 3: spans from VAD probabilities
# with single frames clipped (turns.without_spikes)
RESULT_FORMAT = 3


def settings_of(block: dict, asr: dict | None) -> SegmentSettings:
    """SegmentSettings from the config's `segment` block and the ASR options (model, random,
    batch_seconds; None: no transcripts)."""
    return SegmentSettings(
        turns=TurnSettings(**{k: block[k] for k in TURN_KEYS}),
        cut=CutSettings(**{k: block[k] for k in CUT_KEYS}),
        asr_model=asr["model"] if asr else None,
        asr_random=bool(asr and asr["random"]),
        min_confidence=block["min_confidence"],
        asr_batch_seconds=asr["batch_seconds"] if asr else 120.0,
    )


def settings_key(settings: SegmentSettings) -> str:
    """A digest of everything a recording's result depends on besides its audio (the ASR model's
    file version too; not the ASR's batch, which changes no transcript): the name of the folder its
    results are kept in."""
    what = asdict(settings) | {"result_format": RESULT_FORMAT}
    what.pop("asr_batch_seconds")
    if settings.asr_model and (storage.is_url(settings.asr_model) or os.path.exists(settings.asr_model)):
        what["asr_stamp"] = storage.stamp(settings.asr_model)
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def listing_form(listing: str | None) -> str:
    """How a long_form dataset's `manifest` names its recordings: none (every audio file under the
    root), tars (a tar, a brace pattern of tars or a folder of them: every audio member of each is a
    recording, read in place), glob (a pattern of audio files under the root) or listing (JSON lines)."""
    if listing is None:
        return "none"
    if listing.endswith(containers.TAR) or containers.has_braces(listing) or listing.endswith("/"):
        return "tars"
    if any(c in listing for c in "*?["):
        return "glob"
    return "listing"


def list_recordings(audio_root: str, listing: str | None, language: str) -> list[Recording]:
    """The dataset's recordings in order: every audio file under the root, the audio members of the
    tars or the files of the glob `listing` names (under the root, sorted), or its JSON lines."""
    form = listing_form(listing)
    if form == "none":
        return [Recording(path, language) for path in _audio_under(audio_root)]
    if form in ("tars", "glob"):
        paths = _tar_members(audio_root, listing) if form == "tars" else _glob_under(audio_root, listing)
        if not paths:
            raise SharflowError(
                f"{listing}: no recordings ({', '.join(AUDIO_SUFFIXES)}) in the long_form dataset's "
                f"{'tars' if form == 'tars' else 'files matching it'} under {audio_root}"
            )
        return [Recording(path, language) for path in paths]
    recordings, seen = [], set()
    with storage.open_object(listing) as f:
        for n, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            where = f"{listing}, line {n}"
            try:
                line = json.loads(raw)
                path = line["audio_filepath"]
            except (ValueError, KeyError, TypeError) as e:
                raise SharflowError(
                    f"{where}: not a recording ({type(e).__name__}: {e}); each line is a JSON object "
                    'with "audio_filepath" and optionally "lang" and "speakers" (a list of names)'
                ) from None
            speakers = line.get("speakers") or []
            if not (isinstance(path, str) and path) or not isinstance(speakers, list):
                raise SharflowError(f"{where}: audio_filepath must be a path and speakers a list of names")
            try:
                resolve_audio_path(audio_root, path)
            except PathEscapeError as e:
                raise SharflowError(f"{where}: {e}; give paths under the dataset's audio_root") from None
            if path in seen:
                raise SharflowError(f"{where}: {path} is listed twice; list each recording once")
            seen.add(path)
            lang = line.get("lang") or line.get("language") or language
            recordings.append(Recording(path, str(lang), tuple(str(s) for s in speakers)))
    if not recordings:
        raise SharflowError(f"{listing}: lists no recordings")
    return recordings


def _audio_under(audio_root: str) -> list[str]:
    """Every audio file under the root, as paths relative to it, sorted."""
    if storage.is_url(audio_root):
        prefix = storage.normalize_url(audio_root) + "/"
        urls = storage.list_folder(audio_root, "")  # every object below, one listing
        found = {url[len(prefix) :] for url in urls if url.lower().endswith(AUDIO_SUFFIXES)}
    else:
        root = Path(audio_root)
        found = {
            p.relative_to(root).as_posix()
            for p in root.rglob("*")
            if p.suffix.lower() in AUDIO_SUFFIXES and p.is_file()
        }
    if not found:
        raise SharflowError(
            f"{audio_root}: no audio files ({', '.join(AUDIO_SUFFIXES)}) under the long-form dataset's "
            "audio_root; point it at the recordings, or list them in the dataset's manifest"
        )
    return sorted(found)


def _tar_members(audio_root: str, pattern: str) -> list[str]:
    """Every audio member of the tars of `pattern` (containers.expand_shards), as member addresses
    relative to the root, in the tars' order, each tar's by name."""
    out = []
    for tar in containers.expand_shards(pattern.rstrip("/"), audio_root, containers.TAR):
        try:
            _, rel = resolve_audio_path(audio_root, tar if storage.is_url(tar) else os.path.abspath(tar))
        except PathEscapeError as e:
            raise SharflowError(f"{pattern}: {e}; give tars under the dataset's audio_root") from None
        try:
            names = sorted(containers.tar_index(tar))
        except Exception as e:
            raise SharflowError(f"{tar}: not a readable tar ({type(e).__name__}: {e})") from None
        out += [containers.address(rel, name) for name in names if name.lower().endswith(AUDIO_SUFFIXES)]
    return out


def _glob_under(audio_root: str, pattern: str) -> list[str]:
    """The audio files under the root that `pattern` (relative to it; `**` any folders) matches; under
    an `s3://` root, the objects of its one listing that fnmatch matches (there `*` crosses folders)."""
    if os.path.isabs(pattern) or storage.is_url(pattern) or ".." in Path(pattern).parts:
        raise SharflowError(f"{pattern}: a long_form dataset's glob is relative to its audio_root, within it")
    if storage.is_url(audio_root):
        found = [p for p in _audio_under(audio_root) if fnmatch.fnmatch(p, pattern)]
    else:
        root = Path(audio_root)
        found = [
            p.relative_to(root).as_posix()
            for p in root.glob(pattern)
            if p.suffix.lower() in AUDIO_SUFFIXES and p.is_file()
        ]
    return sorted(found)


def plan_segments(recordings: list[Recording], audio_root: str, parts: int, out: str) -> dict:
    """Each recording's length and version, and `parts` parts of about equal hours (a part may be
    empty), written atomically to `out`; the plan."""
    rows = []
    for r in tqdm(recordings, desc="recordings probed", unit="rec", mininterval=5):
        full, _ = resolve_audio_path(audio_root, r.path)
        try:
            duration, stamp = round(probe_audio(full).duration, 6), containers.stamp(full)
        except Exception as e:  # unreadable: its part accounts for it (segment_one)
            duration, stamp = 0.0, [f"unreadable: {type(e).__name__}"]
        row = {"path": r.path, "language": r.language, "speakers": list(r.speakers), "duration": duration}
        rows.append(row | {"stamp": stamp})
    assigned = lpt_assign({i: row["duration"] for i, row in enumerate(rows)}, max(1, parts))
    plan = {"recordings": rows, "parts": assigned, "hours": round(sum(r["duration"] for r in rows) / 3600, 6)}
    write_json(out, plan)
    return plan


def planned_recording(row: dict) -> Recording:
    return Recording(row["path"], row["language"], tuple(row["speakers"]), tuple(row["stamp"]))


def planned(plan_path: str) -> list[Recording]:
    """The plan's recordings, in the dataset's order."""
    return [planned_recording(row) for row in read_json(plan_path)["recordings"]]


def run_planned_part(
    plan_path: str,
    part: int,
    *,
    audio_root: str,
    work_root: str,
    settings: SegmentSettings,
    out_stats: str,
    device: str = "auto",
    workers: int = 1,
    gpus: int = 0,
    fit_ranks: bool = False,
) -> dict:
    """Segment part `part` of the plan into `<work_root>/<settings key>/`, then write the part's
    stats (what it did; written last, so the job's output appears only when every recording is)."""
    plan = read_json(plan_path)
    rows = [plan["recordings"][i] for i in plan["parts"][part]]
    recordings = [planned_recording(row) for row in rows]
    out_dir = Path(work_root) / settings_key(settings)
    counts = {"done": 0, "resumed": 0}
    if recordings:
        counts = segment_part(
            recordings,
            {r.path: row["duration"] for r, row in zip(recordings, rows, strict=True)},
            audio_root,
            out_dir,
            settings,
            device=device,
            workers=workers,
            gpus=gpus,
            fit_ranks=fit_ranks,
            what=f"segment part {part}",
        )
    summary = {
        "part": part,
        "recordings": len(recordings),
        "hours": round(sum(row["duration"] for row in rows) / 3600, 6),
        "results": str(out_dir),
        **counts,
    }
    write_json(out_stats, summary)
    return summary


def merge_planned(
    plan_path: str,
    part_stats: list[str],
    *,
    dataset: str,
    manifest: str,
    stats: str,
    source: str,
    link_similarity: float | None = None,
) -> Merged:
    """The parts' results, in the plan's order of recordings, into the dataset's segment manifest and
    stats (job.merge; with `link_similarity`, speakers linked across recordings)."""
    folders = [Path(f) for f in sorted({read_json(p)["results"] for p in part_stats})]
    recordings = planned(plan_path)
    return merge(recordings, folders, dataset, Path(manifest), Path(stats), source, link_similarity)
