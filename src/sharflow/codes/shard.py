"""The codes stage: codec codes for the target and context audio of every cut of a block of shards.

Per (dataset, codec, block) job — a block is `codes.shards_per_job` shards, the shards of a short
last block one job each:
- the model is loaded once per rank and job (rank 0 in the job's own process), not once per shard:
  its start-up (the framework's import, the model's restore) is most of a small job.
- per shard, read its two audio tars' manifests (lengths only) and plan batches: every utterance
  (target and context alike) sorted by length, cut into batches of at most `batch_seconds` of audio
  whose items have the same number of code frames, padded once to that many frames. So an
  utterance's codes are exactly those it gets when encoded alone, whatever else is in the shard or
  the block, and do not depend on how many ranks share the work.
- bin-pack the block's batches onto ranks by audio length (one rank per visible GPU, else CPU
  processes with one torch thread); each rank goes through its batches in shard order, decoding
  the next batch while the model encodes the current one, resampling once to the codec's rate,
  trimming each item's codes to ceil(samples / samples_per_frame) frames, and keeps one shard's
  codes at a time (in a scratch file per rank and shard).
- as soon as a shard's codes are all encoded, the rank that saved its last ones writes its
  target_codes and context_codes tars in cut order with lhotse's ArrayTarWriter under temporary
  names, renamed into place when both are complete, and keeps it for a rerun of a killed job
  (sharflow.work.resume), which makes only the shards not yet written. Codes are int16 when every code
  fits, else int32; frame_shift = samples_per_frame / sample_rate exactly.
A cut whose audio fails to decode fails the job, naming shard and cut id: silently dropping it
would misalign the codes with the cuts.
"""

import io
import itertools
import json
import logging
import os
import shutil
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from sharflow.codes.batches import Item, padding_efficiency, plan_batches, samples_at, whole_frames
from sharflow.codes.spec import LOAD_TIMES, CodecSpec, cached_codec, read_codec_spec
from sharflow.core.atomic import read_json, write_json
from sharflow.core.blocks import require_made, shard_key
from sharflow.core.errors import SharflowError
from sharflow.core.layout import CodesFiles
from sharflow.core.logs import seconds_since_process_start
from sharflow.core.shar_index import write_index
from sharflow.work.balance import lpt_assign
from sharflow.work.jobs import finish_job
from sharflow.work.memory import release_freed_memory
from sharflow.work.parallel import ahead
from sharflow.work.ranks import Rank, RankResult, rank_job
from sharflow.work.resume import ResumableJob, content_key

log = logging.getLogger(__name__)
KINDS = ("target", "context")


@dataclass(frozen=True)
class ShardCodes:
    """One shard of a codes job: its number, its two audio tars, and the files its codes go to."""

    shard: int
    target_tar: str
    context_tar: str
    out: CodesFiles
    audio_key: str | None = None  # what its audio is made of, from its shar stats (shar.shard.shard_keys)


@dataclass(frozen=True)
class _Plan:
    """One shard's cut ids, items and batches."""

    ids: list[str]
    items: list[Item]
    batches: list[list[Item]]


def job_shards(members: list[str], shar_files, outputs) -> list[ShardCodes]:
    """The shards of a codes job from its block's member keys, shar_files(shard) (the shar files of
    a shard: layout.DatasetFiles.shard) and the job's named outputs (target_<m>, context_<m>,
    stats_<m>: a Snakemake job's, or a mapping). A missing audio file is named with the way to make
    it again: the job lists its shar jobs' records, not every shard's files."""
    shards = []
    for m, shard in enumerate(members):
        files = shar_files(shard)
        require_made((files.target, files.context))
        audio_key = read_json(files.stats).get("audio_key") if os.path.exists(files.stats) else None
        shards.append(
            ShardCodes(int(shard), files.target, files.context, CodesFiles.of_member(outputs, m), audio_key)
        )
    return shards


def audio_members(tar_path: str) -> list[tuple[str, str, dict]]:
    """(cut id, audio member name, Recording manifest) of an audio tar, in order."""
    out = []
    with tarfile.open(tar_path, "r:") as tar:
        members = tar.getmembers()
        for data, meta in zip(members[0::2], members[1::2], strict=True):
            manifest = json.loads(tar.extractfile(meta).read())
            out.append((meta.name.rsplit(".", 1)[0], data.name, manifest))
    return out


def encode_shards(
    shards: list[ShardCodes],
    *,
    codec: CodecSpec,
    batch_seconds: float = 60.0,
    device: str = "auto",
    workers: int = 1,
    gpus: int = 0,
    resume: ResumableJob | None = None,
) -> list[dict]:
    """Encode the shards' target and context audio with `codec`, the model loaded once per rank; write
    each shard's two code tars atomically and its stats as soon as its last batch is encoded (by
    the rank that encodes it). With `resume`, a shard a killed run of the job finished is put back
    instead, and so is a shard whose audio and codec are what they were when it was made (codes_key); each
    shard written is kept. Returns the stats of each shard."""
    start, before_job = time.perf_counter(), seconds_since_process_start()
    what = f"codes {codec.name}, {_span(shards)}"
    with rank_job(what, device=device, workers=workers, gpus=gpus, scratch_beside=shards[0].out.stats) as job:
        model = cached_codec(codec, job.devices[0])  # rank 0 runs in this process and reuses it
        startup = _startup(
            before_job, time.perf_counter() - start, LOAD_TIMES.get((codec.name, job.devices[0]))
        )
        _log_codec(codec, model)
        keys = {s.shard: codes_key(codec, batch_seconds, s.audio_key, _indexed(s)) for s in shards}
        todo = [
            s
            for s in shards
            if resume is None or not resume.restore(shard_key(s.shard), _files(s), keys[s.shard])
        ]
        works, costs = _works(todo, model, batch_seconds, len(job.devices))
        out = _Out(codec.name, _dtype(model), tuple(job.devices), resume, keys)
        ranks = job.run(
            encode_batches,
            costs,
            unit=lambda k: (k[0], works[k[0]].plan.batches[k[1]]),
            args=(works, codec, out),
        )
        for w in works:  # a shard with no cut has no batch, so no rank wrote it
            if not os.path.exists(w.shard.out.stats):
                _write_shard(w, job.scratch, model, out)
    stats = [read_json(s.out.stats) for s in shards]
    _log_job(what, startup, [read_json(s.out.stats) for s in todo], ranks, time.perf_counter() - start)
    return stats


@dataclass(frozen=True)
class _Work:
    """A shard of the job as every rank sees it: the shard, its plan, and the ranks with batches of it
    (the same bin-packing as RankJob.run), so that the last of them to finish writes it."""

    p: int
    shard: ShardCodes
    plan: _Plan
    owners: tuple[int, ...]


@dataclass(frozen=True)
class _Out:
    """How a rank writes a shard: the codec's name, the dtype of its codes, the job's devices, resume."""

    codec: str
    dtype: object
    devices: tuple[str, ...]
    resume: ResumableJob | None
    keys: dict[int, str | None]  # each shard's codes_key


def _works(shards: list[ShardCodes], model, batch_seconds: float, ranks: int) -> tuple[list[_Work], dict]:
    """The job's shards planned into batches, with their owners; and the cost of each batch, (p, b)."""
    plans = [_plan(s, model.sample_rate, model.samples_per_frame, batch_seconds) for s in shards]
    costs = {
        (p, b): sum(i.samples for i in batch)
        for p, plan in enumerate(plans)
        for b, batch in enumerate(plan.batches)
    }
    owners: dict[int, set[int]] = {}
    for r, keys in enumerate(lpt_assign(costs, ranks)):  # RankJob.run's bin-packing
        for p, _ in keys:
            owners.setdefault(p, set()).add(r)
    works = [_Work(p, s, plans[p], tuple(sorted(owners.get(p, ())))) for p, s in enumerate(shards)]
    return works, costs


def _dtype(model):
    return np.int16 if model.codebook_size <= np.iinfo(np.int16).max + 1 else np.int32


def _files(shard: ShardCodes) -> list[str]:
    return list(shard.out.named().values())


def run_codes_job(
    members: list[str],
    shar_files,
    outputs,
    *,
    codec: str,
    shar_jobs: list[str],
    batch_seconds: float,
    device: str,
    workers: int,
    gpus: int,
) -> list[dict]:
    """A codes job (sharflow.work.jobs): its shards' codes with the codec of the spec file `codec`
    (encode_shards), each kept as it is written so that a rerun of a killed job with the same inputs
    makes only the rest, and a rerun for another shard's new audio makes only that shard's; then its
    record. `shar_jobs`: the records of the shar jobs of its shards."""
    with ResumableJob(outputs["job"], members) as resume:
        stats = encode_shards(
            job_shards(members, shar_files, outputs),
            codec=read_codec_spec(codec),
            batch_seconds=batch_seconds,
            device=device,
            workers=workers,
            gpus=gpus,
            resume=resume,
        )
        finish_job(outputs, members)
    return stats


def codes_key(
    codec: CodecSpec, batch_seconds: float, audio_key: str | None, indexed: bool = False
) -> str | None:
    """What a shard's codes are made of: the codec (its spec, and its model file's size and time where
    it is a file), the batching and the shard's audio (its audio key), and whether its files are
    indexed (an unindexed shard's key is the one before indexes); None where the audio key is not
    known (a shard made by sharflow before it was kept: its codes are made again)."""
    if audio_key is None:
        return None
    model = os.stat(codec.model) if os.path.isfile(codec.model) else None
    stamp = (model.st_size, model.st_mtime_ns) if model else None
    return content_key(asdict(codec), stamp, batch_seconds, audio_key, *(["indexed"] if indexed else []))


def _indexed(shard: ShardCodes) -> bool:
    return shard.out.target_index is not None


def _span(shards: list[ShardCodes]) -> str:
    first, last = shard_key(shards[0].shard), shard_key(shards[-1].shard)
    return f"shard {first}" if len(shards) == 1 else f"shards {first}-{last} ({len(shards)})"


def _plan(shard: ShardCodes, rate: int, spf: int, batch_seconds: float) -> _Plan:
    ids, items = shard_items(shard.shard, shard.target_tar, shard.context_tar, rate)
    return _Plan(ids, items, plan_batches(items, int(batch_seconds * rate), spf))


def _write_shard(work: _Work, scratch: str, model, out: _Out) -> dict:
    """A shard's codes gathered from its owners' scratch files, written, its stats, and kept for resume."""
    start = time.perf_counter()
    sr, spf = model.sample_rate, model.samples_per_frame
    codes: dict[tuple[int, str], np.ndarray] = {}
    seconds = dict.fromkeys(range(len(out.devices)), 0.0)
    for owner in work.owners:
        with np.load(_scratch(scratch, owner, work.p)) as saved:
            codes.update({_unkey(k): saved[k] for k in saved.files if k != "seconds"})
            seconds[owner] = float(saved["seconds"])
    shard, plan = work.shard, work.plan
    _write_codes(codes, plan.ids, sr, spf, out.dtype, shard.out, Path(shard.out.stats).parent)
    rank_seconds = [round(seconds[r], 3) for r in sorted(seconds)]
    stats = {
        "codec": out.codec,
        "shard": shard.shard,
        "cuts": len(plan.ids),
        "items": len(plan.items),
        "batches": len(plan.batches),
        "padding_efficiency": round(padding_efficiency(plan.batches, spf), 4),
        "audio_seconds": round(sum(i.samples for i in plan.items) / sr, 3),
        "sample_rate": sr,
        "samples_per_frame": spf,
        "num_codebooks": model.num_codebooks,
        "codebook_size": model.codebook_size,
        "dtype": np.dtype(out.dtype).name,
        "devices": list(out.devices),
        "rank_seconds": rank_seconds,
        "seconds": round(sum(rank_seconds) + time.perf_counter() - start, 3),  # decode, forward, write
    }
    write_json(shard.out.stats, stats)
    if out.resume is not None:
        out.resume.keep(shard_key(shard.shard), _files(shard), out.keys[shard.shard])
    log.info(
        "codes %s, shard %s: %d cuts, %.0f s of audio in %d batches (padding efficiency %.3f) in %.1f rank-s",
        stats["codec"],
        shard_key(shard.shard),
        len(plan.ids),
        stats["audio_seconds"],
        len(plan.batches),
        stats["padding_efficiency"],
        stats["seconds"],
    )
    return stats


def _scratch(scratch: str, rank: int, p: int) -> str:
    """Rank `rank`'s codes of the job's shard p (Rank.file's name)."""
    return Rank(rank, "", scratch).file(f".{p}.npz")


def _write_if_last(work: _Work, rank: Rank, model, out: _Out) -> None:
    """After this rank saved its codes of a shard: if every owner's are there, the first rank to claim
    the shard writes it (the others go on with their batches)."""
    if not all(os.path.exists(_scratch(rank.scratch, o, work.p)) for o in work.owners):
        return
    try:
        os.close(os.open(f"{rank.scratch}/claim.{work.p}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    _write_shard(work, rank.scratch, model, out)


def _startup(process: float, in_job: float, load: dict | None) -> dict[str, float]:
    """The job's seconds before its first batch: the process until the job began (interpreter,
    Snakemake's preamble), the codec framework's import, the model's restore, and the rest (torch,
    sharflow, devices); a model this process had loaded before costs nothing here."""
    load = load if load and sum(load.values()) <= in_job else {"import": 0.0, "restore": 0.0}
    return {"process": process, **load, "other": max(0.0, in_job - sum(load.values()))}


def _log_job(what: str, startup: dict, stats: list[dict], ranks: list[RankResult], wall: float) -> None:
    """Where the job's time went: start-up (process, framework import, model restore, the rest) against
    encoding (decode, forward, write), and the share of the job's rank-seconds not spent encoding."""
    encoding = sum(s["seconds"] for s in stats)
    total = startup["process"] + wall  # the job's own process, from its start
    log.info(
        "%s: %.1f s: start-up %.1f s (process %.1f s, framework import %.1f s, model restore %.1f s, "
        "torch, sharflow and devices %.1f s), encoding %.1f rank-s over %d rank(s): fixed cost %.0f %%",
        what,
        total,
        sum(startup.values()),
        startup["process"],
        startup["import"],
        startup["restore"],
        startup["other"],
        encoding,
        len(ranks),
        100 * max(0.0, 1 - encoding / (total * len(ranks))),
    )


def _log_codec(codec: CodecSpec, model) -> None:
    log.info(
        "codec %s: %s, %d Hz, %d samples per frame, %d codebooks of %d",
        codec.name,
        model.description,
        model.sample_rate,
        model.samples_per_frame,
        model.num_codebooks,
        model.codebook_size,
    )


def shard_items(shard: int, target_tar: str, context_tar: str, rate: int) -> tuple[list[str], list[Item]]:
    """The shard's cut ids and every item to encode (each cut's target, then each cut's context),
    from the two audio tars' manifests; refuses tars whose cut ids differ."""
    listings = {
        kind: audio_members(path) for kind, path in zip(KINDS, (target_tar, context_tar), strict=True)
    }
    ids = [cid for cid, _, _ in listings["target"]]
    if [cid for cid, _, _ in listings["context"]] != ids:
        raise SharflowError(
            f"shard {shard}: {target_tar} and {context_tar} hold different cut ids; rebuild the shard"
        )
    items = [
        Item(i, kind, member, samples_at(manifest["num_samples"], manifest["sampling_rate"], rate))
        for kind in KINDS
        for i, (_, member, manifest) in enumerate(listings[kind])
    ]
    return ids, items


class _ShardAudio:
    """The shard's two audio tars, open for reading batches of items as padded tensors."""

    def __init__(self, target_tar: str, context_tar: str, model, shard: int, ids: list[str]):
        self.paths = {"target": target_tar, "context": context_tar}
        self.rate, self.spf = model.sample_rate, model.samples_per_frame
        self.shard, self.ids = shard, ids

    def __enter__(self) -> "_ShardAudio":
        self.tars = {kind: tarfile.open(path, "r:") for kind, path in self.paths.items()}  # noqa: SIM115
        return self

    def __exit__(self, *exc) -> None:
        for tar in self.tars.values():
            tar.close()

    def padded(self, batch: list[Item]):
        """(items, longest in whole frames) float32, zero-padded: one allocation, padded once."""
        import torch

        x = torch.zeros(len(batch), whole_frames(max(i.samples for i in batch), self.spf))
        for row, item in enumerate(batch):
            try:
                wave = _decode(self.tars[item.kind], item.member, self.rate)
            except Exception as e:
                raise SharflowError(
                    f"shard {self.shard}, cut {self.ids[item.cut]}: {item.kind} audio does not decode ({e})"
                ) from None
            n = min(len(wave), item.samples)
            x[row, :n] = torch.from_numpy(wave[:n])
        return x


def encode_batches(
    rank: Rank, units: list[tuple[int, list[Item]]], works: list[_Work], codec: CodecSpec, out: _Out
) -> dict[int, float]:
    """One rank: decode (one batch ahead) and encode its batches, shard by shard, each shard's codes
    saved to the rank's scratch file (renamed into place whole), and the shard written by the rank
    that saves its last codes; returns the seconds it spent on each shard, by position p."""
    from tqdm import tqdm

    model = cached_codec(codec, rank.device)
    seconds: dict[int, float] = {}
    desc = f"codes rank {rank.index} ({rank.device})"
    with tqdm(total=sum(len(b) for _, b in units), desc=desc, unit="utt", mininterval=5) as progress:
        for p, group in itertools.groupby(units, key=lambda unit: unit[0]):
            start = time.perf_counter()
            work = works[p]
            shard, ids = work.shard.shard, work.plan.ids
            codes: dict[tuple[int, str], np.ndarray] = {}
            with _ShardAudio(work.shard.target_tar, work.shard.context_tar, model, shard, ids) as audio:
                for batch, x in ahead(audio.padded, [batch for _, batch in group]):
                    codes.update(_encode(model, codec.name, batch, x, rank.device, f"shard {shard}", ids))
                    del x
                    if rank.device == "cpu":  # batches of many shapes fragment the heap (work.memory)
                        release_freed_memory()
                    progress.update(len(batch))
            seconds[p] = time.perf_counter() - start
            path = _scratch(rank.scratch, rank.index, p)
            np.savez(
                path + ".tmp.npz",
                seconds=seconds[p],
                **{f"{cut}.{kind}": a for (cut, kind), a in codes.items()},
            )
            os.replace(path + ".tmp.npz", path)
            _write_if_last(work, rank, model, out)
    return seconds


def _unkey(key: str) -> tuple[int, str]:
    cut, kind = key.split(".")
    return int(cut), kind


def _encode(model, name: str, batch: list[Item], x, device: str, where: str, ids: list[str]) -> dict:
    """{(cut, kind): codes} of one batch, each trimmed to its own frames (checked against the codec's)."""
    import torch

    from sharflow.models.codecs import frames

    lengths = torch.tensor([i.samples for i in batch])
    codes, code_lengths = model.encode(x.to(device), lengths.to(device))
    codes, code_lengths = codes.cpu().numpy(), code_lengths.cpu().numpy()
    out = {}
    for row, item in enumerate(batch):
        expected = frames(item.samples, model.samples_per_frame)
        if int(code_lengths[row]) != expected:
            raise SharflowError(
                f"codec {name} gave {int(code_lengths[row])} frames for {expected} expected "
                f"({where}, cut {ids[item.cut]})"
            )
        out[(item.cut, item.kind)] = codes[row, :, :expected]
    return out


def _decode(tar: tarfile.TarFile, member: str, rate: int) -> np.ndarray:
    import soundfile as sf
    import soxr

    wave, source_rate = sf.read(io.BytesIO(tar.extractfile(member).read()), dtype="float32", always_2d=True)
    wave = wave[:, 0]
    if source_rate != rate:
        wave = soxr.resample(wave, source_rate, rate, quality="HQ").astype(np.float32, copy=False)
    return wave


def _write_codes(codes, ids, sr, spf, dtype, out: CodesFiles, work_dir: Path) -> None:
    """Both code tars (and, in an indexed set, their indexes) under temporary names in `work_dir`
    (outside the Shar tree), then renamed, each index just before its tar."""
    from lhotse.array import Array, TemporalArray
    from lhotse.shar.writers import ArrayTarWriter

    finals = {"target": Path(out.target), "context": Path(out.context)}
    indexes = {"target": out.target_index, "context": out.context_index}
    work_dir.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(prefix=".codes.", dir=work_dir))
    try:
        for kind in finals:
            with ArrayTarWriter(str(tmp_dir / f"{kind}.tar"), shard_size=None, compression="numpy") as writer:
                for i, cid in enumerate(ids):
                    array = codes[(i, kind)].astype(dtype)
                    manifest = TemporalArray(
                        array=Array(
                            storage_type="shar", storage_path="", storage_key="", shape=list(array.shape)
                        ),
                        temporal_dim=-1,
                        frame_shift=spf / sr,
                        start=0,
                    )
                    writer.write(cid, array, manifest)
            if not (tmp_dir / f"{kind}.tar").exists():
                tarfile.open(tmp_dir / f"{kind}.tar", "w").close()
            if indexes[kind] is not None:
                write_index(str(tmp_dir / f"{kind}.tar"))
        for kind, final in finals.items():
            final.parent.mkdir(parents=True, exist_ok=True)
            if indexes[kind] is not None:
                os.replace(tmp_dir / f"{kind}.tar.idx", indexes[kind])
            os.replace(tmp_dir / f"{kind}.tar", final)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
