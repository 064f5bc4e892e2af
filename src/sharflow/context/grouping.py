"""Speaker groups for context selection: which utterances may serve as each other's context.

A group key is a string computed from one prepared record. The default groups by the speaker id
of the standardized speaker string; presets follow the layouts of common corpora; a user regex
over `audio_filepath` or `speaker` joins its capture groups (or takes the whole match).
"""

import re
from collections.abc import Callable
from pathlib import PurePosixPath

from sharflow.core.speakers import parse_speaker

GroupKey = Callable[[dict], str]


def _speaker(record: dict) -> str:
    return parse_speaker(record["speaker"]).speaker_id


def _libritts(record: dict) -> str:
    # <subset>/<speaker>/<chapter>/<speaker>_<chapter>_<para>_<sent>.wav: speaker x chapter
    parts = PurePosixPath(record["audio_filepath"]).stem.split("_")
    return f"{parts[0]}_{parts[1]}" if len(parts) >= 2 else _speaker(record)


def _hifitts(record: dict) -> str:
    # audio/<speaker>_<clean|other>/<book id>/<title>_<chapter>_<author>_<idx>.flac: speaker x book x chapter
    path = PurePosixPath(record["audio_filepath"])
    chapter = "_".join(path.stem.split("_")[:2])
    return f"{_speaker(record)}/{path.parent.name}/{chapter}"


def _hifitts2(record: dict) -> str:
    # the file name without its last `_` part (the utterance index)
    stem = PurePosixPath(record["audio_filepath"]).stem
    return f"{_speaker(record)}/{stem.rsplit('_', 1)[0]}"


PRESETS: dict[str, GroupKey] = {
    "speaker": _speaker,
    "libritts": _libritts,
    "hifitts": _hifitts,
    "hifitts2": _hifitts2,
}


def group_key_function(
    preset: str = "speaker", regex: str | None = None, field: str = "audio_filepath"
) -> GroupKey:
    """The group-key function for a config: a preset name, or a regex applied to `field`.

    With a regex, a record whose field does not match falls back to its speaker id, prefixed so
    it never joins a regex group by accident.
    """
    if regex is None:
        if preset not in PRESETS:
            raise ValueError(f"unknown grouping preset {preset!r}; choose one of {sorted(PRESETS)}")
        return PRESETS[preset]
    pattern = re.compile(regex)

    def by_regex(record: dict) -> str:
        match = pattern.search(str(record[field]))
        if match is None:
            return f"unmatched/{_speaker(record)}"
        return "/".join(g or "" for g in match.groups()) if match.groups() else match.group(0)

    return by_regex
