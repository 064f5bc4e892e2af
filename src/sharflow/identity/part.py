"""The identity stage's part jobs: the content fingerprint and keys of every record of a part.

A part is a contiguous run of the text stage's record lines with an equal share of the audio
seconds (sharflow.work.parts). Each record's span is decoded as the shard stores it
(sharflow.io.audio.load_span) and fingerprinted (sharflow.identity.fingerprint) in `workers`
processes, in line order. A part writes:

- `part-NNNN.jsonl`: one line per record: its line, audio_filepath, offset, duration, speaker id
  and who it names across datasets (`who`: core.splits.speaker_identity),
  span key, utterance key (sharflow.identity.keys), the digest of its decoded samples (equal for
  exact copies only), how many hashes its fingerprint has and where they start in the part's
  `.npy` (or an `error` for audio that could not be decoded: it then has no fingerprint, and the
  quality stage rejects it);
- `part-NNNN.npy`: the hashes and times of every fingerprint, one after another (a structured
  array of (hash uint32, time int32));
- `part-NNNN.voices.npy`: with identity.voices, each record's speaker embedding, a row per line of
  the `.jsonl` (zeros for audio that could not be decoded), by the voices' embedder at its
  level-normalised setting, one torch thread a process (the same bytes whatever the workers);
  without, an empty array;
- `part-NNNN.stats.json`: counts and seconds, and the sizes of the three files above.

A grown corpus is fingerprinted only where it grew: every entry carries the `key` of what it
measured (its span, the audio file's size and modification time, the fingerprint version and the
voices' embedder), and a part keeps from its own files of the last run (the rule's outputs are
Snakemake `update()` files: not deleted before the job) the hashes, digest and voice of every
record whose key it still has, whatever its line; only the others are decoded. The last run's
files are used only when their sizes are the ones its stats recorded (a run killed between its
renames leaves them unused).

Memory: one record's audio per worker, and the keys of the part's last run; hashes go to disk as
they come.
Bytes depend on the records alone, not on the worker count.
"""

import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np
from tqdm import tqdm

from sharflow.core.atomic import atomic_file, atomic_path, write_json
from sharflow.core.cache import file_identity, package_versions
from sharflow.core.errors import SharflowError
from sharflow.core.speakers import parse_speaker
from sharflow.core.splits import speaker_identity
from sharflow.identity.fingerprint import HASH_DTYPE, VERSION, fingerprint
from sharflow.identity.keys import utterance_key
from sharflow.io import containers
from sharflow.io.audio import load_span, resample, resolve_audio_path, span_key
from sharflow.models import speaker_embedders
from sharflow.models.speaker_embedders import embed_each
from sharflow.work.parallel import chunked, ordered_map
from sharflow.work.parts import part_records

log = logging.getLogger(__name__)

VOICE_BATCH = 16  # records a worker decodes, then embeds their voices in one call (part_entries)
NO_VOICES = np.dtype([("voice", "<f4", (0,))])  # the voices file of a part without identity.voices


@dataclass(frozen=True)
class VoiceEmbedding:
    """The embedder of the records' voices (identity.voices: embedder, embedder_options)."""

    embedder: str = "ge2e"
    options: tuple = ()  # (key, value) pairs: hashable and picklable
    dim: int = 256

    @property
    def dtype(self) -> np.dtype:
        return np.dtype([("voice", "<f4", (self.dim,))])

    def load(self):
        """The embedder, once per process, on one torch thread (so that bytes do not depend on the
        worker count); GE2E level-normalised unless its options say otherwise."""
        key = (self.embedder, self.options)
        if key not in _EMBEDDERS:
            import torch

            torch.set_num_threads(1)
            _EMBEDDERS[key] = self.build("cpu")
        return _EMBEDDERS[key]

    def build(self, device: str):
        """The embedder on `device`, GE2E level-normalised unless its options say otherwise."""
        from sharflow.models.speaker_embedders import load_embedder

        options = dict(self.options)
        if self.embedder == "ge2e":
            options.setdefault("level", "normalize")
        return load_embedder(self.embedder, device, **options)


_EMBEDDERS: dict = {}


@dataclass(frozen=True)
class IdentityOptions:
    """What the quality stage's measuring ranks need to write a dataset's identity parts from the
    decode they measure (sharflow.quality.part): who its speakers are, the voices' embedder (None
    without identity.voices) and the run's measure_signature."""

    dataset: str = ""
    own_speaker_ids: bool = False
    voices: VoiceEmbedding | None = None
    signature: str = ""


def run_identity_part(
    part: int,
    *,
    records: str,
    parts: int,
    audio_root: str,
    out_records: str,
    out_hashes: str,
    out_stats: str,
    workers: int = 1,
    dataset: str = "",
    own_speaker_ids: bool = False,
    out_voices: str | None = None,
    voices: VoiceEmbedding | None = None,
) -> dict:
    """Fingerprint and key the records of one part; write its files (see the module). A speaker is
    `who` (core.splits.speaker_identity of `dataset` and `own_speaker_ids`). With `voices` (the
    embedder) and `out_voices`, each record's speaker embedding too.

    The identity stage's own job, run when the quality stage is off; with quality on, the quality
    parts write these files from the decode they measure (sharflow.quality.part)."""
    start = time.perf_counter()
    mine = part_records(records, part, parts)
    if voices is not None:
        voices = replace(voices, dim=voices.load().dim)
    log.info("identity part %d of %d: %d records, %d workers", part, parts, len(mine), workers)
    earlier = Earlier(out_records, out_hashes, out_voices, out_stats)
    signature = measure_signature(voices)
    with (
        PartWriter(out_records, out_hashes, out_voices, voices) as writer,
        tqdm(total=len(mine), desc=f"identity part {part}", unit="utt", mininterval=5) as bar,
    ):
        work = partial(part_entries, audio_root, dataset, own_speaker_ids, voices)
        items = (
            (line, raw, *earlier.find(audio_root, raw, signature)) for line, raw in part_lines(records, mine)
        )
        for chunk, entries in ordered_map(work, chunked(items, VOICE_BATCH), workers):
            for (line, *_), (entry, hashes, voice) in zip(chunk, entries, strict=True):
                writer.add(line, entry, hashes, voice)
            bar.update(len(chunk))
    return writer.finish(out_stats, part, parts, earlier.reused, time.perf_counter() - start)


class PartWriter:
    """Writes a part's .jsonl, .npy and .voices.npy as entries come, in line order (the module);
    `finish` writes its stats, with the files' sizes."""

    def __init__(self, out_records: str, out_hashes: str, out_voices: str | None, voices):
        self.paths = (out_records, out_hashes, out_voices)
        self.voices_dtype = voices.dtype if voices else NO_VOICES
        self.counts = {"records": 0, "unreadable": 0, "unusable": 0, "hashes": 0, "audio_seconds": 0.0}
        self._stack = ExitStack()

    def __enter__(self):
        out_records, out_hashes, out_voices = self.paths
        self.index = self._stack.enter_context(atomic_file(out_records, "w", encoding="utf-8"))
        self.sink = self._stack.enter_context(RowsFile(out_hashes, HASH_DTYPE))
        self.voice_sink = self._stack.enter_context(RowsFile(out_voices, self.voices_dtype))
        return self

    def __exit__(self, *exc):
        return self._stack.__exit__(*exc)

    def add(self, line: int, entry: dict, hashes: np.ndarray, voice: np.ndarray | None) -> None:
        """One record's entry (less line and start), hashes and voice row (None: no voices)."""
        entry = {"line": line, **entry, "start": self.counts["hashes"]}
        self.counts["records"] += 1
        _count(self.counts, entry)
        self.sink.write(hashes)
        self.voice_sink.write(voice)
        self.index.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def finish(self, out_stats: str, part: int, parts: int, reused: int, seconds: float) -> dict:
        stats = {
            "part": part,
            "parts": parts,
            "fingerprint_version": VERSION,
            **self.counts,
            "audio_seconds": round(self.counts["audio_seconds"], 3),
            "reused": reused,
            "measured": self.counts["records"] - reused,
            "files": _sizes(*self.paths),
            "seconds": round(seconds, 3),
        }
        write_json(out_stats, stats)
        return stats


def _count(counts: dict, entry: dict) -> None:
    """Add an entry to the part's counts."""
    if "error" in entry:
        counts["unreadable"] += 1
    else:
        counts["audio_seconds"] += entry["duration"]
        counts["unusable"] += entry["hashes"] == 0
    counts["hashes"] += entry["hashes"]


def _sizes(*paths: str | None) -> list:
    return [os.path.getsize(p) if p else None for p in paths]


# what a part's fingerprints and voices are computed with besides the record (measure_signature)
FINGERPRINT_PACKAGES = ("sharflow", "numpy", "soundfile", "soxr")
VOICE_PACKAGES = ("torch", "resemblyzer", "nemo_toolkit")


def measure_signature(voices: "VoiceEmbedding | None") -> str:
    """What every entry of a run depends on besides its record: the fingerprint version, the decoding
    and fingerprinting packages' versions, and with voices the embedder, its options (a weights or
    model file by its size and time), sharflow's EMBEDDING_VERSION and the embedding packages' versions."""
    what: dict = {"fingerprint": VERSION, "versions": package_versions(*FINGERPRINT_PACKAGES)}
    if voices is not None:
        what["voices"] = {
            "embedder": file_identity(voices.embedder),
            "options": [[k, file_identity(v)] for k, v in voices.options],
            "embedding": speaker_embedders.EMBEDDING_VERSION,
            "versions": package_versions(*VOICE_PACKAGES),
        }
    return json.dumps(what, sort_keys=True)


def entry_key(record: dict, stamp: list, signature: str) -> str:
    """The key of what one entry measured: the record's span, its audio file's [size, version]
    (containers.stamp) and the run's measure_signature. Not its line, text or speaker: those are read
    afresh every run."""
    span = f"{record['audio_filepath']}|{record['offset']}|{record['duration']}"
    text = f"{span}|{stamp[0]}|{stamp[1]}|{signature}"
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


class Earlier:
    """The part's own files of the last run, by the key of what each entry measured (the module)."""

    def __init__(self, records: str, hashes: str, voices: str | None, stats: str):
        self.by_key: dict[str, tuple[int, int, int, str]] = {}  # key -> row, start, hashes, digest
        self.reused = 0
        paths = (records, hashes, voices)
        if not all(p is None or os.path.exists(p) for p in (*paths, stats)):
            return
        with open(stats, encoding="utf-8") as f:
            if json.load(f).get("files") != _sizes(*paths):
                return  # not the files its stats describe: measure afresh
        self.hashes = np.load(hashes, mmap_mode="r")
        self.voices = np.load(voices, mmap_mode="r") if voices else None  # rows of VoiceEmbedding.dtype
        with open(records, encoding="utf-8") as f:
            for row, text in enumerate(f):
                entry = json.loads(text)
                if "key" in entry and "error" not in entry:
                    self.by_key[entry["key"]] = (row, entry["start"], entry["hashes"], entry["digest"])

    def has(self, key: str | None) -> bool:
        """Whether the last run measured an entry under `key`."""
        return key in self.by_key

    def find(self, audio_root: str, raw: bytes, signature: str) -> tuple[str | None, tuple | None]:
        """(key, (digest, hashes, voice row) of the last run or None) of a record line."""
        record = json.loads(raw)
        try:
            path, _ = resolve_audio_path(audio_root, record["audio_filepath"])
        except (OSError, SharflowError):
            return None, None  # measuring says what is wrong with it
        key = identity_key(path, record, signature)
        return key, self.found(key)

    def found(self, key: str | None) -> tuple | None:
        """(digest, hashes, voice row) the last run measured under `key`, or None."""
        hit = self.by_key.get(key) if key is not None else None
        if hit is None:
            return None
        row, start, count, digest = hit
        self.reused += 1
        voice = np.array(self.voices[row : row + 1]) if self.voices is not None and len(self.voices) else None
        return digest, np.array(self.hashes[start : start + count]), voice


def part_lines(records: str, mine) -> Iterator[tuple[int, bytes]]:
    """(line, raw record) of a part's records, read by offset one at a time."""
    with open(records, "rb") as src:
        for line, offset, _ in mine:
            src.seek(offset)
            yield line, src.readline()


class RowsFile:
    """A part's .npy of rows of `dtype`, written as they come: raw rows to a scratch file beside it,
    then copied block by block under an .npy header (the count is known only at the end), renamed
    last. Without a path, nothing is written; None rows are skipped."""

    BLOCK = 1 << 20

    def __init__(self, path: str | None, dtype: np.dtype):
        self.path = Path(path) if path else None
        self.dtype = dtype
        self.rows = 0

    def __enter__(self):
        if self.path is None:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, self.raw_path = tempfile.mkstemp(
            prefix=f".{self.path.name}.", suffix=".raw", dir=self.path.parent
        )
        self.raw = os.fdopen(fd, "wb")
        return self

    def write(self, rows: np.ndarray | None) -> None:
        if self.path is None or rows is None:
            return
        self.raw.write(np.ascontiguousarray(rows, dtype=self.dtype).tobytes())
        self.rows += len(rows)

    def __exit__(self, exc_type, *_):
        if self.path is None:
            return False
        self.raw.close()
        try:
            if exc_type is None:
                self._publish()
        finally:
            os.unlink(self.raw_path)
        return False

    def _publish(self) -> None:
        with atomic_path(self.path) as tmp:
            if not self.rows:
                with open(tmp, "wb") as f:
                    np.save(f, np.zeros(0, self.dtype))
                return
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=self.dtype, shape=(self.rows,))
            src = np.memmap(self.raw_path, dtype=self.dtype, mode="r", shape=(self.rows,))
            for i in range(0, self.rows, self.BLOCK):
                out[i : i + self.BLOCK] = src[i : i + self.BLOCK]
            out.flush()
            del out, src


def samples_digest(audio: np.ndarray) -> str:
    """16 hex digits of blake2b over the decoded samples (float32): the same for exact copies only."""
    return hashlib.blake2b(np.ascontiguousarray(audio, dtype=np.float32).tobytes(), digest_size=8).hexdigest()


def fingerprint_rows(audio: np.ndarray, rate: int) -> np.ndarray:
    """The fingerprint of decoded audio as rows of HASH_DTYPE (none for audio too short or silent)."""
    fp = fingerprint(audio, rate)
    hashes = np.zeros(len(fp) if fp.usable else 0, HASH_DTYPE)
    if fp.usable:
        hashes["hash"], hashes["time"] = fp.hashes, fp.times
    return hashes


def identity_key(path: str, record: dict, signature: str) -> str | None:
    """entry_key of a record whose audio is at `path`; None when its file cannot be stamped."""
    try:
        size, version = containers.stamp(path)
    except (OSError, SharflowError):
        return None  # measuring says what is wrong with it
    return entry_key(record, [size, version], signature)


def identity_entry(
    audio_root: str, dataset: str, own_ids: bool, record: dict, key: str | None, measure: Callable
) -> tuple[dict, np.ndarray, object]:
    """(index entry less line and start, hashes, extra) of one record. measure(path) gives (digest,
    hashes, extra) from a decode or the last run, or raises for audio that cannot be decoded: the
    entry then says why (and has no fingerprint; the quality stage rejects its record)."""
    speaker = parse_speaker(record["speaker"]).speaker_id
    entry = {
        "audio_filepath": record["audio_filepath"],
        "offset": record["offset"],
        "duration": record["duration"],
        "speaker": speaker,
        "who": speaker_identity(dataset, speaker, own_ids),
    }
    try:
        path, _ = resolve_audio_path(audio_root, record["audio_filepath"])
        entry["span"] = span_key(path, record["offset"], record["duration"])
        digest, hashes, extra = measure(path)
    except Exception as e:  # reported per record; quality rejects its record
        error = f"{record['audio_filepath']}: {e}"
        return {**entry, "utterance": None, "hashes": 0, "error": error}, np.zeros(0, HASH_DTYPE), None
    entry["utterance"] = utterance_key(entry["who"], record.get("normalized_text") or record.get("text"))
    entry["digest"] = digest
    entry["hashes"] = len(hashes)
    entry["key"] = key
    return entry, hashes, extra


def part_entries(
    audio_root: str, dataset: str, own_ids: bool, voices: VoiceEmbedding | None, items: list[tuple]
) -> list[tuple[dict, np.ndarray, np.ndarray | None]]:
    """part_entry of each of `items`, the voices of those decoded embedded in one call (embed_each)."""
    pending: list[tuple[np.ndarray, np.ndarray]] = []
    out = [part_entry(audio_root, dataset, own_ids, voices, item, pending) for item in items]
    if pending:
        embedded = embed_each(voices.load(), [wave for _, wave in pending])
        for (voice, _), row in zip(pending, embedded, strict=True):
            voice["voice"] = row
    return out


def part_entry(
    audio_root: str,
    dataset: str,
    own_ids: bool,
    voices: VoiceEmbedding | None,
    item: tuple,
    pending: list,
) -> tuple[dict, np.ndarray, np.ndarray | None]:
    """(index entry less line and start, hashes, voice row or None) of one item: a record line, the
    key of what it measures, and what the last run measured under that key (or None: decode). A
    decoded record's voice row is returned empty and (row, waveform) added to `pending`, for
    part_entries to embed."""
    _, raw, key, earlier = item

    def measure(path: str):
        if earlier is not None:  # measured under the same key: the same voices setting
            return earlier
        audio, rate = load_span(path, json_record["offset"], json_record["duration"])
        digest, hashes, voice = samples_digest(audio), fingerprint_rows(audio, rate), None
        if voices:
            embedder = voices.load()
            voice = np.zeros(1, voices.dtype)
            pending.append((voice, resample(audio, rate, embedder.sample_rate)))
        return digest, hashes, voice

    json_record = json.loads(raw)
    entry, hashes, voice = identity_entry(audio_root, dataset, own_ids, json_record, key, measure)
    if voices and voice is None:  # no decode: a row of zeros keeps the rows in line with the entries
        voice = np.zeros(1, voices.dtype)
    return entry, hashes, voice
