"""Shar shard members in the exact bytes lhotse's writers give them, without importing lhotse.

A shard job writes tens of thousands of small members. lhotse's writers serialize each cut through
`dataclasses.asdict` (~0.2 ms for a cut and its two audio Recordings, the largest part of a copied
span's cost) and `import lhotse` imports torch (~2 s of every shard job's start-up). Here the same
dicts are built directly and tar members are laid out as lhotse's `TarWriter` lays them out
(tarfile's stream mode: PAX headers of a bare `TarInfo(name)`, data padded to 512-byte blocks, two
zero blocks and padding to a 10,240-byte record at the end). tests/test_shar_format.py compares
every piece byte for byte with lhotse's own `MonoCut.to_dict`, `JsonlShardWriter` and
`AudioTarWriter`; tests/test_shar.py reads shards back with lhotse and NeMo.
"""

import json
import os
import shutil
import tarfile
from typing import BinaryIO

from sharflow.core.speakers import parse_speaker
from sharflow.shar.plan import cut_id, recording_id

# Record keys NeMo's MagpieTTS dataset reads from the cut's own custom (cut.has_custom looks there only):
# the language, the tokenizers to pick from, and the quality mark its dataloader filters on.
CUT_CUSTOM_KEYS = ("lang", "tokenizer_names", "validation_status")
# Record keys the cut holds in its own fields or custom; every other key goes to supervision.custom.
CUT_KEYS = frozenset(
    {
        "audio_filepath",
        "context_audio_filepath",
        "text",
        "offset",
        "duration",
        "speaker",
        "source_audio",
        *CUT_CUSTOM_KEYS,
    }
)
_BLOCK = tarfile.BLOCKSIZE  # 512
_RECORD = tarfile.RECORDSIZE  # 20 blocks: a stream-mode tar ends on a record


def recording_dict(rid: str, source: dict, sampling_rate: int, num_samples: int, duration: float) -> dict:
    """lhotse `Recording(...).to_dict()` of a recording with one audio source (None fields left out)."""
    return {
        "id": rid,
        "sources": [source],
        "sampling_rate": sampling_rate,
        "num_samples": num_samples,
        "duration": duration,
        "channel_ids": sorted(source["channels"]),
    }


def cut_dict(record: dict) -> dict:
    """lhotse `MonoCut.to_dict()` of a with_context record's cut.

    The cut is the target span of its source recording (start = offset, channel 0), the recording
    named by its path relative to the dataset's audio root: a corpus read from another folder or from
    object storage gives the same bytes. One supervision holds text, language, the standardized
    speaker and every other record field in `custom` (plus `context_recording_id`); `lang`,
    `tokenizer_names` and `validation_status` go to the cut's own custom, where MagpieTTS reads them
    (`lang` the speaker's Language for a record the text stage has not seen). lhotse leaves a
    dataclass's None fields out: none of these is ever None (a None inside `custom` stays).
    """
    cid = cut_id(record)
    rid = recording_id(record["audio_filepath"])
    src = record["source_audio"]
    language = record.get("lang") or parse_speaker(record["speaker"]).language
    custom = {k: v for k, v in record.items() if k not in CUT_KEYS}
    custom["context_recording_id"] = recording_id(record["context_audio_filepath"])
    supervision = {
        "id": cid,
        "recording_id": rid,
        "start": 0.0,
        "duration": record["duration"],
        "channel": 0,
        "text": record["text"],
        "language": language,
        "speaker": record["speaker"],
        "custom": custom,
    }
    source = {
        "type": "file",
        "channels": list(range(src["num_channels"])),
        "source": record["audio_filepath"],
    }
    cut = {
        "id": cid,
        "start": record["offset"],
        "duration": record["duration"],
        "channel": 0,
        "supervisions": [supervision],
        "recording": recording_dict(
            rid, source, src["sampling_rate"], src["num_samples"], src["num_samples"] / src["sampling_rate"]
        ),
    }
    cut["custom"] = {"lang": language, **{k: record[k] for k in CUT_CUSTOM_KEYS[1:] if k in record}}
    return {**cut, "type": "MonoCut"}


def placeholder_dict(segment: str, sampling_rate: int, num_samples: int, duration: float) -> dict:
    """The Recording stored beside an audio tar member: the segment alone, with its own length,
    its source a Shar placeholder (what lhotse's `to_shar_placeholder` makes of it)."""
    source = {"type": "shar", "channels": [0], "source": ""}
    return recording_dict(segment, source, sampling_rate, num_samples, duration)


def cut_line(cut: dict) -> str:
    """A cuts.jsonl line as lhotse's JsonlShardWriter prints it."""
    return json.dumps(cut, ensure_ascii=False) + "\n"


class TarMemberWriter:
    """A tar file laid out byte for byte as lhotse's `TarWriter(path, shard_size=None)` writes it.

    `write(name, data)` adds a member, `append_segment(path)` the members of a segment file;
    `close()` ends the archive (also one with no member, which lhotse would not create: the shard
    job needs every field file). A context manager, like the other writers.
    """

    def __init__(self, path: str):
        self.file = open(path, "wb")  # noqa: SIM115 (closed by close()); write_member may write to it

    def write(self, name: str, data: bytes) -> None:
        write_member(self.file, name, data)

    def append_segment(self, path: str) -> None:
        """Append the members another process wrote to `path` with write_member, then delete it."""
        with open(path, "rb") as f:
            shutil.copyfileobj(f, self.file, 1 << 20)
        os.remove(path)

    def close(self) -> None:
        if self.file.closed:
            return
        end = self.file.tell() + 2 * _BLOCK
        self.file.write(b"\0" * (2 * _BLOCK + (-end % _RECORD)))
        self.file.close()

    def __enter__(self) -> "TarMemberWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_member(f: BinaryIO, name: str, data: bytes) -> None:
    """One tar member (header, data, padding to a whole block) to an open binary file."""
    f.write(member_header(name, len(data)))
    f.write(data)
    pad = -len(data) % _BLOCK
    if pad:
        f.write(b"\0" * pad)


def member_header(name: str, size: int) -> bytes:
    """The header blocks tarfile writes for a bare `TarInfo(name)` of `size` bytes (PAX format)."""
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(tarfile.PAX_FORMAT, tarfile.ENCODING, "surrogateescape")


def audio_member_names(cut: str, audio_format: str) -> tuple[str, str]:
    """(audio member, manifest member) of a cut in an audio tar, as lhotse's AudioTarWriter names them."""
    return f"{cut}.{audio_format}", f"{cut}.json"


def placeholder_bytes(segment: str, sampling_rate: int, num_samples: int, duration: float) -> bytes:
    """The json member beside an audio member (lhotse writes it with json.dumps' defaults + newline)."""
    return (json.dumps(placeholder_dict(segment, sampling_rate, num_samples, duration)) + "\n").encode(
        "utf-8"
    )
