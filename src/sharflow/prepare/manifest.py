"""NeMo JSON-lines manifest records: validation and standardization of one line at a time.

`check_line` is a pure function of the raw line, the settings and the file system, so a serial
and a parallel run give the same answer for every line. Duplicate detection needs the lines
before it and lives in the prepare stage.
"""

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

from sharflow.core.speakers import SpeakerFormatError, standardize_speaker
from sharflow.io import containers
from sharflow.io.audio import AudioInfo, PathEscapeError, probe_audio, resolve_audio_path
from sharflow.io.storage import StorageError

# Reject reason -> what it means, in the order records are checked.
REASONS: dict[str, str] = {
    "malformed_json": "the line is not valid UTF-8 JSON (or is blank)",
    "not_an_object": "the line is JSON but not an object",
    "unsupported_cut": "a lhotse cut that is not a MonoCut over a recording, or holds no supervision",
    "unsupported_source": "a lhotse recording whose audio is not one file or URL: a command (never run), "
    "in-memory bytes, several sources, transforms",
    "missing_recording": "a lhotse supervision whose recording_id is not in the recordings manifest",
    "missing_metadata": "a WebDataset sample with audio but no .json member",
    "duplicate_key": "a WebDataset sample whose key an earlier sample of the dataset has (in any tar)",
    "truncated_container": "a WebDataset tar that ends inside this sample (the rest of the tar is missing)",
    "missing_field": "a required field (audio_filepath, duration, text, speaker) is absent",
    "bad_type": "a field has the wrong type (e.g. duration given as a string)",
    "bad_duration": "duration is not a positive finite number, or offset is negative",
    "empty_text": "text is empty or only whitespace (datasets with require_text: true)",
    "bad_speaker": "speaker is neither a plain id nor '| Language:x Dataset:y Speaker:z |'",
    "path_escapes_root": "audio_filepath leaves the dataset's audio_root (../, absolute paths elsewhere)",
    "missing_audio": "the audio file does not exist (a WebDataset sample: its JSON has no audio member)",
    "unreadable_audio": "the audio file's header cannot be read (corrupt or unknown format)",
    "zero_length_audio": "the audio file holds no samples",
    "duration_mismatch": "a whole-file record (no offset) whose duration differs from the file's, or a "
    "segment ending past the file, by more than prepare.duration_tolerance",
    "duplicate": "same audio file, offset and duration as an earlier line (the detail names it)",
}

# Keys the prepared record sets itself; every other manifest field is carried over unchanged.
_STANDARD_KEYS = ("audio_filepath", "offset", "duration", "text", "speaker", "source_audio")


@dataclass(frozen=True)
class CheckSettings:
    """Per-dataset settings of the record checks."""

    dataset: str
    audio_root: str
    language: str = "en"
    require_text: bool = True
    duration_tolerance: float = 0.1
    duration_from_file: bool = False
    default_speaker: str | None = None


@dataclass(frozen=True)
class Accepted:
    """A valid record: its output line, its duplicate key, its duration, and its speaker string;
    `from_file` when the duration is the file's exact length in place of the manifest's.

    `speaker` is the standardized speaker; its `Dataset:` part may name another dataset than the
    config's when the manifest already carried standardized speakers (prepare counts those).
    """

    line: str
    key: tuple[str, int, int]
    duration: float
    speaker: str
    from_file: bool = False


@dataclass(frozen=True)
class Rejected:
    """An invalid line: the reason (a key of REASONS), a detail for people, and the duration if known."""

    reason: str
    detail: str
    duration: float | None = None


@dataclass(frozen=True)
class Refused:
    """A record its reader refused before the checks (lhotse, WebDataset, Parquet with audio): the
    reason (a key of REASONS), a detail naming what is wrong, and the original as the reader found it."""

    reason: str
    detail: str
    original: bytes
    duration: float | None = None


@dataclass(frozen=True)
class Probed:
    """A record line whose audio its reader has read already (a tar streamed from object storage, whose
    bytes are read once): the header it found (`info`), or why the audio does not decode (`error`),
    so that the checks need not fetch the audio again."""

    line: bytes
    info: AudioInfo | None = None
    error: str = ""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_line(raw: bytes, settings: CheckSettings, probed: Probed | None = None) -> Accepted | Rejected:
    """Validate one manifest line and return the standardized record or the reject reason.

    The prepared record holds `audio_filepath` relative to the audio root, `offset` (0 when
    absent), `duration`, `text`, the standardized `speaker`, every other manifest field as it was,
    and `source_audio` ({sampling_rate, num_samples, num_channels} from the header; `probed`'s
    where the reader read the audio already).
    """
    record = _parse(raw)
    if isinstance(record, Rejected):
        return record
    fields = _check_fields(record, settings)
    if isinstance(fields, Rejected):
        return fields
    audio = _check_audio(fields, "offset" in record, settings, probed)
    if isinstance(audio, Rejected):
        return audio
    rel, info = audio
    duration = _duration(fields, info, settings)
    out = {
        "audio_filepath": rel,
        "offset": fields.offset,
        "duration": duration,
        "text": fields.text,
        "speaker": fields.speaker,
        **{k: v for k, v in record.items() if k not in _STANDARD_KEYS},
        "source_audio": {
            "sampling_rate": info.sampling_rate,
            "num_samples": info.num_samples,
            "num_channels": info.num_channels,
        },
    }
    key = (rel, round(fields.offset * 1e5), round(duration * 1e5))
    line = json.dumps(out, ensure_ascii=False)
    return Accepted(line, key, duration, fields.speaker, from_file=duration != fields.duration)


def _duration(fields: "_Fields", info: AudioInfo, settings: CheckSettings) -> float:
    """The record's duration: the manifest's, or with `duration_from_file` the file's exact length
    for a whole-file record (offset 0, duration within the tolerance of the file's; a record that
    got this far without an offset always is one). Manifests round durations (to the millisecond,
    most often); the file's length makes the span all of the file, which shar copies through."""
    whole_file = fields.offset == 0 and abs(fields.duration - info.duration) <= settings.duration_tolerance
    return info.duration if settings.duration_from_file and whole_file else fields.duration


class _Fields(NamedTuple):
    path: str
    duration: float
    offset: float
    text: str
    speaker: str  # standardized


def _parse(raw: bytes) -> dict | Rejected:
    try:
        record = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        return Rejected("malformed_json", f"not valid UTF-8: {e}")
    except json.JSONDecodeError as e:
        return Rejected("malformed_json", "blank line" if not raw.strip() else str(e))
    if not isinstance(record, dict):
        return Rejected("not_an_object", f"expected a JSON object, got {type(record).__name__}")
    return record


def _check_fields(record: dict, settings: CheckSettings) -> _Fields | Rejected:
    """The record's required fields, typed and in range, and its standardized speaker."""
    if settings.default_speaker is not None and record.get("speaker") is None:
        record = {**record, "speaker": settings.default_speaker}
    required = ["audio_filepath", "duration", "speaker"] + (["text"] if settings.require_text else [])
    missing = [k for k in required if k not in record]
    if missing:
        return Rejected("missing_field", f"missing {', '.join(missing)}")
    path, duration = record["audio_filepath"], record["duration"]
    offset, text = record.get("offset", 0.0), record.get("text", "")
    for name, value, ok in (
        ("audio_filepath", path, isinstance(path, str) and path != ""),
        ("duration", duration, _number(duration)),
        ("offset", offset, _number(offset)),
        ("text", text, isinstance(text, str)),
    ):
        if not ok:
            return Rejected("bad_type", f"{name} = {value!r} ({type(value).__name__})")
    if not (math.isfinite(duration) and duration > 0):
        return Rejected("bad_duration", f"duration = {duration!r} is not a positive number")
    if not (math.isfinite(offset) and offset >= 0):
        return Rejected("bad_duration", f"offset = {offset!r} is negative or not finite", duration)
    if settings.require_text and not text.strip():
        return Rejected("empty_text", "text is empty", duration)
    try:
        speaker = standardize_speaker(record["speaker"], settings.language, settings.dataset)
    except SpeakerFormatError as e:
        return Rejected("bad_speaker", str(e), duration)
    return _Fields(path, duration, offset, text, speaker)


def _check_audio(
    fields: _Fields, has_offset: bool, settings: CheckSettings, probed: Probed | None = None
) -> tuple[str, AudioInfo] | Rejected:
    """(path relative to the audio root, header) of the record's audio, if it is there and long enough."""
    duration = fields.duration
    try:
        full, rel = resolve_audio_path(settings.audio_root, fields.path)
    except PathEscapeError as e:
        return Rejected("path_escapes_root", str(e), duration)
    if probed is not None and probed.error:
        return Rejected("unreadable_audio", f"{full}: {probed.error}", duration)
    try:
        info = probed.info if probed is not None and probed.info is not None else _probe_cached(full)
    except StorageError:
        raise  # the store, not the record: one error for the job
    except Exception as e:  # libsndfile reports missing, corrupt and unknown files alike
        if not containers.exists(full):
            return Rejected("missing_audio", f"no file at {full}", duration)
        return Rejected("unreadable_audio", f"{full}: {e}", duration)
    if info.num_samples == 0:
        return Rejected("zero_length_audio", f"{full} holds no samples", duration)
    mismatch = _duration_mismatch(fields.offset, duration, info.duration, has_offset)
    if mismatch > settings.duration_tolerance:
        return Rejected(
            "duration_mismatch",
            f"offset {fields.offset} + duration {duration} vs file duration {info.duration:.4f} s "
            f"(off by {mismatch:.4f} s > tolerance {settings.duration_tolerance} s)",
            duration,
        )
    return rel, info


# Segments of one long file share its header: read it once per process (misses are not cached).
_probe_cached = lru_cache(maxsize=8192)(probe_audio)


def _duration_mismatch(offset: float, duration: float, file_duration: float, has_offset: bool) -> float:
    """How far the record disagrees with the file, in seconds (0 when it fits).

    A record without `offset` stands for the whole file, so its duration must match the file's;
    a segment (with `offset`) must only end within the file.
    """
    if not has_offset:
        return abs(duration - file_duration)
    return max(0.0, offset + duration - file_duration)
