"""The codes stage: codec codes for the target and context audio of every cut of a shard.

Per (dataset, codec, shard) job:
- read the shard's two audio tars' manifests (lengths only) and plan batches: every utterance
  (target and context alike) sorted by length, cut into batches of at most `batch_seconds` of audio
  whose items have the same number of code frames, padded once to that many frames. So an
  utterance's codes are exactly those it gets when encoded alone, whatever else is in the shard,
  and do not depend on how many ranks share the work.
- bin-pack batches onto ranks (one per visible GPU, else CPU processes with one torch thread);
  each rank decodes the next batch while the model encodes the current one, resampling once to
  the codec's rate, and trims each item's codes to ceil(samples / samples_per_frame) frames.
- write target_codes and context_codes tars in cut order with lhotse's ArrayTarWriter under
  temporary names, renamed into place when both are complete. Codes are int16 when every code
  fits, else int32; frame_shift = samples_per_frame / sample_rate exactly.
A cut whose audio fails to decode fails the job, naming shard and cut id: silently dropping it
would misalign the codes with the cuts.
"""

import functools
import io
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

from sharflow.core.atomic import read_json, write_json
from sharflow.core.balance import lpt_assign
from sharflow.core.errors import SharflowError
from sharflow.core.layout import CodesFiles
from sharflow.core.parallel import ahead
from sharflow.core.ranks import job_devices, run_ranks
from sharflow.shar.audio import compute_num_samples

log = logging.getLogger(__name__)
KINDS = ("target", "context")


@dataclass(frozen=True)
class CodecSpec:
    """One entry of `codecs:` in config, resolved to a loadable model."""

    name: str
    backend: str
    model: str
    precision: str = "fp32"


def write_codec_spec(spec: dict, out: str) -> CodecSpec:
    """results/models/<codec>.json: the resolved codec every codes job of that codec reads.

    One small file per codec instead of per-job parameters: a codec's shard jobs rerun when it
    changes (by its time stamp), the other codecs' jobs do not.
    """
    codec = CodecSpec(**spec)
    write_json(out, asdict(codec))
    log.info("codec %s: %s model %s (%s)", codec.name, codec.backend, codec.model, codec.precision)
    return codec


def read_codec_spec(path: str) -> CodecSpec:
    return CodecSpec(**read_json(path))


@dataclass(frozen=True)
class Item:
    cut: int  # position of the cut in the shard
    kind: str  # "target" or "context"
    member: str  # audio member name in its tar
    samples: int  # at the codec's rate


def audio_members(tar_path: str) -> list[tuple[str, str, dict]]:
    """(cut id, audio member name, Recording manifest) of an audio tar, in order."""
    out = []
    with tarfile.open(tar_path, "r:") as tar:
        members = tar.getmembers()
        for data, meta in zip(members[0::2], members[1::2], strict=True):
            manifest = json.loads(tar.extractfile(meta).read())
            out.append((meta.name.rsplit(".", 1)[0], data.name, manifest))
    return out


def whole_frames(samples: int, samples_per_frame: int) -> int:
    """Samples of `samples` padded up to whole code frames: ceil(samples / spf) * spf."""
    return -(-samples // samples_per_frame) * samples_per_frame


def plan_batches(
    items: list[Item],
    budget_samples: int,
    samples_per_frame: int,
    *,
    same_frames: bool = True,
    by_length: bool = True,
) -> list[list[Item]]:
    """Batches whose padded size (batch size × longest item in whole frames) fits the budget.

    same_frames: a batch holds items of one frame count only, so no item is padded past its own
    last frame and the codec sees exactly what it sees when the item is encoded alone. Codecs with
    convolutions see a batch's padding (zeros where the item alone would be edge-padded): with the
    demo codec, the last ~0.5 s of codes of every shorter item in a mixed batch change. Items are
    taken sorted by length (by_length) so batches are full; same_frames=False or by_length=False
    (shard order) make mixed batches, only to measure what they would cost or save.
    """
    batches: list[list[Item]] = []
    current: list[Item] = []
    longest = 0
    ordered = sorted(items, key=lambda i: (i.samples, i.cut, i.kind)) if by_length else items
    for item in ordered:
        width = whole_frames(item.samples, samples_per_frame)
        other_width = same_frames and width != longest
        if current and (other_width or max(longest, width) * (len(current) + 1) > budget_samples):
            batches.append(current)
            current, longest = [], 0
        current.append(item)
        longest = max(longest, width)
    if current:
        batches.append(current)
    return batches


def padding_efficiency(batches: list[list[Item]], samples_per_frame: int) -> float:
    """Real samples / padded samples over all batches."""
    real = sum(i.samples for b in batches for i in b)
    padded = sum(len(b) * whole_frames(max(i.samples for i in b), samples_per_frame) for b in batches)
    return real / padded if padded else 1.0


@functools.lru_cache(maxsize=4)
def cached_codec(codec: CodecSpec, device: str):
    """The codec model, loaded once per process and device."""
    from sharflow.models.codecs import load_codec

    return load_codec(codec.backend, codec.model, device, codec.precision)


def encode_shard(
    shard: int,
    *,
    target_tar: str,
    context_tar: str,
    out: CodesFiles,
    codec: CodecSpec,
    batch_seconds: float = 60.0,
    device: str = "auto",
    workers: int = 1,
    gpus: int = 0,
) -> dict:
    """Encode one shard's target and context audio with `codec`; write both code tars atomically."""
    start = time.perf_counter()
    devices = job_devices(device, workers, gpus, f"codes {codec.name}, shard {shard}")
    model = cached_codec(codec, devices[0])  # rank 0 runs in this process and reuses it
    sr, spf = model.sample_rate, model.samples_per_frame
    log.info(
        "codec %s: %s, %d Hz, %d samples per frame, %d codebooks of %d",
        codec.name,
        model.description,
        sr,
        spf,
        model.num_codebooks,
        model.codebook_size,
    )

    listings = {
        kind: audio_members(path) for kind, path in zip(KINDS, (target_tar, context_tar), strict=True)
    }
    ids = [cid for cid, _, _ in listings["target"]]
    if [cid for cid, _, _ in listings["context"]] != ids:
        raise SharflowError(
            f"shard {shard}: {target_tar} and {context_tar} hold different cut ids; rebuild the shard"
        )
    items = [
        Item(i, kind, member, _samples_at(manifest, sr))
        for kind in KINDS
        for i, (_, member, manifest) in enumerate(listings[kind])
    ]
    batches = plan_batches(items, int(batch_seconds * sr), spf)
    efficiency = padding_efficiency(batches, spf)
    rank_batches = lpt_assign(
        {b: sum(i.samples for i in batch) for b, batch in enumerate(batches)}, len(devices)
    )
    args = [([batches[b] for b in bs], target_tar, context_tar, codec, ids, shard) for bs in rank_batches]
    results = run_ranks(encode_batches, devices, args)
    codes: dict[tuple[int, str], np.ndarray] = {}
    for rank_codes, _ in results:
        codes.update(rank_codes)
    num_codebooks, codebook_size = results[0][1]["num_codebooks"], results[0][1]["codebook_size"]
    dtype = np.int16 if codebook_size <= np.iinfo(np.int16).max + 1 else np.int32
    _write_codes(codes, ids, sr, spf, dtype, out.target, out.context, Path(out.stats).parent)
    stats = {
        "codec": codec.name,
        "shard": shard,
        "cuts": len(ids),
        "items": len(items),
        "batches": len(batches),
        "padding_efficiency": round(efficiency, 4),
        "audio_seconds": round(sum(i.samples for i in items) / sr, 3),
        "sample_rate": sr,
        "samples_per_frame": spf,
        "num_codebooks": num_codebooks,
        "codebook_size": codebook_size,
        "dtype": np.dtype(dtype).name,
        "devices": devices,
        "rank_seconds": [r[1]["seconds"] for r in results],
        "seconds": round(time.perf_counter() - start, 3),
    }
    write_json(out.stats, stats)
    log.info(
        "codes %s, shard %d: %d cuts, %.0f s of audio in %d batches (padding efficiency %.3f) in %.1f s",
        codec.name,
        shard,
        len(ids),
        stats["audio_seconds"],
        len(batches),
        efficiency,
        stats["seconds"],
    )
    return stats


def samples_at(num_samples: int, sampling_rate: int, rate: int) -> int:
    """The length of audio of `num_samples` at `sampling_rate` once resampled to `rate`."""
    if sampling_rate == rate:
        return int(num_samples)
    return compute_num_samples(num_samples / sampling_rate, rate)


def code_frames(num_samples: int, sampling_rate: int, codec_rate: int, samples_per_frame: int) -> int:
    """Code frames of an audio: ceil(its samples at the codec's rate / samples_per_frame)."""
    return -(-samples_at(num_samples, sampling_rate, codec_rate) // samples_per_frame)


def _samples_at(manifest: dict, rate: int) -> int:
    return samples_at(manifest["num_samples"], manifest["sampling_rate"], rate)


def encode_batches(
    rank: int,
    device: str,
    batches: list[list[Item]],
    target_tar: str,
    context_tar: str,
    codec: CodecSpec,
    ids: list[str],
    shard: int,
) -> tuple[dict, dict]:
    """One rank: decode (one batch ahead) and encode its batches; returns ({(cut, kind): codes}, info)."""
    import torch
    from tqdm import tqdm

    from sharflow.models.codecs import frames

    start = time.perf_counter()
    model = cached_codec(codec, device)
    sr, spf = model.sample_rate, model.samples_per_frame
    out: dict[tuple[int, str], np.ndarray] = {}
    with (
        tarfile.open(target_tar, "r:") as t_tar,
        tarfile.open(context_tar, "r:") as c_tar,
        tqdm(
            total=sum(len(b) for b in batches),
            desc=f"codes rank {rank} ({device})",
            unit="utt",
            mininterval=5,
        ) as progress,
    ):
        tars = {"target": t_tar, "context": c_tar}

        def load(batch: list[Item]) -> torch.Tensor:
            longest = whole_frames(max(i.samples for i in batch), spf)
            x = torch.zeros(len(batch), longest)  # one allocation, padded once
            for row, item in enumerate(batch):
                try:
                    wave = _decode(tars[item.kind], item.member, sr)
                except Exception as e:
                    raise SharflowError(
                        f"shard {shard}, cut {ids[item.cut]}: {item.kind} audio does not decode ({e})"
                    ) from None
                n = min(len(wave), item.samples)
                x[row, :n] = torch.from_numpy(wave[:n])
            return x

        for batch, x in ahead(load, batches):
            lengths = torch.tensor([i.samples for i in batch])
            codes, code_lengths = model.encode(x.to(device), lengths.to(device))
            codes, code_lengths = codes.cpu().numpy(), code_lengths.cpu().numpy()
            for row, item in enumerate(batch):
                expected = frames(item.samples, spf)
                if int(code_lengths[row]) != expected:
                    raise SharflowError(
                        f"codec {codec.name} gave {int(code_lengths[row])} frames for {expected} expected "
                        f"(shard {shard}, cut {ids[item.cut]})"
                    )
                out[(item.cut, item.kind)] = codes[row, :, :expected]
            progress.update(len(batch))
    info = {
        "num_codebooks": model.num_codebooks,
        "codebook_size": model.codebook_size,
        "seconds": round(time.perf_counter() - start, 3),
    }
    return out, info


def _decode(tar: tarfile.TarFile, member: str, rate: int) -> np.ndarray:
    import soundfile as sf
    import soxr

    wave, source_rate = sf.read(io.BytesIO(tar.extractfile(member).read()), dtype="float32", always_2d=True)
    wave = wave[:, 0]
    if source_rate != rate:
        wave = soxr.resample(wave, source_rate, rate, quality="HQ").astype(np.float32, copy=False)
    return wave


def _write_codes(codes, ids, sr, spf, dtype, out_target, out_context, work_dir: Path) -> None:
    """Both code tars under temporary names in `work_dir` (outside the Shar tree), then renamed."""
    from lhotse.array import Array, TemporalArray
    from lhotse.shar.writers import ArrayTarWriter

    finals = {"target": Path(out_target), "context": Path(out_context)}
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
        for kind, final in finals.items():
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp_dir / f"{kind}.tar", final)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


def merge_codes_stats(shard_stats: list[str], out: str) -> dict:
    """Totals of one codec's shard jobs for a dataset: cuts, audio, padding efficiency, time."""
    shards = []
    for path in shard_stats:
        shards.append(read_json(path))
    audio = sum(s["audio_seconds"] for s in shards)
    padded = sum(s["audio_seconds"] / s["padding_efficiency"] for s in shards if s["padding_efficiency"])
    first = shards[0] if shards else {}
    summary = {
        "codec": first.get("codec"),
        "shards": len(shards),
        "cuts": sum(s["cuts"] for s in shards),
        "audio_hours": round(audio / 3600, 6),
        "padding_efficiency": round(audio / padded, 4) if padded else 1.0,
        **{
            k: first.get(k)
            for k in ("sample_rate", "samples_per_frame", "num_codebooks", "codebook_size", "dtype")
        },
        "seconds": round(sum(s["seconds"] for s in shards), 3),
    }
    write_json(out, summary)
    log.info(
        "codes %s: %d cuts in %d shards, %.3f h of audio, padding efficiency %.3f",
        summary["codec"],
        summary["cuts"],
        summary["shards"],
        summary["audio_hours"],
        summary["padding_efficiency"],
    )
    return summary
