"""The text stage: grammar build fresh vs cached, and normalization cost per 10,000 utterances.

1. NeMo's English normalizer grammars built into an empty cache (a fresh process: the first run of a
   user, once per language and package versions), then loaded from that cache (every later job).
2. The text job (sharflow.text.job.normalize_dataset, one worker) over `--records` utterances: the
   demo's texts, a quarter of them with money, dates, times and abbreviations written out. Three
   runs, each in a fresh process after the grammars are cached: the floor (normalized_text: text, no
   tokenizer: reading, deciding and writing records only), with NeMo's normalizer, and with the
   normalizer and a tokenizer's coverage (EnglishCharsTokenizer). CPU seconds of the job per 10,000
   utterances, and the ratio to the floor; the start-up a job and worker pays once (imports, the
   grammars loaded from the cache, NeMo imported for its tokenizers) is printed apart.
3. A manifest's spoken form that still holds digits or symbols (datasets.<name>.normalized_text:
   check_manifest normalizes it again): from itself, or from the record's text? 14 pairs of a written
   text and a manifest spoken form with digits, money, dates, times, abbreviations and more left in
   it, both through NeMo's normalizer: what each leaves, and where they differ.

    .venv/bin/python benchmarks/bench_text.py [--records 2000] [--work DIR]
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHARS = "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers.EnglishCharsTokenizer"
RAW = [
    "It costs $10 on 3/4/2024.",
    "Dr. Smith paid $5.20 at 10:30 a.m. on Jan. 5th, 2023.",
    "We sold 1,234 units (about 12%) in Q3.",
    "Room 101 is 3.5 m wide and 2.4 m high.",
]

BUILD = """
import json, resource, sys, time
t0 = time.process_time(); w0 = time.perf_counter()
from sharflow.text.normalizer import Normalizers
n = Normalizers(sys.argv[1])
n.spoken("warm up", "en")
print(json.dumps({"cpu": time.process_time() - t0, "wall": time.perf_counter() - w0,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

JOB = """
import json, resource, sys, time
t0 = time.process_time()
from sharflow.text.fields import TextSettings
from sharflow.text.job import normalize_dataset
from sharflow.text.job import TextTools
args = json.loads(sys.argv[1])
# start-up, once per job and worker: the grammars loaded, the tokenizers built (NeMo imported)
tools = TextTools(args["cache"], args["tokenizer"])
tools.spoken("warm up", "en"), tools.dropped("warm up", list(args["tokenizer"] or []))
t1 = time.process_time()
stats = normalize_dataset(args["records"], records_stats=args["stats"], out_records=args["out"] + "/r.jsonl",
                          rejected_dir=args["out"] + "/rejected", stats=args["out"] + "/stats.json",
                          dataset="bench", settings=TextSettings(normalized_text=args["policy"]),
                          tokenizer=args["tokenizer"], cache_dir=args["cache"], workers=1)
t2 = time.process_time()
print(json.dumps({"startup": t1 - t0, "job": t2 - t1, "records": stats["records_out"],
                  "sources": stats["normalized_text_source"], "coverage": stats["coverage"],
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(code: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_records(work: Path, n: int) -> tuple[Path, Path]:
    """`n` prepared-like records of the demo's texts, every fourth with a raw written form in front."""
    demo = [json.loads(line) for line in (REPO / "demo" / "manifest.json").read_text().splitlines()]
    records = work / "records.jsonl"
    with open(records, "w", encoding="utf-8") as f:
        for i in range(n):
            r = demo[i % len(demo)]
            text = f"{RAW[i // 4 % len(RAW)]} {r['text']}" if i % 4 == 0 else r["text"]
            rec = {
                "audio_filepath": r["audio_filepath"],
                "offset": 0.0,
                "duration": r["duration"],
                "text": text,
            }
            rec["speaker"] = f"| Language:en Dataset:bench Speaker:{r['speaker']} |"
            f.write(json.dumps(rec) + "\n")
    stats = work / "records.stats.json"
    stats.write_text(json.dumps({"records_out": n}))
    return records, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_text."))
    cache = work / "cache"
    fresh = run(BUILD, str(cache))
    cached = run(BUILD, str(cache))
    print(
        f"English grammars: fresh build {fresh['cpu']:.1f} CPU-s ({fresh['wall']:.1f} s wall, "
        f"peak {fresh['rss_mb']:.0f} MB); from the cache {cached['cpu']:.2f} CPU-s "
        f"({cached['wall']:.2f} s wall): {fresh['wall'] / cached['wall']:.0f}x"
    )
    records, stats = write_records(work, args.records)
    runs = {}
    for name, policy, tokenizer in (
        ("floor (no normalizer, no tokenizer)", "text", None),
        ("NeMo normalizer", "check_manifest", None),
        ("normalizer + coverage (EnglishChars)", "check_manifest", {"english_phoneme": {"_target_": CHARS}}),
    ):
        out = work / f"out-{len(runs)}"
        job = {
            "records": str(records),
            "stats": str(stats),
            "out": str(out),
            "policy": policy,
            "tokenizer": tokenizer,
            "cache": str(cache),
        }
        start = time.perf_counter()
        runs[name] = {**run(JOB, json.dumps(job)), "wall": time.perf_counter() - start}
    floor = runs["floor (no normalizer, no tokenizer)"]["job"] / args.records * 10_000
    print(f"\ntext job over {args.records} utterances (a quarter with numbers, money, dates), one worker:")
    print(f"{'':40s} {'CPU-s / 10,000 utt':>19s} {'x floor':>8s} {'start-up CPU-s':>15s} {'peak MB':>8s}")
    for name, r in runs.items():
        per = r["job"] / r["records"] * 10_000
        print(f"{name:40s} {per:19.1f} {per / floor:8.1f} {r['startup']:15.2f} {r['rss_mb']:8.0f}")
    normalized = runs["NeMo normalizer"]["sources"]
    print(
        f"\nnormalized_text sources with the normalizer: {normalized}; "
        f"coverage: {runs['normalizer + coverage (EnglishChars)']['coverage']}"
    )
    renormalize(cache)
    print(f"(work files in {work})")


# (what, the record's text, the manifest's normalized_text with something left in it)
CLAIMS = [
    ("digits", "Section 5 of the act applies.", "Section 5 of the act applies."),
    ("digits, ASR style", "Section 5 of the act applies.", "section 5 of the act applies"),
    ("money", "It costs $5.20 today.", "It costs $5.20 today."),
    ("money, half done", "It costs $5.20 today.", "It costs five dollars 20 cents today."),
    ("date", "We met on 3/4/2024 at noon.", "We met on 3/4/2024 at noon."),
    ("date, half done", "We met on Jan. 5th, 2023.", "We met on January 5th, 2023."),
    ("time", "The train leaves at 10:30 a.m.", "The train leaves at 10:30 AM."),
    ("abbreviation", "Dr. Smith lives at 221B Baker St.", "Doctor Smith lives at 221B Baker Street."),
    ("percent", "About 12% of units sold.", "About 12% of units sold."),
    ("ordinal", "He finished 2nd in the race.", "He finished 2nd in the race."),
    ("year", "In 1999 the band split.", "In 1999 the band split."),
    ("disfluency", "Um, it was 5 o'clock.", "Um, it was 5 o'clock."),
    ("other reading", "The 1990s were loud; see ch. 3.", "The nineties were loud; see chapter 3."),
    ("phone", "Call 555-1234 now.", "Call 555-1234 now."),
]


def renormalize(cache: Path) -> None:
    """3. A manifest spoken form with digits or symbols left, normalized again from itself or from text."""
    from sharflow.text.fields import left_over
    from sharflow.text.normalizer import Normalizers

    normalizers = Normalizers(str(cache))
    same, left = 0, {"itself": 0, "text": 0}
    print(f"\nA manifest spoken form with digits or symbols left ({len(CLAIMS)} cases): normalized again")
    for what, text, own in CLAIMS:
        itself, from_text = (normalizers.spoken(x, "en").strip() for x in (own, text))
        left["itself"] += bool(left_over(itself))
        left["text"] += bool(left_over(from_text))
        if itself == from_text:
            same += 1
            continue
        print(f"  {what}: manifest {own!r}\n    from itself: {itself!r}\n    from text:   {from_text!r}")
    print(
        f"same words {same} of {len(CLAIMS)}; digits or symbols still left: from itself {left['itself']}, "
        f"from text {left['text']}"
    )


if __name__ == "__main__":
    main()
