"""Prepare-stage throughput: records/s with 1 and 2 workers, next to a floor measured in this run.

The floor is the least work any validator must do: parse every JSON line and read each distinct
audio header once (soundfile.info), serially, nothing else. Two synthetic layouts of N records
with ~3 % bad lines: one short file per utterance (LibriTTS, HiFiTTS), and segments of a few
hundred long files (long-form corpora; headers repeat). Prints a table and the ratios; exits
non-zero if the outputs of 1 and 2 workers differ.

Usage: python benchmarks/bench_prepare.py [--records 24000] [--long-files 300]
"""

import argparse
import json
import random
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from sharflow.prepare.job import prepare_dataset


def make_corpus(tmp: Path, n_records: int, n_files: int) -> tuple[Path, Path]:
    """n_files == n_records: one whole file per record; fewer: random segments of long files."""
    rng = random.Random(0)
    root = tmp / "audio"
    root.mkdir()
    per_utterance = n_files == n_records
    lengths = []
    for i in range(n_files):
        rate = (16000, 22050, 24000)[i % 3]
        seconds = 0.25 if per_utterance else rng.uniform(4, 12)
        name = f"d{i // 1000:03d}/f{i:06d}.{'flac' if i % 2 else 'wav'}"
        (root / name).parent.mkdir(exist_ok=True)
        noise = np.random.default_rng(i).normal(0, 0.05, int(seconds * rate))
        sf.write(root / name, noise, rate, subtype="PCM_16")
        lengths.append((name, len(noise) / rate))
    manifest = tmp / "manifest.json"
    with open(manifest, "w") as f:
        for j in range(n_records):
            if per_utterance:
                (path, length), off = lengths[j], None
                dur = length
            else:
                path, length = lengths[rng.randrange(n_files)]
                dur = round(rng.uniform(0.5, min(3.0, length)), 3)
                off = round(rng.uniform(0, length - dur), 3)
            rec = {
                "audio_filepath": path,
                "duration": dur,
                "text": f"utterance number {j}",
                "speaker": f"spk{j % 97}",
            }
            if off is not None:
                rec["offset"] = off
            if j % 33 == 0:
                rec["duration"] = -1
            f.write(json.dumps(rec) + "\n")
    return manifest, root


def floor(manifest: Path, root: Path) -> float:
    t = time.perf_counter()
    seen = set()
    with open(manifest, "rb") as f:
        for line in f:
            path = json.loads(line)["audio_filepath"]
            if path not in seen:
                seen.add(path)
                sf.info(str(root / path))
    return time.perf_counter() - t


def stage(tmp: Path, manifest: Path, root: Path, workers: int) -> tuple[float, Path]:
    out = tmp / f"out{workers}"
    t = time.perf_counter()
    prepare_dataset(
        str(manifest),
        prepared=str(out / "prepared.jsonl"),
        rejected_dir=str(out / "rejected"),
        stats=str(out / "stats.json"),
        dataset="bench",
        audio_root=str(root),
        workers=workers,
    )
    return time.perf_counter() - t, out


def scenario(title: str, n_records: int, n_files: int) -> bool:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        manifest, root = make_corpus(tmp, n_records, n_files)
        floor(manifest, root)  # warm the page cache so every run reads the same way
        t_floor = floor(manifest, root)
        t1, out1 = stage(tmp, manifest, root, 1)
        t2, out2 = stage(tmp, manifest, root, 2)
        same = (out1 / "prepared.jsonl").read_bytes() == (out2 / "prepared.jsonl").read_bytes()
    print(f"\n{title}: {n_records} records over {n_files} audio files")
    print(f"{'run':<34}{'seconds':>9}{'records/s':>12}")
    for name, t in [
        ("floor (json + headers, serial)", t_floor),
        ("prepare, 1 worker", t1),
        ("prepare, 2 workers", t2),
    ]:
        print(f"{name:<34}{t:>9.2f}{n_records / t:>12.0f}")
    print(f"1 worker / floor speed:   {t_floor / t1:.2f}")
    print(f"2 workers / 1 worker:     {t1 / t2:.2f}x")
    print(f"2 workers / floor speed:  {t_floor / t2:.2f}")
    print(f"outputs of 1 and 2 workers identical: {same}")
    return same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=24000)
    parser.add_argument("--long-files", type=int, default=300)
    args = parser.parse_args()
    same = scenario("one file per utterance", args.records, args.records)
    same &= scenario("segments of long files", args.records, args.long_files)
    print(
        f"\npeak RSS of the main process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB"
    )
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
