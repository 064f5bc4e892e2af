"""Whole-dataset jobs as the corpus grows (issue 61): CPU per record and peak RSS of each job that sees
a whole dataset, on Emilia-shaped synthetic inputs at a ladder of sizes, and the plan's memory for them.

Emilia's shape: speakers with a long-tailed count of utterances each (a Pareto draw: a few speakers
with thousands, most with a handful), durations of 3 to 30 s (log-normal, clipped), about 2,000
containers (the records address members of `EN-B000000.tar` ... like the WebDataset reader's), a
few percent held out (dev/test splits by speaker). Each job runs its own code (the function its
`workflow_scripts` entry calls) in a fresh Python process over the inputs made for its size, and
that process reports its CPU seconds (user + system), wall seconds and peak RSS (VmHWM). The
inputs are made once per size and kept for the jobs that read them. (tests/test_scale.py runs the
small ladder's jobs forked by a zygote that imported their modules once: the same CPU, not the same
memory.)

Jobs measured: `prepare` (a NeMo manifest of the records, spans of CONTAINERS long recordings: each
line checked, each recording's header probed once, as sparse WAVs), `context_plan` (groups the
records by speaker, bin-packs the groups), `shar_plan` (the seeded shuffle into shards and each
job's inputs file), `buckets` (the catalog's durations and lengths into bucket bins), `catalog` (the
shards' catalog fragments, made by the shar job's own code, merged into the dataset's catalog),
`shar_merge` (the shards' stats summed, their rejects gathered, records in = out + rejected),
`context_merge` (the context parts' keyed records merged k-way into with_context.jsonl, by split),
`quality_merge` (the parts' metrics in line order), `quality_filter` (records and metrics read in
step, thresholds applied), `codes_merge` (the codes shards' stats summed), `input_cfg` (the train
catalog's durations into weighted bucket bins and NeMo's dataloader config), `validation_ds` (the
same for the held-out sets, without bins), `text_merge` (the text parts joined in order, their
counts summed) and `splits` (each record's split by speaker and utterance hash, its identity fields
read in step from the identity parts, each audio file's size for its span key), and the identity
stage over every dataset: `identity_index` (the held-out records' fingerprints sorted into one
index, the train records' first copies, the speakers), `identity_check` (the first of the check
parts of about CHECK_RECORDS train records each, as the workflow splits them: its records each
looked up in the whole index; it prints how many of the planted copies of held-out records among
them it found; run REPEATS times, the least CPU kept) and `identity_merge` (8 check parts' links
joined, their counts summed), whose fingerprints are drawn from the demo's speech hashes
(HASHES_PER_SECOND a second; demo_hash_draw says how); `dataset_card` (the catalog's columns,
speakers and percentiles into DATASET.md); and `calibration_sample` (the cost plan's sample of whole
speakers, drawn from the records in three passes; the plan's other job reads the calibration's logs,
not the records); `evaluation_set` (the test split's Shar exported cut by cut to WAV files and
MagpieTTS's manifest); `verify` (every shard of the train split's Shar, every field's members
decoded and checked, the catalog along them, the totals; in one process) and `report` (every stage's
stats, as the jobs here write them, the catalog, buckets, records and quality metrics into the run's
plots and tables). The evaluation and verify Shar hold short cuts (EVALUATION_SECONDS,
VERIFY_SECONDS): their cost per second of audio is decoding, measured on real audio by bench_plan
(verify); here it is the cost per cut that must not grow.

Printed per job and size: records, wall, the job's CPU-µs per record (after its imports), the
process's peak RSS and the job's own part of it (above the RSS before the job), the growth of CPU per
record from the smallest size (bar: 1.5x) and the bytes a record adds to the job's own RSS from the
smallest size (its per-record part: bar at most 2 KB a record, or 4 GB in all). Then the plan check:
each job also runs on 300 records (the cost plan's sample), and the peak the plan predicts from that
run for the largest size (sharflow.plan.model.predicted_peak_mb) is set beside the peak measured
there (bar: within 25 %, or over by at most 2x).

    .venv/bin/python benchmarks/bench_scale.py [--sizes 10000 100000 1000000] [--jobs ...]
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

from scale.corpus import CALIBRATION
from scale.jobs import JOBS
from scale.measure import ladder, plan_check, report, run_job, zygote


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--jobs", nargs="+", default=list(JOBS), choices=list(JOBS))
    parser.add_argument("--work", help="where the inputs are made and kept (default: a temp folder)")
    parser.add_argument("--run-job", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--zygote", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_job:
        print(json.dumps(run_job(args.run_job, Path(args.folder))))
        return
    if args.zygote:
        zygote()
        return
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        calibration = ladder([CALIBRATION], args.jobs, Path(args.work or tmp))
        rows = ladder(sorted(args.sizes), args.jobs, Path(args.work or tmp))
    ok = report(rows)
    print("every job within the bars" if ok else "a job is over a bar (CPU per record 1.5x, or RSS)")
    planned = plan_check(rows, calibration)
    print(
        "every prediction within the bar (0.75x to 2x)" if planned else "a prediction is outside 0.75x to 2x"
    )
    sys.exit(0 if ok and planned else 1)


if __name__ == "__main__":
    main()
