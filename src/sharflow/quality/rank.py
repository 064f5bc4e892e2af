"""One rank of a quality part: CPU workers read and measure the signal while the device runs the models.

A rank is given (line, byte offset) pairs of the records file. Its CPU side (`load_record`) reads
a record, decodes its span (sharflow.io.audio.load_span: the samples the shard stores), resamples
it to 16 kHz (and to the ASR model's rate) and computes the signal measures and, with identity, the
fingerprint and the samples' digest, in `workers` spawned processes in line order
(sharflow.work.parallel.ordered_map), or in one thread. Consecutive records
are grouped into about `batch_seconds` of audio, the next group read while the rank's own thread
runs its models over the last one on its device (`Meters`, sharflow.work.parallel.prefetched):
DNSMOS windows, the VAD's frames and LSTM rows, and the ASR check's length-sorted batches, each many
records at once, and the speaker embedders (the context stage's, and with identity.voices the
level-normalised voice), a group's records in one call; then it writes one line per record, in line
order, to each of its scratch files (metrics, identity entries, embedding rows). Every batch has a
fixed shape (sharflow.models.dnsmos, sharflow.models.vad), so a record's metrics depend on the
record alone, not on which records share its group, rank, part or worker.
"""

import base64
import json
import logging
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import numpy as np
from tqdm import tqdm

from sharflow.core.metrics import TEXT_METRICS
from sharflow.identity.part import (
    IdentityOptions,
    fingerprint_rows,
    identity_entry,
    identity_key,
    samples_digest,
)
from sharflow.io.audio import load_span, resample, resolve_audio_path
from sharflow.models.speaker_embedders import embed_each
from sharflow.quality.metrics import MODEL_RATE, record_metrics, signal_measures
from sharflow.quality.reuse import measure_digest, record_key
from sharflow.work.parallel import ordered_map, prefetched
from sharflow.work.ranks import Rank

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AsrOptions:
    """The optional ASR check (quality.asr): a NeMo ASR model and the audio seconds per batch."""

    model: str
    batch_seconds: float = 60.0
    random: bool = False  # built by the workflow from random_from_config: say so loudly


@dataclass(frozen=True)
class SpeakerEmbedding:
    """The context stage's speaker embedder (context.embedder, context.embedder_options), which the
    quality parts run over every record so that the context stage never decodes again."""

    name: str = "ge2e"
    options: tuple = ()  # (key, value) pairs: hashable and picklable

    def build(self, device: str):
        from sharflow.models.speaker_embedders import load_embedder

        return load_embedder(self.name, device, **dict(self.options))


@dataclass(frozen=True)
class MeasureSettings:
    """What a rank needs besides its records (picklable, sent to spawned ranks and workers)."""

    audio_root: str
    dnsmos_max_windows: int = 0
    asr: AsrOptions | None = None
    batch_seconds: float = 300.0  # audio seconds a rank's models measure together
    identity: IdentityOptions | None = None  # with identity: its parts written from the same decode
    embedder: SpeakerEmbedding | None = None  # the context stage's embeddings, from the same decode


def text_metrics(record: dict) -> dict:
    """The text stage's metrics of a record, passed on with the audio's (None where it has none)."""
    return {name: record.get(name) for name in TEXT_METRICS}


def audio_path(audio_root: str, record: dict) -> str:
    """The record's audio path under its root; "" for one that escapes it or cannot be resolved."""
    try:
        return resolve_audio_path(audio_root, record["audio_filepath"])[0]
    except Exception:  # an escaping or unreadable path: keyed as unreadable, measured (and rejected)
        return ""


# ---- the CPU side -------------------------------------------------------------------------------


@dataclass
class Loaded:
    """A record as the CPU side hands it to the models: its audio and signal measures, or an error."""

    line: int
    key: str
    record: dict
    audio_16k: np.ndarray | None = None
    asr_wave: np.ndarray | None = None  # the audio at the ASR model's rate (with the ASR check)
    signal: dict | None = None
    error: str | None = None
    identity: tuple[dict, np.ndarray] | None = None  # with identity: its entry and fingerprint rows

    @property
    def seconds(self) -> float:
        return 0.0 if self.audio_16k is None else len(self.audio_16k) / MODEL_RATE


def load_record(
    records: str, settings: MeasureSettings, digest: str, asr_rate: int | None, item: tuple[int, int]
) -> Loaded:
    """Read the record at (line, byte offset), decode its span and measure its signal."""
    line, offset = item
    with open(records, "rb") as src:
        src.seek(offset)
        record = json.loads(src.readline())
    path = audio_path(settings.audio_root, record)  # resolved once: for the key and for reading
    key = record_key(record, path, digest)
    try:
        if not path:  # an escaping or unreadable path: the reason, as resolve_audio_path gives it
            resolve_audio_path(settings.audio_root, record["audio_filepath"])
        audio, rate = load_span(path, record["offset"], record["duration"])
    except Exception as e:  # reported per record; the part goes on without it
        identity = identity_of(settings, record, path, error=e)
        return Loaded(line, key, record, error=f"{record['audio_filepath']}: {e}", identity=identity)
    audio_16k = resample(audio, rate, MODEL_RATE)
    asr_wave = None
    if asr_rate is not None:
        asr_wave = audio_16k if asr_rate == MODEL_RATE else resample(audio, rate, asr_rate)
    identity = identity_of(settings, record, path, decoded=(audio, rate))
    return Loaded(line, key, record, audio_16k, asr_wave, signal_measures(audio, rate), identity=identity)


def identity_of(
    settings: MeasureSettings, record: dict, path: str, decoded: tuple | None = None, error=None
) -> tuple[dict, np.ndarray] | None:
    """With identity, a record's identity entry and fingerprint rows from the decode quality measures
    (sharflow.identity.part.identity_entry); its voice is embedded on the rank's device (Meters)."""
    options = settings.identity
    if options is None:
        return None

    def measure(_path: str):
        if error is not None:
            raise error
        audio, rate = decoded
        return samples_digest(audio), fingerprint_rows(audio, rate), None

    key = identity_key(path, record, options.signature) if path else None
    entry, hashes, _ = identity_entry(
        settings.audio_root, options.dataset, options.own_speaker_ids, record, key, measure
    )
    return entry, hashes


def loaded_records(lines: list[tuple[int, int]], load, workers: int) -> Iterator[Loaded]:
    """load(item) of every item, in order: in `workers` processes a window ahead, else here."""
    if workers <= 1:
        return map(load, lines)
    return (loaded for _, loaded in ordered_map(load, lines, workers, window=4 * workers))


def groups(loaded: Iterable[Loaded], seconds: float) -> Iterator[list[Loaded]]:
    """Consecutive records holding at least `seconds` of audio (the last group may hold less)."""
    group: list[Loaded] = []
    total = 0.0
    for item in loaded:
        group.append(item)
        total += item.seconds
        if total >= seconds:
            yield group
            group, total = [], 0.0
    if group:
        yield group


# ---- the device side ----------------------------------------------------------------------------


class Meters:
    """The models a rank loads once (DNSMOS, VAD, the optional ASR check) and runs over its groups."""

    def __init__(self, device: str, settings: MeasureSettings):
        from sharflow.models.dnsmos import Dnsmos
        from sharflow.models.vad import SileroVad

        self.dnsmos = Dnsmos(device, settings.dnsmos_max_windows)
        self.vad = SileroVad(device)
        # On a GPU both models are bound by launching kernels from Python (the VAD's LSTM steps one
        # frame at a time): two threads launch them side by side, 1.24x one thread on an H100
        # (docs: performance). On a CPU the rank has one thread to give.
        self.overlap = device.startswith("cuda")
        self.transcriber, self.asr_batch_seconds = None, 0.0
        if settings.asr is not None:
            from sharflow.models.asr import Transcriber

            self.transcriber = Transcriber(settings.asr.model, device, random=settings.asr.random)
            self.asr_batch_seconds = settings.asr.batch_seconds
        self.identity = settings.identity is not None
        voices = settings.identity.voices if settings.identity else None
        self.voices = voices.build(device) if voices else None
        self.voices_dtype = voices.dtype if voices else None
        self.embedder = settings.embedder.build(device) if settings.embedder else None

    def names(self, settings: MeasureSettings) -> str:
        """The models loaded, as the rank's log says them."""
        names = [f"DNSMOS ({self.dnsmos.engine})", "VAD"]
        names += ["ASR"] * bool(self.transcriber) + ["voices"] * bool(self.voices)
        return ", ".join(names + ([f"speaker embedder {settings.embedder.name}"] if self.embedder else []))

    def write(self, group: list[Loaded], out, identities, embeddings) -> None:
        """A group's metrics lines to `out` and, from the same decode, its identity lines (with
        identity) and embedding rows (with the embedder) to the rank's other scratch files."""
        out.writelines(json.dumps(entry) + "\n" for entry in self.measure(group))
        if self.identity:
            identities.writelines(identity_lines(group, self.voice_rows(group)))
        if self.embedder is not None:
            embeddings.writelines(
                json.dumps({"line": item.line, "embedding": _b64(row)}) + "\n"
                for item, row in zip(group, self.embedding_rows(group), strict=True)
            )

    def embedding_rows(self, group: list[Loaded]) -> list[np.ndarray]:
        """Each record's speaker embedding by the context stage's embedder (zeros for audio that could
        not be decoded), the group's records in one call (embed_each: its bytes depend on the record
        alone)."""
        rows = np.zeros((len(group), 1, self.embedder.dim), np.float32)
        self._embed_into(rows[:, 0], self.embedder, group)
        return list(rows)

    def voice_rows(self, group: list[Loaded]) -> list[np.ndarray | None]:
        """With identity.voices, each record's voice embedding (a row of zeros for audio that could
        not be decoded), the group's records in one call, as embedding_rows."""
        if self.voices is None:
            return [None] * len(group)
        rows = np.zeros((len(group), 1), self.voices_dtype)
        self._embed_into(rows["voice"][:, 0], self.voices, group)
        return list(rows)

    @staticmethod
    def _embed_into(rows: np.ndarray, embedder, group: list[Loaded]) -> None:
        """Each decoded record's embedding into its row of `rows` (a row per record of the group)."""
        done = [i for i, item in enumerate(group) if item.error is None]
        rate = embedder.sample_rate
        waves = [group[i].audio_16k for i in done]
        if rate != MODEL_RATE:
            waves = [resample(wave, MODEL_RATE, rate) for wave in waves]
        rows[done] = embed_each(embedder, waves)

    @property
    def asr_rate(self) -> int | None:
        return self.transcriber.sample_rate if self.transcriber else None

    def scores_and_spans(self, clips: list[np.ndarray]) -> tuple[list[dict], list[list[tuple[int, int]]]]:
        """DNSMOS scores and VAD speech spans of 16 kHz clips."""
        if not self.overlap:
            return self.dnsmos.score(clips), self.vad.speech(clips)
        # DNSMOS's kernels launched from a second thread while this one launches the VAD's
        with ThreadPoolExecutor(1, thread_name_prefix="dnsmos") as pool:
            pending = pool.submit(self.dnsmos.score, clips)
            spans = self.vad.speech(clips)
            return pending.result(), spans

    def measure(self, group: list[Loaded]) -> list[dict]:
        """A metrics line (without its newline) for each record of the group, in its order."""
        from sharflow.quality.text import asr_fields

        ok = [item for item in group if item.error is None]
        clips = [item.audio_16k for item in ok]
        scores, spans = self.scores_and_spans(clips)
        asr = [{}] * len(ok)
        if self.transcriber:
            texts = self.transcriber.transcribe_sorted([item.asr_wave for item in ok], self.asr_batch_seconds)
            asr = [asr_fields(item.record, text) for item, text in zip(ok, texts, strict=True)]
        measured = {
            item.line: {
                **record_metrics(
                    item.record, signal=item.signal, dnsmos=score, spans=found, samples_16k=len(clip)
                ),
                **text_metrics(item.record),
                **fields,
            }
            for item, clip, score, found, fields in zip(ok, clips, scores, spans, asr, strict=True)
        }
        return [
            {"line": item.line, **measured[item.line], "key": item.key}
            if item.error is None
            else {"line": item.line, "error": item.error, "key": item.key}
            for item in group
        ]


def identity_lines(group: list[Loaded], voices: list[np.ndarray | None]) -> Iterator[str]:
    """A rank's scratch lines of its records' identity entries, fingerprints and voices (base64 of
    their rows), in line order; sharflow.quality.part writes them as the identity part's files."""
    for item, voice in zip(group, voices, strict=True):
        entry, hashes = item.identity
        yield (
            json.dumps(
                {
                    "line": item.line,
                    "entry": entry,
                    "hashes": _b64(hashes),
                    "voice": None if voice is None else _b64(voice),
                },
                ensure_ascii=False,
            )
            + "\n"
        )


def _b64(rows: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(rows).tobytes()).decode("ascii")


def measure_records(
    rank: Rank,
    lines: list[tuple[int, int]],
    records: str,
    settings: MeasureSettings,
    digest: str | None = None,
    workers: int = 1,
) -> dict:
    """One rank: measure its records (line, byte offset); write {"line", metrics... | error, "key"}
    in line order to its scratch file `.jsonl`. `workers` CPU processes read and measure the signal."""
    start = time.perf_counter()
    stats = {"rank": rank.index, "device": rank.device, "records": len(lines), "unreadable": 0}
    stats |= {"audio_seconds": 0.0, "waiting_seconds": 0.0, "measuring_seconds": 0.0, "dnsmos_engine": None}
    if not lines:
        for suffix in (".jsonl", ".identity.jsonl", ".embeddings.jsonl"):
            open(rank.file(suffix), "w").close()
        return {**stats, "seconds": round(time.perf_counter() - start, 3)}
    meters = Meters(rank.device, settings)
    log.info(  # once per rank and job (tests/test_workflow.py counts these lines)
        "quality models loaded on %s in %.1f s: %s; %d CPU worker(s) read ahead",
        *(rank.device, time.perf_counter() - start, meters.names(settings), workers),
    )
    digest = digest or measure_digest(settings, meters.dnsmos.engine)
    load = partial(load_record, records, settings, digest, meters.asr_rate)
    desc = f"quality rank {rank.index} ({rank.device})"
    with (
        open(rank.file(".jsonl"), "w", encoding="utf-8") as out,
        open(rank.file(".identity.jsonl"), "w", encoding="utf-8") as identities,
        open(rank.file(".embeddings.jsonl"), "w", encoding="utf-8") as embeddings,
        tqdm(total=len(lines), desc=desc, unit="utt", mininterval=5) as bar,
    ):
        # the next group is read while this one is measured
        stream = prefetched(groups(loaded_records(lines, load, workers), settings.batch_seconds))
        while True:
            waited = time.perf_counter()
            group = next(stream, None)
            stats["waiting_seconds"] += time.perf_counter() - waited  # on the CPU workers
            if group is None:
                break
            measuring = time.perf_counter()
            meters.write(group, out, identities, embeddings)
            stats["measuring_seconds"] += time.perf_counter() - measuring
            stats["unreadable"] += sum(item.error is not None for item in group)
            stats["audio_seconds"] += sum(item.seconds for item in group)
            bar.update(len(group))
    rounded = {k: round(stats[k], 3) for k in ("audio_seconds", "waiting_seconds", "measuring_seconds")}
    return {
        **stats,
        **rounded,
        "seconds": round(time.perf_counter() - start, 3),
        "dnsmos_engine": meters.dnsmos.engine,
        "embedding_dim": meters.embedder.dim if meters.embedder else None,
    }
