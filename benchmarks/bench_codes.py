"""Codes-stage throughput next to the model-only floor, and padding efficiency of the batching.

Corpus: the demo corpus (through the real prepare/context/shar stages) repeated twice into one
shard: 112 cuts, 224 utterances of mixed length (target + context); codec: the tiny random NeMo
codec from config/models/tiny_codec.yaml, on `--device` (cpu: one torch thread, as a CPU rank runs;
cuda: one GPU rank, fp32).
The machine is shared and noisy, so floor and stage are run alternately `--repeats` times and the
best time of each is reported.
- floor: the same batches, already decoded, resampled and on the device, through the model's
  forward (encoder + quantizer) only.
- mixed floor: the same, with length-sorted batches that mix frame counts (what the stage did
  before it batched one frame count at a time): what exact codes cost in model time.
- stage: encode_shards over every shard, one job (tar reading, decoding, resampling, batching, writing).
- padding: real / padded samples of our length-sorted batches vs batches in shard order with the
  same budget.

Usage: python benchmarks/bench_codes.py [--copies 2] [--batch-seconds 60] [--repeats 2] [--device cpu|cuda]
"""

import argparse
import contextlib
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
from _corpus import repeated_with_context

REPO = Path(__file__).resolve().parents[1]


def build_shards(tmp: Path, copies: int) -> list[int]:
    """Shar shards of the demo corpus repeated `copies` times, all in one shard of <= 4096 cuts."""
    from sharflow.core.layout import DatasetFiles
    from sharflow.shar.audio import EncodeSettings
    from sharflow.shar.plan import plan_shards
    from sharflow.shar.shard import write_planned

    wc, root, _ = repeated_with_context(tmp, copies)
    files = DatasetFiles(str(tmp))
    plan = plan_shards(str(wc), plan=files.shard_plan, inputs_dir=files.shar_inputs, shard_size=4096, seed=0)
    write_planned(files, EncodeSettings(audio_root=str(root)))
    return list(range(plan["num_shards"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=2)
    parser.add_argument("--batch-seconds", type=float, default=60.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda to measure a GPU rank")
    args = parser.parse_args()

    import torch

    from sharflow.codes.batches import padding_efficiency, plan_batches, whole_frames
    from sharflow.codes.shard import KINDS, ShardCodes, _decode, encode_shards, shard_items
    from sharflow.codes.spec import CodecSpec, cached_codec
    from sharflow.core.layout import DatasetFiles
    from sharflow.models.codecs.nemo import build_random_codec

    if args.device == "cpu":
        torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        shards = build_shards(tmp, args.copies)
        files = DatasetFiles(str(tmp))
        model_path = build_random_codec(REPO / "config" / "models" / "tiny_codec.yaml", tmp / "codec.nemo")
        spec = CodecSpec("tiny", "nemo", str(model_path))
        # the rank's device, as the stage's rank 0 names it: the model loaded here is the one it reuses
        rank_device = "cuda:0" if args.device == "cuda" else args.device
        codec = cached_codec(spec, rank_device)
        sr, spf = codec.sample_rate, codec.samples_per_frame
        budget = int(args.batch_seconds * sr)

        # the floor: identical batches, audio already in memory, forward only
        prepared, mixed, sorted_eff, order_eff, n_items, audio_seconds = [], [], [], [], 0, 0.0
        for s in shards:
            tars = dict(zip(KINDS, (files.shard(s).target, files.shard(s).context), strict=True))
            _, items = shard_items(s, tars["target"], tars["context"], sr)
            batches = plan_batches(items, budget, spf)
            sorted_eff.append((padding_efficiency(batches, spf), sum(i.samples for i in items)))
            order_eff.append(
                padding_efficiency(plan_batches(items, budget, spf, same_frames=False, by_length=False), spf)
            )
            with contextlib.ExitStack() as stack:
                opened = {k: stack.enter_context(tarfile.open(p)) for k, p in tars.items()}
                for planned, into in (
                    (batches, prepared),
                    (plan_batches(items, budget, spf, same_frames=False), mixed),
                ):
                    for batch in planned:
                        x = torch.zeros(len(batch), whole_frames(max(i.samples for i in batch), spf))
                        for row, it in enumerate(batch):
                            w = _decode(opened[it.kind], it.member, sr)[: it.samples]
                            x[row, : len(w)] = torch.from_numpy(w)
                        into.append(
                            (x.to(rank_device), torch.tensor([i.samples for i in batch], device=rank_device))
                        )
            n_items += len(items)
            audio_seconds += sum(i.samples for i in items) / sr
        codec.encode(*prepared[0])  # warm-up
        floors, mixed_floors, stages = [], [], []
        for _ in range(args.repeats):
            floors.append(forward_seconds(codec, prepared, rank_device))
            mixed_floors.append(forward_seconds(codec, mixed, rank_device))
            t = time.perf_counter()
            out = DatasetFiles(str(tmp / "out"))
            jobs = [
                ShardCodes(s, files.shard(s).target, files.shard(s).context, out.codes(spec.name, s))
                for s in shards
            ]
            encode_shards(jobs, codec=spec, batch_seconds=args.batch_seconds, device=args.device, workers=1)
            stages.append(time.perf_counter() - t)
        floor, mixed_floor, stage = min(floors), min(mixed_floors), min(stages)

    weights = np.array([w for _, w in sorted_eff], dtype=float)
    ours = float(np.average([e for e, _ in sorted_eff], weights=weights))
    theirs = float(np.average(order_eff, weights=weights))
    print(
        f"codes benchmark: {len(shards)} shards, {n_items} utterances (target + context), "
        f"{audio_seconds:.0f} s "
        f"of audio at {sr} Hz; tiny random NeMo codec on {args.device}, batches of "
        f"{args.batch_seconds:.0f} s "
        f"({len(prepared)} of one frame count each, {len(mixed)} mixed)"
    )
    print(f"{'run':<52}{'seconds':>9}{'audio s/s':>11}")
    for label, seconds in (
        ("floor: same batches in memory, model forward only", floor),
        ("mixed floor: length-sorted mixed batches, forward", mixed_floor),
        ("codes stage (read, decode, resample, batch, write)", stage),
    ):
        print(f"{label:<52}{seconds:>9.2f}{audio_seconds / seconds:>11.1f}")
    print(
        f"stage / floor: {floor / stage:.3f}   (target >= 0.9; all runs: floor "
        f"{[round(f, 1) for f in floors]}, "
        f"stage {[round(t, 1) for t in stages]})"
    )
    print(
        f"padding efficiency: one frame count per batch {ours:.4f} vs mixed batches in shard order "
        f"{theirs:.4f}"
    )
    print(
        f"exact codes cost: floor / mixed floor = {mixed_floor / floor:.3f} of the mixed batches' throughput"
    )


def forward_seconds(codec, batches, device: str) -> float:
    """Wall time of the model forward over prepared batches (synchronised on a GPU)."""
    import torch

    t = time.perf_counter()
    for x, lengths in batches:
        codec.encode(x, lengths)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
