"""Shar-stage throughput next to the physical floor measured in the same run.

Corpus: the demo corpus copied 18 times (1,008 utterances, ~67 min of target audio, each with its
context), records taken from a real context-stage run on the demo and repeated per copy.
- floor: in one process, decode the same target and context spans with soundfile and FLAC-encode
  them with soundfile into memory; nothing else.
- stage: plan + every shard job (write_shard), 1 and 2 workers.
- lhotse: CutSet.to_shar over the same cuts, target audio only (flac), for comparison; its floor
  is the target half of ours.
Figures are audio-seconds (target + context) per wall-clock second, and per core.

Usage: python benchmarks/bench_shar.py [--copies 18] [--shard-size 256]
"""

import argparse
import io
import tempfile
import time
from pathlib import Path

import soundfile as sf
from _corpus import repeated_with_context

from sharflow.shar_audio import EncodeSettings, compute_num_samples

# sharflow.shar and sharflow.context (lhotse, torch) are imported inside the functions: spawned
# workers re-run this file's top level, and a real shard job's adapter keeps them light the same way.


def floor(records: list[dict], root: Path, context: bool = True) -> float:
    t = time.perf_counter()
    spans = [("audio_filepath", "offset", "duration")]
    if context:
        spans.append(("context_audio_filepath", "context_audio_offset", "context_audio_duration"))
    for r in records:
        for keys in spans:
            path, offset, duration = (r[k] for k in keys)
            with sf.SoundFile(root / path) as f:
                f.seek(compute_num_samples(offset, f.samplerate))
                data = f.read(compute_num_samples(duration, f.samplerate), dtype="int16")
                sf.write(io.BytesIO(), data, f.samplerate, format="FLAC")
    return time.perf_counter() - t


def stage(tmp: Path, with_context: Path, root: Path, shard_size: int, workers: int) -> float:
    from sharflow.layout import DatasetFiles
    from sharflow.shar import write_shard
    from sharflow.shar_plan import plan_shards

    files = DatasetFiles(str(tmp / f"shar{workers}"))
    t = time.perf_counter()
    plan = plan_shards(
        str(with_context), plan=files.shard_plan, index=files.shar_index, shard_size=shard_size, seed=0
    )
    for s in range(plan["num_shards"]):
        write_shard(
            s,
            with_context=str(with_context),
            index=files.shar_index,
            plan=files.shard_plan,
            out=files.shard(s),
            settings=EncodeSettings(audio_root=str(root)),
            workers=workers,
        )
    return time.perf_counter() - t


def lhotse_to_shar(tmp: Path, records: list[dict], root: Path, shard_size: int) -> float:
    from lhotse import CutSet, MonoCut, Recording

    cuts = []
    for i, r in enumerate(records):
        rec = Recording.from_file(root / r["audio_filepath"], recording_id=f"r{i}")
        cuts.append(MonoCut(id=f"c{i}", start=r["offset"], duration=r["duration"], channel=0, recording=rec))
    (tmp / "lhotse").mkdir()
    t = time.perf_counter()
    CutSet(cuts).to_shar(tmp / "lhotse", fields={"recording": "flac"}, shard_size=shard_size)
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=18)
    parser.add_argument("--shard-size", type=int, default=256)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        with_context, root, records = repeated_with_context(tmp, args.copies)
        target = sum(r["duration"] for r in records)
        audio = target + sum(r["context_audio_duration"] for r in records)
        floor(records[:50], root)  # warm the page cache
        t_floor = floor(records, root)
        t_floor_target = floor(records, root, context=False)
        t1 = stage(tmp, with_context, root, args.shard_size, 1)
        t2 = stage(tmp, with_context, root, args.shard_size, 2)
        same = all(
            (tmp / "shar1" / p.relative_to(tmp / "shar2")).read_bytes() == p.read_bytes()
            for p in (tmp / "shar2" / "shar").rglob("*.*")
        )
        t_lhotse = lhotse_to_shar(tmp, records, root, args.shard_size)
    print(
        f"shar benchmark: {len(records)} utterances, {target:.0f} s target + {audio - target:.0f} s "
        "context audio"
    )
    print(f"{'run':<46}{'seconds':>9}{'audio s/s':>11}{'per core':>10}")
    for name, t, secs, cores in [
        ("floor: decode spans + FLAC encode, 1 process", t_floor, audio, 1),
        ("shar stage, 1 worker", t1, audio, 1),
        ("shar stage, 2 workers", t2, audio, 2),
        ("floor, target audio only", t_floor_target, target, 1),
        ("lhotse CutSet.to_shar, target audio only", t_lhotse, target, 1),
    ]:
        print(f"{name:<46}{t:>9.2f}{secs / t:>11.0f}{secs / t / cores:>10.0f}")
    print(f"stage 1 worker / floor:        {t_floor / t1:.2f}   (target >= 0.85)")
    print(f"stage 2 workers vs 1 worker:   {t1 / t2:.2f}x  (target >= 1.8)")
    print(f"lhotse to_shar / its floor:    {t_floor_target / t_lhotse:.2f}")
    print(f"1 and 2 workers wrote identical files: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
