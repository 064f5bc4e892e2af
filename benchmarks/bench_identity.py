"""The identity stage: fingerprint cost per 100,000 utterances, and the identity job's cost and memory
as the held-out set grows.

A corpus of `--records` distinct utterances is made from the demo's speech: each clip joins six
0.6 s pieces of random demo clips, each piece resampled by its own random factor in [0.7, 1.4]
(its pitch and pace moved, so its landmarks are its own: speech spectra like the demo's, content
no other clip has), `--speakers` speakers. Then, each in a fresh process (CPU seconds and peak
RSS of its own):

1. the floor: decoding every record's span as the stage does (sharflow.core.audio.load_span);
2. the identity part over every record (one worker): decoding, fingerprinting, writing;
3. the identity job over every record, with splits holding out 10 % + 10 % of the speakers and
   5 % + 5 % of the utterances, at a quarter, half and all of the corpus: its CPU seconds, the
   held-out index's size and the peak RSS, so that memory is seen to grow with held-out items;
4. the identity job's query as the held-out set grows past the corpus: the first half's
   fingerprints indexed 1, 4 and 16 times over (as more held-out records with the same spread of
   hashes), the second half's records looked up: CPU per query and the index's size.

Per 100,000 utterances: the part's CPU minutes (linear in records), and the identity job's
extrapolated from a fit of its cost per query against the held-out count (each query looks up its
hashes in the index: its cost grows with the index's posting lists), at the held-out share of
step 3.

    .venv/bin/python benchmarks/bench_identity.py [--records 2000] [--work DIR]
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

REPO = Path(__file__).resolve().parents[1]
SPLITS = {
    "seed": 0,
    "dev_unseen": {"fraction": 0.1},
    "test_unseen": {"fraction": 0.1},
    "dev_seen": {"fraction": 0.05},
    "test_seen": {"fraction": 0.05},
}

FLOOR = """
import json, resource, sys, time
args = json.loads(sys.argv[1])
from sharflow.core.audio import load_span
t0 = time.process_time()
n = 0
for line in open(args["records"]):
    r = json.loads(line)
    x, rate = load_span(args["root"] + "/" + r["audio_filepath"], r["offset"], r["duration"])
    n += len(x)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"cpu": time.process_time() - t0, "rss_mb": rss}))
"""

PART = """
import json, resource, sys, time
args = json.loads(sys.argv[1])
from sharflow.identity.part import run_identity_part
t0 = time.process_time()
out = args["out"]
stats = run_identity_part(0, records=args["records"], parts=1, audio_root=args["root"],
                          out_records=out + ".jsonl", out_hashes=out + ".npy", out_stats=out + ".stats.json")
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
cpu = time.process_time() - t0
print(json.dumps({"cpu": cpu, "hashes": stats["hashes"], "seconds": stats["audio_seconds"], "rss_mb": rss}))
"""

JOB = """
import json, resource, sys, time
args = json.loads(sys.argv[1])
from sharflow.identity.links import DatasetIdentity, MatchRules, link_identities
t0 = time.process_time()
ds = DatasetIdentity([[args["index"], args["hashes"]]], args["splits"])
stats = link_identities({"bench": ds}, rules=MatchRules(), out_links=args["out"] + ".links.jsonl",
                        out_stats=args["out"] + ".stats.json")
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"cpu": time.process_time() - t0, "held_out": stats["held_out"],
                  "train": stats["train_checked"]["bench"], "links": stats["links"],
                  "index_mb": stats["index_mb"], "rss_mb": rss}))
"""

SCALE = """
import json, resource, sys, time
import numpy as np
args = json.loads(sys.argv[1])
from sharflow.identity.links import HeldOut, MatchRules
entries = [json.loads(x) for x in open(args["index"])]
hashes = np.load(args["hashes"], mmap_mode="r")
def fp(e):
    return np.asarray(hashes[e["start"] : e["start"] + e["hashes"]])
half = len(entries) // 2
held = HeldOut()
for copy in range(args["copies"]):
    for i, e in enumerate(entries[:half]):
        held.add("bench", {**e, "span": f"{copy}:{i}", "utterance": None}, "dev_seen", fp(e))
held.freeze()
queries = [fp(e) for e in entries[half:]]
t0 = time.process_time()
links = sum(held.best(q, MatchRules()) is not None for q in queries)
cpu = time.process_time() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"held": len(held.items), "per_query_ms": cpu / len(queries) * 1000, "links": links,
                  "index_mb": held.nbytes / 1e6, "rss_mb": rss}))
"""


def run(code: str, args: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(args)], capture_output=True, text=True, cwd=REPO, check=False
    )
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def make_corpus(work: Path, n: int, speakers: int) -> Path:
    """n clips of six random, resampled 0.6 s demo pieces each, and their records (as the text stage
    writes them)."""
    rng = np.random.default_rng(0)
    manifest = [json.loads(x) for x in (REPO / "demo" / "manifest.json").read_text().splitlines()]
    clips = []
    for r in manifest:
        x, rate = sf.read(REPO / "demo" / "audio" / r["audio_filepath"], dtype="float32")
        clips.append(x)
    piece = int(0.6 * rate)
    root = work / "audio"
    root.mkdir(parents=True, exist_ok=True)
    with open(work / "records.jsonl", "w") as out:
        for i in range(n):
            parts = []
            for _ in range(6):
                x = clips[rng.integers(len(clips))]
                start = rng.integers(0, len(x) - piece)
                factor = rng.uniform(0.7, 1.4)  # read at another pitch and pace: new content
                parts.append(
                    soxr.resample(x[start : start + piece], rate, int(rate * factor)).astype(np.float32)
                )
            audio = np.concatenate(parts)
            rel = f"c{i // 1000:03d}/{i:06d}.flac"
            (root / rel).parent.mkdir(exist_ok=True)
            sf.write(root / rel, audio, rate, subtype="PCM_16")
            speaker = f"s{i % speakers:04d}"
            record = {
                "audio_filepath": rel,
                "offset": 0.0,
                "duration": round(len(audio) / rate, 3),
                "text": f"utterance number {i} of the benchmark corpus",
                "speaker": f"| Language:en Dataset:bench Speaker:{speaker} |",
            }
            out.write(json.dumps(record) + "\n")
    return work / "records.jsonl"


def subset(work: Path, part: Path, n: int) -> tuple[str, str]:
    """The first n records' index lines (their hashes stay in the part's .npy: starts are absolute)."""
    lines = part.with_suffix(".jsonl").read_text().splitlines()[:n]
    path = work / f"index-{n}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path), str(part.with_suffix(".npy"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--speakers", type=int, default=200)
    ap.add_argument("--work", type=Path, default=None)
    a = ap.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="bench_identity."))
    records = make_corpus(work, a.records, a.speakers)
    root = str(work / "audio")
    floor = run(FLOOR, {"records": str(records), "root": root})
    part = run(PART, {"records": str(records), "root": root, "out": str(work / "part")})
    per_100k = 100_000 / a.records
    print(f"corpus: {a.records} utterances, {part['seconds'] / 3600:.2f} h, {a.speakers} speakers ({work})")
    for name, got in (("floor (decode only)", floor), ("identity part", part)):
        print(
            f"{name:20s} {got['cpu'] / a.records * 1000:6.2f} CPU-ms/utt, "
            f"{got['cpu'] * per_100k / 60:6.1f} CPU-min per 100k utterances, peak {got['rss_mb']:.0f} MB"
        )
    print(
        f"identity part / floor: {part['cpu'] / floor['cpu']:.1f}x; "
        f"{part['hashes'] / part['seconds']:.0f} hashes/s of audio"
    )
    sizes = sorted({a.records // 4, a.records // 2, a.records})
    rows = []
    for n in sizes:
        index, hashes = subset(work, work / "part.npy", n)
        job = run(JOB, {"index": index, "hashes": hashes, "splits": SPLITS, "out": str(work / f"job-{n}")})
        rows.append((n, job))
        print(
            f"identity job, {n:6d} utts: {job['cpu']:6.2f} CPU-s, {job['held_out']:5d} held out, "
            f"{job['train']:6d} train checked, {job['links']} links, index {job['index_mb']:.2f} MB, "
            f"peak {job['rss_mb']:.0f} MB"
        )
    scale = []
    for copies in (1, 4, 16):
        got = run(
            SCALE, {"index": str(work / "part.jsonl"), "hashes": str(work / "part.npy"), "copies": copies}
        )
        scale.append(got)
        print(
            f"query, {got['held']:6d} held out: {got['per_query_ms']:6.3f} CPU-ms, "
            f"index {got['index_mb']:6.1f} MB, peak {got['rss_mb']:.0f} MB, {got['links']} links"
        )
    # cost per query = a + b * held-out count (least squares over the index sizes)
    b, a0 = np.polyfit([g["held"] for g in scale], [g["per_query_ms"] / 1000 for g in scale], 1)
    fraction_held = rows[-1][1]["held_out"] / rows[-1][0]
    mb_per_held = scale[-1]["index_mb"] / scale[-1]["held"]
    for total in (100_000, 1_000_000):
        held = fraction_held * total
        job = (total - held) * (a0 + b * held)
        print(
            f"identity job per {total:,} utterances ({fraction_held:.0%} held out: {held:,.0f}): "
            f"~{job / 60:.1f} CPU-min (a query: {a0 * 1000:.3f} ms + {b * 1e6:.3f} ms per 1,000 held out), "
            f"index ~{mb_per_held * held:,.0f} MB"
        )
        if total == 100_000:
            job_100k = job
    print(
        f"total per 100k utterances: ~{(part['cpu'] * per_100k + job_100k) / 60:.1f} CPU-min "
        f"(fingerprinting {part['cpu'] * per_100k / 60:.1f}, identity job {job_100k / 60:.1f})"
    )
    if any(j["links"] for _, j in rows):
        print("links: pieces of one demo clip at nearly one factor, in two clips (see the links files)")


if __name__ == "__main__":
    main()
