"""The NeMo speaker string `| Language:<lang> Dataset:<name> Speaker:<id> |`.

NeMo's MagpieTTS dataset rejects any other form and takes the dataset name from the whitespace-
separated third token, so no part may contain whitespace or `|`.
"""

import re
from dataclasses import dataclass

_PART = r"[^\s|]+"
SPEAKER_RE = re.compile(rf"^\| Language:(\w+) Dataset:({_PART}) Speaker:({_PART}) \|$")
_PLAIN_ID_RE = re.compile(rf"^{_PART}$")


class SpeakerFormatError(ValueError):
    """The speaker field can be neither parsed nor standardized."""


@dataclass(frozen=True)
class Speaker:
    language: str
    dataset: str
    speaker_id: str

    def __str__(self) -> str:
        return f"| Language:{self.language} Dataset:{self.dataset} Speaker:{self.speaker_id} |"


def parse_speaker(value: str) -> Speaker:
    """Parse a standardized speaker string; raise SpeakerFormatError if it is not one."""
    match = SPEAKER_RE.match(value)
    if match is None:
        raise SpeakerFormatError(
            f"speaker {value!r} is not of the form '| Language:<lang> Dataset:<name> Speaker:<id> |'"
        )
    return Speaker(*match.groups())


def standardize_speaker(value: object, language: str, dataset: str) -> str:
    """Return the standardized speaker string for a manifest `speaker` value.

    A value already in the standard form is kept as it is (its dataset name included); a plain id
    (string or integer, no whitespace or `|`) is wrapped with the given language and dataset name.
    Anything else raises SpeakerFormatError with the reason.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise SpeakerFormatError(f"speaker must be a string or integer id, got {type(value).__name__}")
    text = str(value).strip()
    if text.startswith("|"):
        return str(parse_speaker(text))
    if not _PLAIN_ID_RE.match(text):
        raise SpeakerFormatError(
            f"speaker id {text!r} is empty or contains whitespace or '|'; NeMo cannot parse it"
        )
    return str(Speaker(language, dataset, text))
