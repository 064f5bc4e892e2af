"""The identity stage: fingerprint and voice cost per 100,000 utterances, the identity job's cost and
memory as the held-out set grows, the speaker links' cost as speakers grow, and (--voices) the
voice calibration on the demo that identity.voices' defaults come from.

A corpus of `--records` distinct utterances is made from the demo's speech: each clip joins six
0.6 s pieces of random demo clips, each piece resampled by its own random factor in [0.7, 1.4]
(its pitch and pace moved, so its landmarks are its own: speech spectra like the demo's, content
no other clip has), `--speakers` speakers. Then, each in a fresh process (CPU seconds and peak
RSS of its own):

1. the floor: decoding every record's span as the stage does (sharflow.io.audio.load_span);
2. the identity part over every record (one worker): decoding, fingerprinting, writing; then
   again with voices (identity.voices: each record's GE2E embedding too);
3. the identity job over every record, with splits holding out 10 % + 10 % of the speakers and
   5 % + 5 % of the utterances, at a quarter, half and all of the corpus: its CPU seconds, the
   held-out index's size and the peak RSS, so that memory is seen to grow with held-out items;
4. the identity job's query as the held-out set grows past the corpus: the first half's
   fingerprints indexed 1, 4 and 16 times over (as more held-out records with the same spread of
   hashes), the second half's records looked up: CPU per query and the index's size;
5. speaker links (sharflow.identity.voices.link_speakers, default rules) over 256-d voices in 50
   clusters (each voice a cluster centre plus noise of its own size, so that voices of one cluster
   score 0.80-0.92: many near misses, as alike voices give), 1 % held out unseen, at 10,000, 40,000
   and 160,000 speakers: CPU seconds, pairs decided and peak RSS (one vector a speaker; the
   held-out voices against blocks of the others; near misses capped per held-out speaker).

The corpus's speakers are mixtures of the same seven demo voices (each clip six pieces of random
voices), so all their voices are alike and the identity job links many of them: there the speaker
links measure cost only; how well voices are told apart is what --voices measures.

Per 100,000 utterances: the part's CPU minutes (linear in records), and the identity job's
extrapolated from a fit of its cost per query against the held-out count (each query looks up its
hashes in the index: its cost grows with the index's posting lists), at the held-out share of
step 3.

With --voices, only the calibration: the demo's voices (7 x 8 utterances) embedded by GE2E with
its own front end (level: raise) and level-normalised (normalize), as copies (gain, rate, codec)
and as centroids of 1, 2, 3 and 4 utterances: the lowest similarity of one voice with itself and
the highest of two voices, for each.

    .venv/bin/python benchmarks/bench_identity.py [--records 2000] [--work DIR] [--voices]
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
from sharflow.io.audio import load_span
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
from sharflow.identity.part import VoiceEmbedding, run_identity_part
t0 = time.process_time()
out = args["out"]
stats = run_identity_part(0, records=args["records"], parts=1, audio_root=args["root"],
                          out_records=out + ".jsonl", out_hashes=out + ".npy", out_stats=out + ".stats.json",
                          out_voices=out + ".voices.npy", voices=VoiceEmbedding() if args["voices"] else None)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
cpu = time.process_time() - t0
print(json.dumps({"cpu": cpu, "hashes": stats["hashes"], "seconds": stats["audio_seconds"], "rss_mb": rss}))
"""

JOB = """
import json, resource, sys, time
args = json.loads(sys.argv[1])
from sharflow.identity.links import DatasetIdentity, MatchRules, link_identities
from sharflow.identity.voices import VoiceRules
t0 = time.process_time()
ds = DatasetIdentity([[args["index"], args["hashes"], args["voices"]]], args["splits"])
stats = link_identities({"bench": ds}, rules=MatchRules(), out_links=args["out"] + ".links.jsonl",
                        out_stats=args["out"] + ".stats.json", voices=VoiceRules(),
                        decisions=args["out"] + ".decisions.jsonl")
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"cpu": time.process_time() - t0, "held_out": stats["held_out"],
                  "train": stats["train_checked"]["bench"], "links": stats["links"],
                  "speakers_linked": len(stats["speakers"]["linked"]),
                  "index_mb": stats["index_mb"], "rss_mb": rss}))
"""

SCALE = """
import json, resource, sys, time
import numpy as np
args = json.loads(sys.argv[1])
from sharflow.identity.held_out import HeldOut, MatchRules
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


SPEAKERS = """
import json, resource, sys, time
import numpy as np
args = json.loads(sys.argv[1])
from sharflow.identity.voices import Speaker, VoiceRules, Voices, link_speakers
rng = np.random.default_rng(0)
centres = rng.standard_normal((50, 256)).astype(np.float32)
centres /= np.linalg.norm(centres, axis=1, keepdims=True)
voices = Voices()
for i in range(args["speakers"]):
    noise = rng.standard_normal(256).astype(np.float32) * rng.uniform(0.3, 0.5) / 16
    s = Speaker("bench", f"s{i:06d}", f"s{i:06d}", centres[i % 50] + noise, 60.0)
    s.splits["dev_unseen" if i % 100 == 0 else "train"] = 10
    voices.speakers[("bench", s.speaker)] = s
t0 = time.process_time()
pairs = link_speakers(voices, VoiceRules(), {})
cpu = time.process_time() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"cpu": cpu, "pairs": len(pairs), "linked": sum(p["linked"] for p in pairs), "rss_mb": rss}))
"""

CALIBRATE = """
import io, itertools, json, sys
import numpy as np, soundfile as sf, soxr
from sharflow.io.audio import load_span, resample
from sharflow.models.speaker_embedders.ge2e import GE2EEmbedder
demo = sys.argv[1]
manifest = [json.loads(x) for x in open(demo + "/manifest.json")]
def encoded(x, r, fmt, subtype, to=None):
    if to and to != r:
        x, r = soxr.resample(x, r, to).astype(np.float32), to
    buf = io.BytesIO(); sf.write(buf, x, r, format=fmt, subtype=subtype); buf.seek(0)
    return sf.read(buf, dtype="float32")
copies = {
    "-6 dB": lambda x, r: (x * 0.5, r), "+6 dB": lambda x, r: (np.clip(x * 2, -1, 1), r),
    "-20 dB": lambda x, r: (x * 0.1, r),
    "24 kHz": lambda x, r: (soxr.resample(x, r, 24000).astype(np.float32), 24000),
    "8 kHz": lambda x, r: (soxr.resample(x, r, 8000).astype(np.float32), 8000),
    "mp3": lambda x, r: encoded(x, r, "MP3", "MPEG_LAYER_III"),
    "opus": lambda x, r: encoded(x, r, "OGG", "OPUS", to=48000),
}
def unit(v):
    v = np.mean(v, 0)
    return v / np.linalg.norm(v)
speakers = np.array([r["speaker"] for r in manifest])
names = sorted(set(speakers))
for level in ("raise", "normalize"):
    embedder = GE2EEmbedder(level=level)
    audio = [load_span(demo + "/audio/" + r["audio_filepath"], r.get("offset", 0.0), r["duration"])
             for r in manifest]
    def embed(kind):
        f = copies.get(kind, lambda x, r: (x, r))
        return np.stack([embedder.embed([resample(*f(x, r), 16000)])[0] for x, r in audio])
    e = embed("original")
    print(f"level {level}:")
    for kind in copies:
        c = embed(kind)
        same = [float(unit(e[speakers == s]) @ unit(c[speakers == s])) for s in names]
        other = [
            float(unit(e[speakers == a]) @ unit(c[speakers == b])) for a in names for b in names if a != b
        ]
        print(f"  copy {kind:7s} same voice >= {min(same):.3f}, two voices <= {max(other):.3f}")
    for n in (1, 2, 3, 4):
        same, other = [], []
        for s in names:
            idx = np.flatnonzero(speakers == s)
            for sub in itertools.combinations(idx, n):
                rest = np.setdiff1d(idx, sub)[: 4 if n == 4 else None]
                q = unit(e[list(sub)])
                same.append(float(q @ unit(e[rest])))
                other += [float(q @ unit(e[speakers == t][: 4 if n == 4 else None])) for t in names if t != s]
        print(f"  {n} utterance(s) against the rest: same voice >= {min(same):.3f}, "
              f"two voices <= {max(other):.3f}")
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
    ap.add_argument("--voices", action="store_true", help="only the voice calibration on the demo")
    a = ap.parse_args()
    if a.voices:
        proc = subprocess.run([sys.executable, "-c", CALIBRATE, str(REPO / "demo")], cwd=REPO, check=False)
        raise SystemExit(proc.returncode)
    work = a.work or Path(tempfile.mkdtemp(prefix="bench_identity."))
    records = make_corpus(work, a.records, a.speakers)
    root = str(work / "audio")
    floor = run(FLOOR, {"records": str(records), "root": root})
    prints = run(PART, {"records": str(records), "root": root, "out": str(work / "prints"), "voices": False})
    part = run(PART, {"records": str(records), "root": root, "out": str(work / "part"), "voices": True})
    per_100k = 100_000 / a.records
    print(f"corpus: {a.records} utterances, {part['seconds'] / 3600:.2f} h, {a.speakers} speakers ({work})")
    for name, got in (("floor (decode only)", floor), ("fingerprints only", prints), ("identity part", part)):
        print(
            f"{name:20s} {got['cpu'] / a.records * 1000:6.2f} CPU-ms/utt, "
            f"{got['cpu'] * per_100k / 60:6.1f} CPU-min per 100k utterances, peak {got['rss_mb']:.0f} MB"
        )
    print(
        f"fingerprints / floor: {prints['cpu'] / floor['cpu']:.1f}x; with voices / floor: "
        f"{part['cpu'] / floor['cpu']:.1f}x; {part['hashes'] / part['seconds']:.0f} hashes/s of audio"
    )
    sizes = sorted({a.records // 4, a.records // 2, a.records})
    rows = []
    for n in sizes:
        index, hashes = subset(work, work / "part.npy", n)
        voices = str(work / "part.voices.npy")
        job = run(
            JOB,
            {
                "index": index,
                "hashes": hashes,
                "voices": voices,
                "splits": SPLITS,
                "out": str(work / f"job-{n}"),
            },
        )
        rows.append((n, job))
        print(
            f"identity job, {n:6d} utts: {job['cpu']:6.2f} CPU-s, {job['held_out']:5d} held out, "
            f"{job['train']:6d} train checked, {job['links']} links "
            f"({job['speakers_linked']} speaker pairs linked), "
            f"index {job['index_mb']:.2f} MB, peak {job['rss_mb']:.0f} MB"
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
        print(
            "links: pieces of one demo clip at nearly one factor in two clips, and speakers linked by voice:"
        )
        print("       the corpus's speakers are mixtures of the same demo voices (cost only; see --voices)")
    for n in (10_000, 40_000, 160_000):
        got = run(SPEAKERS, {"speakers": n})
        print(
            f"speaker links, {n:7,d} speakers ({n // 100:,} held out unseen): {got['cpu']:6.2f} CPU-s, "
            f"{got['pairs']} pairs decided ({got['linked']} linked), peak {got['rss_mb']:.0f} MB"
        )


if __name__ == "__main__":
    main()
