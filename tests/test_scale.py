"""The small ladder of benchmarks/bench_scale.py on every change: each whole-dataset job it measures, at
10^3 and 10^4 Emilia-shaped records, each in a process of its own forked by a zygote that imported the
jobs' modules once (scale.measure.Zygote: the job's CPU as in a fresh process, a second less a job;
memory is the benchmark's, in fresh processes); a job whose CPU per record grows by more than 3x
from one to the other has a step that grows faster than its records (a quadratic one, say)."""

import sys
from collections import Counter

import pytest

from testkit import REPO, run_environment

sys.path.insert(0, str(REPO / "benchmarks"))
from scale.corpus import corpus
from scale.handoff_inputs import EVALUATION_EVERY
from scale.jobs import JOBS
from scale.measure import growth, ladder, measure
from scale.steps import JOB_INPUTS, make_inputs, needed_steps

SIZES = (1_000, 10_000)
MOST_GROWTH = 3.0


def test_the_growth_check_catches_a_step_that_grows_faster_than_its_records():
    linear = {
        1_000: {"cpu": 0.010, "rss_mb": 130, "base_mb": 125},
        10_000: {"cpu": 0.100, "rss_mb": 131, "base_mb": 125},
    }
    quadratic = {
        1_000: {"cpu": 0.010, "rss_mb": 130, "base_mb": 125},
        10_000: {"cpu": 1.0, "rss_mb": 131, "base_mb": 125},
    }
    assert growth(linear)[10_000][0] == 1.0
    assert growth(quadratic)[10_000][0] == 10.0 > MOST_GROWTH
    assert growth(linear)[10_000][1] == 2**20 / 9_000  # the bytes each record added
    # a job run on a share of the records (a check part of ten) is per record of that share
    part = {**linear, 10_000: {**linear[10_000], "cpu": 0.010, "share": 0.1}}
    assert growth(part)[10_000][0] == 1.0


def test_each_job_alone_gets_the_inputs_it_reads_and_no_more(tmp_path):
    """`--jobs` makes only the inputs its jobs read (with the steps those read): a job run alone on
    them does its work; context_plan needs the records alone, splits no fingerprints."""
    assert set(JOB_INPUTS) == set(JOBS)
    assert needed_steps(["context_plan"]) == {"with_context"}
    assert needed_steps(["splits"]) == {"with_context", "quality_inputs", "identity_parts"}
    assert needed_steps(["report"]) >= {"fingerprints", "shard_files", "card_inputs"}
    for job in ("splits", "text_merge", "dataset_card", "input_cfg", "identity_check"):
        folder = tmp_path / job
        make_inputs(1_000, folder, [job])
        made = {p.stem for p in (folder / "inputs").glob("*.done")}
        assert made == needed_steps([job]), job
        assert measure(job, folder)["cpu"] > 0


@pytest.mark.ahead
def test_whole_dataset_jobs_cost_no_more_per_record_at_ten_thousand_than_at_a_thousand(tmp_path):
    # each job once: a 3x bar needs no least-of-three (bench_scale's REPEATS, for its 1.5x bar)
    rows = ladder(list(SIZES), list(JOBS), tmp_path, repeats={}, forked=True, env=run_environment())
    columns = corpus(SIZES[-1])
    # the inputs carry information: speakers of many sizes, durations over the range, held-out speakers
    counts = sorted(Counter(columns["speaker"].tolist()).values())
    assert counts[0] <= 3 and counts[-1] >= 100
    assert columns["duration"].min() >= 3.0 and columns["duration"].max() <= 30.0
    assert 0 < (columns["split"] > 0).mean() < 0.1
    for job, by_size in rows.items():
        per, _ = growth(by_size)[SIZES[-1]]
        assert per <= MOST_GROWTH, (
            f"{job}: CPU per record {per:.1f}x from {SIZES[0]:,} to {SIZES[-1]:,} records"
        )
        assert all(row["cpu"] > 0 for row in by_size.values())
    # the jobs did their work: prepare kept every record, verify checked every train cut, the
    # evaluation set has every test cut, the report a row for each stage
    train, test = int((columns["split"] == 0).sum()), -(-SIZES[-1] // EVALUATION_EVERY)
    assert rows["prepare"][SIZES[-1]]["said"] == {"records_in": SIZES[-1], "records_out": SIZES[-1]}
    assert rows["verify"][SIZES[-1]]["said"] == {"cuts": train}
    assert rows["evaluation_set"][SIZES[-1]]["said"] == {"cuts": test}
    assert rows["report"][SIZES[-1]]["said"]["summary_rows"] == 8
    # the identity lookups stay linear by looking at candidates only: they still find the planted
    # copies of held-out records (lossy, trimmed, with peaks lost, moved and added)
    for n, row in rows["identity_check"].items():
        said = row["said"]
        assert said["planted"] >= (20 if n >= 10_000 else 1) and said["found"] == said["planted"], (n, said)
