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

import io
import json
import logging
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

from sharflow.codes.batches import Item, padding_efficiency, plan_batches, samples_at, whole_frames
from sharflow.codes.spec import CodecSpec, cached_codec
from sharflow.core.atomic import write_json
from sharflow.core.errors import SharflowError
from sharflow.core.layout import CodesFiles
from sharflow.core.parallel import ahead
from sharflow.core.ranks import Rank, rank_job

log = logging.getLogger(__name__)
KINDS = ("target", "context")


def audio_members(tar_path: str) -> list[tuple[str, str, dict]]:
    """(cut id, audio member name, Recording manifest) of an audio tar, in order."""
    out = []
    with tarfile.open(tar_path, "r:") as tar:
        members = tar.getmembers()
        for data, meta in zip(members[0::2], members[1::2], strict=True):
            manifest = json.loads(tar.extractfile(meta).read())
            out.append((meta.name.rsplit(".", 1)[0], data.name, manifest))
    return out


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
    with rank_job(f"codes {codec.name}, shard {shard}", device=device, workers=workers, gpus=gpus) as job:
        model = cached_codec(codec, job.devices[0])  # rank 0 runs in this process and reuses it
        _log_codec(codec, model)
        sr, spf = model.sample_rate, model.samples_per_frame
        ids, items = shard_items(shard, target_tar, context_tar, sr)
        batches = plan_batches(items, int(batch_seconds * sr), spf)
        costs = {b: sum(i.samples for i in batch) for b, batch in enumerate(batches)}
        args = (target_tar, context_tar, codec, ids, shard)
        ranks = job.run(encode_batches, costs, unit=batches.__getitem__, args=args)
    codes = {key: array for r in ranks for key, array in r.value[0].items()}
    info = ranks[0].value[1]
    dtype = np.int16 if info["codebook_size"] <= np.iinfo(np.int16).max + 1 else np.int32
    _write_codes(codes, ids, sr, spf, dtype, out.target, out.context, Path(out.stats).parent)
    stats = {
        "codec": codec.name,
        "shard": shard,
        "cuts": len(ids),
        "items": len(items),
        "batches": len(batches),
        "padding_efficiency": round(padding_efficiency(batches, spf), 4),
        "audio_seconds": round(sum(i.samples for i in items) / sr, 3),
        "sample_rate": sr,
        "samples_per_frame": spf,
        "num_codebooks": info["num_codebooks"],
        "codebook_size": info["codebook_size"],
        "dtype": np.dtype(dtype).name,
        "devices": job.devices,
        "rank_seconds": [r.value[1]["seconds"] for r in ranks],
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
        stats["padding_efficiency"],
        stats["seconds"],
    )
    return stats


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
    rank: Rank,
    batches: list[list[Item]],
    target_tar: str,
    context_tar: str,
    codec: CodecSpec,
    ids: list[str],
    shard: int,
) -> tuple[dict, dict]:
    """One rank: decode (one batch ahead) and encode its batches; returns ({(cut, kind): codes}, info)."""
    from tqdm import tqdm

    start = time.perf_counter()
    model = cached_codec(codec, rank.device)
    out: dict[tuple[int, str], np.ndarray] = {}
    total = sum(len(b) for b in batches)
    desc = f"codes rank {rank.index} ({rank.device})"
    with (
        _ShardAudio(target_tar, context_tar, model, shard, ids) as audio,
        tqdm(total=total, desc=desc, unit="utt", mininterval=5) as progress,
    ):
        for batch, x in ahead(audio.padded, batches):
            out.update(_encode(model, codec.name, batch, x, rank.device, f"shard {shard}", ids))
            progress.update(len(batch))
    info = {
        "num_codebooks": model.num_codebooks,
        "codebook_size": model.codebook_size,
        "seconds": round(time.perf_counter() - start, 3),
    }
    return out, info


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
