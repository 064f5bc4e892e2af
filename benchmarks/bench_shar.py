"""Shar-stage throughput next to the physical floor measured in the same run, and end to end.

Corpora, from a real context-stage run on the demo, repeated per copy (each copy's audio in its
own folder):
- whole files: the records whose target and context spans are each a whole demo file (mono
  16-bit FLAC), the common TTS layout: copied through;
- mixed: every record resampled to 16 kHz, so nothing can be copied (the demo's segments of one
  long file, and every file decoded, resampled and encoded).
Floors, in one process: decode the spans with soundfile and FLAC-encode them into memory (mixed:
resample them with soxr in between); nothing else.
Stage: plan + every shard job (write_shard), in this process, 1 and 2 workers.
End to end: `snakemake results/<ds>/shar_stats.json` (shar_plan, shar_shard, shar_merge jobs) on
the whole demo x --e2e-copies after its prepare and context jobs ran, next to the same work in
one process, so the fixed cost of the jobs (Snakemake, process start-up) shows.
Figures are audio-seconds (target + context) per wall-clock second, and per core; each timing is
the best of --repeats runs (end to end: the shar stage's outputs removed before each run).

Usage: python benchmarks/bench_shar.py [--copies 18] [--shard-size 256] [--e2e-copies 73] [--repeats 3]
"""

import argparse
import io
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import soundfile as sf
import soxr
import yaml
from _corpus import repeated_demo, repeated_with_context, snakemake_command

from sharflow.core.layout import DatasetFiles, dataset_files
from sharflow.io.audio import compute_num_samples
from sharflow.shar.audio import EncodeSettings

# sharflow.shar.shard and sharflow.context.part (lhotse, torch) are imported inside the functions: spawned
# workers re-run this file's top level, and a real shard job's adapter keeps them light the same way.
REPO = Path(__file__).resolve().parents[1]
SPANS = (
    ("audio_filepath", "offset", "duration"),
    ("context_audio_filepath", "context_audio_offset", "context_audio_duration"),
)


def floor(records: list[dict], root: Path, resample_to: int | None = None) -> float:
    t = time.perf_counter()
    for r in records:
        for keys in SPANS:
            path, offset, duration = (r[k] for k in keys)
            with sf.SoundFile(root / path) as f:
                f.seek(compute_num_samples(offset, f.samplerate))
                rate = f.samplerate
                data = f.read(
                    compute_num_samples(duration, rate), dtype="int16" if not resample_to else "float32"
                )
            if resample_to:
                data, rate = soxr.resample(data, rate, resample_to, quality="HQ"), resample_to
            sf.write(io.BytesIO(), data, rate, format="FLAC", subtype="PCM_16")
    return time.perf_counter() - t


def whole_file(root: Path, path: str, offset: float, duration: float) -> bool:
    info = sf.info(root / path)
    return offset == 0 and compute_num_samples(duration, info.samplerate) == info.frames


def stage(
    out: Path,
    with_context: Path,
    root: Path,
    shard_size: int,
    workers: int,
    context_stats: Path | None = None,
    **settings,
) -> float:
    """Plan, every shard job and (given the context stage's stats) the merge, in this process."""
    from sharflow.shar.merge import merge_shar_stats
    from sharflow.shar.plan import plan_shards
    from sharflow.shar.shard import write_planned

    files = DatasetFiles(str(out))
    t = time.perf_counter()
    plan = plan_shards(
        str(with_context),
        plan=files.shard_plan,
        inputs_dir=files.shar_inputs,
        shard_size=shard_size,
        seed=0,
        shards_per_job=1,
    )
    write_planned(files, EncodeSettings(audio_root=str(root), **settings), workers)
    jobs = [files.shard(s) for s in range(plan["num_shards"])]
    if context_stats:
        merge_shar_stats(
            [j.stats for j in jobs],
            context_stats=str(context_stats),
            plan=files.shard_plan,
            stats=files.shar_stats,
            rejected_dir=files.shar_rejected,
            dataset="b",
        )
    return time.perf_counter() - t


def decoded_members(shar_dir: Path) -> list:
    """(member name, samples) of every audio member of the shards, in order."""
    out = []
    for tar_path in sorted(shar_dir.glob("*_audio/*.tar")):
        with tarfile.open(tar_path) as tar:
            for m in tar.getmembers():
                if not m.name.endswith(".json"):
                    out.append((m.name, sf.read(io.BytesIO(tar.extractfile(m).read()), dtype="int16")[0]))
    return out


def spans(out: Path) -> tuple[int, int]:
    """(spans copied through, spans encoded) over the shard jobs' stats."""
    files = DatasetFiles(str(out))
    shards = json.loads(Path(files.shard_plan).read_text())["num_shards"]
    stats = [json.loads(Path(files.shard(s).stats).read_text()) for s in range(shards)]
    return sum(x["copied_spans"] for x in stats), sum(x["encoded_spans"] for x in stats)


def end_to_end(tmp: Path, copies: int, repeats: int) -> tuple[float, float, float, int, dict[str, float]]:
    """(snakemake shar stage seconds, the same work in one process, Snakemake's own start (a dry run
    of the finished target), utterances, start-up per rule)."""
    manifest, root = repeated_demo(tmp / "e2e", copies, link=True)
    work = tmp / "e2e" / "work"
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["datasets"] = {"bench": {"manifest": str(manifest), "audio_root": str(root), "language": "en"}}
    config["codecs"] = {}
    config["quality"]["enabled"] = False  # not timed; measured by bench_quality.py
    config["shar"]["shard_size"] = 4096  # the schema's default: real data
    config["context"]["parts"] = 1
    work.mkdir(parents=True)
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    ds = dataset_files("bench")

    def snakemake(*args: str) -> float:
        cmd = snakemake_command(work, *args)
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        return time.perf_counter() - t

    snakemake(ds.context_stats)  # prepare + context, not timed
    shar_outputs = [ds.shard_plan, ds.shar_inputs, ds.shar_stats, ds.shar_rejected]
    shar_outputs += [str(Path(ds.shard(0).cuts).parents[1]), str(Path(ds.shard(0).stats).parent)]
    shar_outputs += [f"logs/{rule}" for rule in ("shar_plan", "shar_shard", "shar_merge")]

    def shar_stage() -> float:  # from the context stage's outputs, as in the first run
        for path in shar_outputs:
            if (work / path).is_dir():
                shutil.rmtree(work / path)
            (work / path).unlink(missing_ok=True)
        return snakemake(ds.shar_stats)

    seconds = min(shar_stage() for _ in range(repeats))
    own = snakemake(ds.shar_stats, "--dry-run")  # nothing to do: start-up, workflow parse, DAG
    n = json.loads((work / ds.shar_stats).read_text())["cuts"]
    alone = min(
        stage(
            tmp / "e2e" / f"alone-{i}",
            work / ds.with_context,
            root,
            4096,
            2,
            context_stats=work / ds.context_stats,
        )
        for i in range(repeats)
    )
    startup = {}
    for rule in ("shar_plan", "shar_shard", "shar_merge"):
        for log in sorted((work / "logs" / rule).rglob("*.log")):
            found = re.search(r"job started ([\d.]+) s after its process", log.read_text())
            startup[rule] = max(startup.get(rule, 0.0), float(found.group(1)))
    return seconds, alone, own, n, startup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=18)
    parser.add_argument("--shard-size", type=int, default=256)
    parser.add_argument("--e2e-copies", type=int, default=73)
    parser.add_argument("--repeats", type=int, default=3, help="each timing is the best of this many runs")
    args = parser.parse_args()

    def best(run) -> float:  # run(i) -> seconds; i names the repeat's output folder
        return min(run(i) for i in range(args.repeats))

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        with_context, root, records = repeated_with_context(tmp, args.copies)
        whole = [r for r in records if all(whole_file(root, *(r[k] for k in keys)) for keys in SPANS)]
        whole_path = tmp / "whole.jsonl"
        whole_path.write_text("".join(json.dumps(r) + "\n" for r in whole))
        audio = {
            name: sum(r[k[2]] for r in recs for k in SPANS)
            for name, recs in (("whole", whole), ("all", records))
        }
        floor(records[:50], root)  # warm the page cache
        rows = []
        t_floor_whole = best(lambda i: floor(whole, root))
        rows.append(("whole files: floor, decode + FLAC encode", t_floor_whole, audio["whole"], 1))
        t_copy = {
            w: best(lambda i, w=w: stage(tmp / f"copy{w}-{i}", whole_path, root, args.shard_size, w))
            for w in (1, 2)
        }
        t_nocopy = best(
            lambda i: stage(tmp / f"nocopy-{i}", whole_path, root, args.shard_size, 1, copy_through=False)
        )
        rows += [
            (f"whole files: stage, copy-through, {w} worker(s)", t_copy[w], audio["whole"], w) for w in (1, 2)
        ]
        rows.append(("whole files: stage, copy_through: false", t_nocopy, audio["whole"], 1))
        copied, encoded = spans(tmp / "copy1-0")
        same_samples = [(n, a.tolist()) for n, a in decoded_members(tmp / "copy1-0" / "shar")] == [
            (n, a.tolist()) for n, a in decoded_members(tmp / "nocopy-0" / "shar")
        ]
        same_bytes = all(
            (tmp / "copy1-0" / p.relative_to(tmp / "copy2-0")).read_bytes() == p.read_bytes()
            for p in (tmp / "copy2-0" / "shar").rglob("*.*")
        )
        t_floor_mixed = best(lambda i: floor(records, root, resample_to=16000))
        t_mixed = best(
            lambda i: stage(tmp / f"mixed-{i}", with_context, root, args.shard_size, 1, sample_rate=16000)
        )
        rows.append(("mixed (all resampled): floor", t_floor_mixed, audio["all"], 1))
        rows.append(("mixed (all resampled): stage, 1 worker", t_mixed, audio["all"], 1))
        e2e, alone, own, e2e_cuts, startup = end_to_end(tmp, args.e2e_copies, args.repeats)

    print(f"shar benchmark: {len(records)} utterances, {len(whole)} of them whole files (target and context)")
    print(f"{'run':<52}{'seconds':>9}{'audio s/s':>11}{'per core':>10}")
    for name, t, secs, cores in rows:
        print(f"{name:<52}{t:>9.2f}{secs / t:>11.0f}{secs / t / cores:>10.0f}")
    print(
        f"whole files, copy-through stage (1 worker) / floor: {t_floor_whole / t_copy[1]:.2f}x  (target >= 5)"
    )
    print(
        f"  spans copied {copied}, encoded {encoded}; decoded samples equal the encode path's: {same_samples}"
    )
    print(f"  1 and 2 workers wrote identical files: {same_bytes}")
    print(f"mixed stage / its floor: {t_floor_mixed / t_mixed:.2f}  (target >= 0.85)")
    print(
        f"end to end, demo x{args.e2e_copies} ({e2e_cuts} cuts, one shard of 4096 + the rest): snakemake "
        f"{e2e:.2f} s vs the same work in one process {alone:.2f} s = {e2e / alone:.2f}x  (target <= 1.3)"
    )
    print(
        f"  fixed cost {e2e - alone:.2f} s, of which Snakemake's own start + DAG (a dry run of the finished "
        f"target) {own:.2f} s"
    )
    print(
        "  job start-up (process start to job code, from the job logs): "
        + ", ".join(f"{rule} {s:.2f} s" for rule, s in startup.items())
    )
    if not (same_samples and same_bytes):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
