"""The cost plan (issue 48): the sample, the calibration run's config and command, the extrapolation,
the resources the rules ask for, and `snakemake plan` on the demo."""

import json
import logging
import math
from pathlib import Path

import pytest
import yaml

from sharflow.core.errors import SharflowError
from sharflow.core.logs import cost_path, job_log
from sharflow.plan.actual import compare_markdown, slurm_efficiency
from sharflow.plan.calibrate import calibration_config, passed_options
from sharflow.plan.model import Fit, JobCost, Scale, fit_line, plan_rules, read_job_costs, resources_table
from sharflow.plan.resources import DEFAULTS, FALLBACK, PlannedResources, planned_figures
from sharflow.plan.sample import STRATA, draw_sample, stratum
from testkit import DEMO, LONG_RUN, demo_config, prepare_demo, read_jsonl, run_snakemake, write_jsonl


def speakers_file(path: Path) -> Path:
    """1,000 records: 90 speakers of 10 (durations 1.5 s, 5 s and 20 s by turns) and one of 100."""
    records = [
        {"audio_filepath": f"s{s}/{i}.wav", "duration": (1.5, 5.0, 20.0)[i % 3], "speaker": f"s{s}"}
        for i in range(10)
        for s in range(90)
    ]
    records += [{"audio_filepath": f"big/{i}.wav", "duration": 3.0, "speaker": "big"} for i in range(100)]
    return write_jsonl(path, records)


def test_the_sample_takes_whole_speakers_seeded_and_in_file_order(tmp_path):
    src = speakers_file(tmp_path / "prepared.jsonl")
    summary = draw_sample(str(src), str(tmp_path / "a.jsonl"), 100, seed=0)
    taken = read_jsonl(tmp_path / "a.jsonl")
    per_speaker = {}
    for r in taken:
        per_speaker[r["speaker"]] = per_speaker.get(r["speaker"], 0) + 1
    # every speaker drawn gives all its records (the context stage sees its groups as they are), the
    # one of 100 a quarter of the sample's size; the last speaker drawn may take the sample past 100
    assert all(n == 10 for s, n in per_speaker.items() if s != "big") and per_speaker.get("big", 25) == 25
    assert 100 <= len(taken) < 100 + 25 and summary.sample_records == len(taken)
    assert summary.records == 1000 and summary.speakers == 91 and summary.sample_speakers == len(per_speaker)
    assert summary.seconds == pytest.approx(90 * (4 * 1.5 + 3 * 5.0 + 3 * 20.0) + 100 * 3.0)
    assert summary.sample_seconds == pytest.approx(sum(r["duration"] for r in taken))
    assert sum(v[1] for v in summary.strata.values()) == len(taken)
    assert summary.strata[stratum(20.0)][0] == 270 and stratum(40.0) == len(STRATA)
    # a subset of the file's lines, in file order
    lines = src.read_text().splitlines()
    positions = [lines.index(json.dumps(r)) for r in taken]
    assert positions == sorted(positions) and len(set(positions)) == len(taken)
    # the same seed gives the same bytes; another seed other speakers
    draw_sample(str(src), str(tmp_path / "b.jsonl"), 100, seed=0)
    assert (tmp_path / "b.jsonl").read_bytes() == (tmp_path / "a.jsonl").read_bytes()
    draw_sample(str(src), str(tmp_path / "c.jsonl"), 100, seed=1)
    assert {r["speaker"] for r in read_jsonl(tmp_path / "c.jsonl")} != set(per_speaker)
    # the small sample: from the sample, with the sample's cap: fewer speakers, as full
    draw_sample(str(tmp_path / "a.jsonl"), str(tmp_path / "small.jsonl"), 25, seed=0, cap=25)
    small = read_jsonl(tmp_path / "small.jsonl")
    assert 25 <= len(small) < 50 and all(r in taken for r in small)
    assert all(
        sum(1 for x in small if x["speaker"] == r["speaker"]) == per_speaker[r["speaker"]] for r in small
    )
    # a sample as large as the file is the file
    draw_sample(str(src), str(tmp_path / "all.jsonl"), 5000, seed=0)
    assert (tmp_path / "all.jsonl").read_bytes() == src.read_bytes()


def test_a_sample_of_prepared_records_prepares_to_the_same_records(tmp_path):
    prepared = prepare_demo(tmp_path / "full") / "prepared.jsonl"
    sample = tmp_path / "sample.jsonl"
    draw_sample(str(prepared), str(sample), 20, seed=3)
    again = prepare_demo(tmp_path / "again", manifest=sample) / "prepared.jsonl"
    assert again.read_bytes() == sample.read_bytes() and len(read_jsonl(sample)) == 20  # 4 speakers x 5


def test_the_calibration_takes_over_where_jobs_go_and_nothing_else():
    argv = ["snakemake", "--profile", "profiles/slurm", "plan", "-n", "--jobs=40", "--configfile", "c.yaml"]
    assert passed_options(argv, DEMO.parent) == [
        "--profile",
        str((DEMO.parent / "profiles" / "slurm").resolve()),
        "--jobs",
        "40",
    ]
    # found in the first folder that holds it: where snakemake started, not the --directory it moved to
    assert passed_options(["snakemake", "--profile", "profiles/local"], "/nowhere", DEMO.parent, "/") == [
        "--profile",
        str((DEMO.parent / "profiles" / "local").resolve()),
    ]
    assert passed_options(["snakemake", "--cores", "8", "--workflow-profile", "/abs/wp"], "/") == [
        "--cores",
        "8",
        "--workflow-profile",
        "/abs/wp",
    ]


def test_the_calibration_config_reads_each_sample_with_absolute_paths(tmp_path):
    config = yaml.safe_load((DEMO.parent / "config" / "config.yaml").read_text())
    config.update(publish={"url": "s3://bucket/x"}, training={"path_prefix": "s3://bucket/x"})
    config["segment"]["parts"] = 3
    samples = {"demo": "s/demo.jsonl", "degraded": "s/degraded.jsonl", "talks": "s/talks.jsonl"}
    cal = calibration_config(config, samples, DEMO.parent)
    assert cal["datasets"]["demo"]["manifest"] == str((Path("s/demo.jsonl")).resolve())
    assert cal["datasets"]["demo"]["audio_root"] == str(DEMO / "audio")
    assert cal["datasets"]["degraded"]["format"] == "nemo" and cal["datasets"]["degraded"]["recipe"] is None
    # the long recordings' sample is a listing of some of them, which the calibration segments
    talks = cal["datasets"]["talks"]
    assert talks["format"] == "long_form" and talks["audio_root"] == str(DEMO / "longform")
    assert talks["manifest"] == str(Path("s/talks.jsonl").resolve()) and cal["segment"]["parts"] == 1
    assert cal["codecs"]["tiny_nemo"]["random_from_config"] == str(
        DEMO.parent / "config/models/tiny_codec.yaml"
    )
    assert cal["quality"]["parts"] == cal["context"]["parts"] == 1
    assert cal["publish"]["url"] is None and cal["training"]["path_prefix"] is None
    assert config["quality"]["parts"] == 2 and config["datasets"]["demo"]["manifest"] == "demo/manifest.json"


def cost(rule, dataset, startup=1.0, wall=9.0, cpu=10.0, rss=500.0, load=0.0, startup_cpu=0.5) -> JobCost:
    return JobCost(rule, dataset, startup, wall, cpu, rss, 0.0, load, startup_cpu)


CONFIG = {
    "quality": {"parts": 4},
    "context": {"parts": 2},
    "identity": {"parts": 1},
    "shar": {"shards_per_job": 10, "shard_size": 100},
    "codes": {"shards_per_job": 10},
    "codecs": {"a": {}, "b": {}},
}


def test_a_jobs_fixed_and_per_unit_costs_come_from_its_two_runs():
    # 10 s + 0.5 s a unit, measured at 100 and 25 units: the line through both
    assert fit_line((1, 100.0, 60.0), (1, 25.0, 22.5), fallback_fixed=3.0) == Fit(10.0, 0.5)
    # no growth measurable (noise): all fixed; no fixed part measurable: all per unit
    assert fit_line((1, 100.0, 8.0), (1, 25.0, 8.3), fallback_fixed=3.0) == Fit(8.0, 0.0)
    assert fit_line((1, 100.0, 50.0), (1, 25.0, 5.0), fallback_fixed=3.0) == Fit(0.0, 0.5)
    # growth within noise (0.2 s, 10 %) is not scaled: the report's figures at 304 and 80 records
    assert fit_line((1, 304.0, 2.61), (1, 80.0, 2.48), fallback_fixed=0.4) == Fit(2.61, 0.0)
    assert fit_line((1, 304.0, 0.22), (1, 80.0, 0.05), fallback_fixed=0.1) == Fit(0.22, 0.0)
    assert fit_line((2, 304.0, 50.0), (2, 80.0, 45.6), fallback_fixed=9.0) == Fit(25.0, 0.0)
    # and above it is: verify 0.92 -> 1.28 s, which did grow to 7.3 s at 3,360 records
    verify = fit_line((1, 304.0, 1.28), (1, 80.0, 0.92), fallback_fixed=0.4)
    assert verify.per_unit == pytest.approx(0.36 / 224) and 0 < verify.fixed < 0.92
    assert fit_line((2, 304.0, 50.4), (2, 80.0, 44.6), fallback_fixed=9.0).per_unit > 0
    # one run alone: its start-up and model loads are the fixed part, the rest per unit
    assert fit_line((2, 100.0, 60.0), None, fallback_fixed=5.0) == Fit(5.0, 0.5)
    assert fit_line((1, 100.0, 2.0), None, fallback_fixed=5.0) == Fit(2.0, 0.0)


def test_each_rule_scales_by_what_drives_it_per_dataset():
    """Two datasets sampled at different ratios: an audio rule scales each dataset's per-unit cost by
    its seconds, a records rule by its records; the fixed cost is paid once per job of the full run
    (a part rule: its parts); one-off and prepare's own jobs are not scaled."""
    scales = {"a": Scale(1000, 4000.0, 100, 800.0, 25, 200.0), "b": Scale(300, 900.0, 100, 100.0, 25, 25.0)}
    assert scales["a"].units("audio", "small") == 200.0 and scales["a"].ratio("records") == 10.0
    sample = [
        cost("quality_part", "a", cpu=5.0 + 0.02 * 800),  # 5 s fixed + 0.02 s an audio second
        cost("quality_part", "b", cpu=7.0 + 0.04 * 100),
        cost("text", "a", cpu=1.0 + 0.1 * 100),  # 1 s + 0.1 s a record
        cost("text", "b", cpu=1.0 + 0.1 * 100),
        cost("text_normalizer", None, cpu=40.0),
        cost("prepare", "a", cpu=99.0),  # the calibration's own prepare: not the corpus's
    ]
    small = [
        cost("quality_part", "a", cpu=5.0 + 0.02 * 200),
        cost("quality_part", "b", cpu=7.0 + 0.04 * 25),
        cost("text", "a", cpu=1.0 + 0.1 * 25),
        # no small text job for b: its fixed part is its start-up CPU (0.5 s) and model loads (none)
    ]
    actual = [cost("prepare", "a", cpu=700.0), cost("prepare", "b", cpu=200.0)]
    rules = plan_rules(sample, small, actual, scales, CONFIG, shards={})
    q = rules["quality_part"]
    assert q.jobs == 4 * 2 and q.fixed_cpu_s == pytest.approx(4 * 5.0 + 4 * 7.0)
    assert q.cpu_s == pytest.approx(4 * 5.0 + 0.02 * 4000 + 4 * 7.0 + 0.04 * 900)
    t = rules["text"]
    assert t.jobs == 2 and t.cpu_s == pytest.approx(1.0 + 0.1 * 1000 + 0.5 + (11.0 - 0.5) / 100 * 300)
    assert rules["text_normalizer"].cpu_s == 40.0 and rules["text_normalizer"].driver == "one_off"
    assert rules["prepare"].cpu_s == 900.0 and rules["prepare"].driver == "actual"
    # a job's predicted length: its fixed part and its share of the per-unit time (wall: 1 s of
    # start-up + wall 9 s in both runs: all fixed, 10 s)
    assert q.job_wall_s == pytest.approx(10.0)


def test_a_long_form_datasets_segment_stage_and_prepare_scale_by_what_its_sampled_recordings_gave():
    """A long_form dataset (talks: 10 hours of recordings, 1 hour sampled, 0.25 h in the small run)
    beside one prepared in full (a): its segment parts scale by seconds of recording, its prepare by
    the segments' records; a's prepare is as it ran, and the full run's segment jobs of talks (an
    earlier run's) are not read as the plan's."""
    talks = Scale(2000, 9000.0, 200, 900.0, 50, 225.0, 36000.0, 3600.0, 900.0, long_form=True)
    assert talks.units("recordings", "small") == 900.0 and talks.ratio("recordings") == 10.0
    scales = {"a": Scale(1000, 4000.0, 100, 800.0, 25, 200.0), "talks": talks}
    assert not scales["a"].long_form and scales["a"].units("recordings", "full") == 0.0
    sample = [
        cost("segment_plan", "talks", cpu=3.0),  # the sample's plan: not the corpus's
        cost("segment_part", "talks", cpu=20.0 + 0.5 * 3600),  # 20 s fixed + 0.5 s a second of recording
        cost("segment_merge", "talks", cpu=1.0),
        cost("prepare", "talks", cpu=2.0 + 0.01 * 200),  # 2 s + 0.01 s a record (segment)
        cost("prepare", "a", cpu=99.0),  # the calibration's own prepare of a prepared dataset
    ]
    small = [
        cost("segment_part", "talks", cpu=20.0 + 0.5 * 900),
        cost("segment_merge", "talks", cpu=1.0),
        cost("prepare", "talks", cpu=2.0 + 0.01 * 50),
    ]
    actual = [
        cost("prepare", "a", cpu=700.0),
        cost("segment_plan", "talks", cpu=30.0),  # the full run's plan (headers of every recording)
        cost("segment_part", "talks", cpu=9999.0),  # an earlier full run's: not the plan's
    ]
    config = {**CONFIG, "segment": {"parts": 4}}
    rules = plan_rules(sample, small, actual, scales, config, shards={})
    seg = rules["segment_part"]
    assert seg.driver == "recordings" and seg.jobs == 4 and seg.gpu
    assert seg.cpu_s == pytest.approx(4 * 20.0 + 0.5 * 36000) and seg.fixed_cpu_s == pytest.approx(80.0)
    assert rules["segment_merge"].cpu_s == pytest.approx(1.0) and not rules["segment_merge"].grew
    assert rules["segment_plan"].cpu_s == 30.0 and rules["segment_plan"].driver == "actual"
    prep = rules["prepare"]  # talks scaled by its records, a as it ran
    assert prep.driver == "records" and prep.jobs == 2
    assert prep.cpu_s == pytest.approx(700.0 + 2.0 + 0.01 * 2000)


def test_long_recordings_are_sampled_whole_and_their_records_estimated(tmp_path):
    """The calibration's sample of a long_form dataset is whole recordings in a seeded order until
    its hours, the small run a quarter of their seconds; the plan counts the segments the calibration
    prepared from each and estimates the corpus's records and seconds per second of recording."""
    from sharflow.core import layout
    from sharflow.plan.build import segmented_summary
    from sharflow.plan.sample import draw_recordings
    from sharflow.segment.dataset import list_recordings

    rows = [
        {"path": f"r{i}.flac", "language": "de" if i % 2 else "en", "speakers": ["x"] * (i % 3),
         "duration": 600.0 + 60 * i, "stamp": [1, 2]}
        for i in range(30)
    ]  # fmt: skip
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"recordings": rows, "parts": [list(range(30))], "hours": 0.0}))
    out, small = tmp_path / "talks.jsonl", tmp_path / "talks.small.jsonl"
    summary = draw_recordings(str(plan), str(out), str(small), hours=2.0, seed=0)
    chosen = list_recordings(str(tmp_path), str(out), "en")
    paths = [r.path for r in chosen]
    assert paths == sorted(paths, key=lambda p: int(p[1:-5]))  # in the dataset's order
    seconds = {r["path"]: r["duration"] for r in rows}
    taken = sum(seconds[p] for p in paths)
    assert 2 * 3600 <= taken < 2 * 3600 + max(seconds.values())  # whole recordings until 2 hours
    assert 1 < len(chosen) < 30 and paths != [f"r{i}.flac" for i in range(len(chosen))]  # not the first
    by_path = {r["path"]: r for r in rows}
    assert all(r.language == by_path[r.path]["language"] for r in chosen)
    assert all(list(r.speakers) == by_path[r.path]["speakers"] for r in chosen)
    few = [r.path for r in list_recordings(str(tmp_path), str(small), "en")]
    assert set(few) < set(paths) and sum(seconds[p] for p in few) >= taken / 4
    assert sum(seconds[p] for p in few[:-1]) < taken / 4 + max(seconds.values())
    assert summary == {
        "long_form": True, "recordings": 30, "recording_seconds": sum(seconds.values()),
        "sample_recordings": len(paths), "sample_recording_seconds": taken,
        "small_recordings": len(few), "small_recording_seconds": sum(seconds[p] for p in few),
    }  # fmt: skip
    again = tmp_path / "again.jsonl"
    assert draw_recordings(str(plan), str(again), str(tmp_path / "s2.jsonl"), 2.0, 0) == summary
    assert again.read_bytes() == out.read_bytes()  # seeded
    other = draw_recordings(str(plan), str(tmp_path / "o.jsonl"), str(tmp_path / "o2.jsonl"), 2.0, 1)
    assert (tmp_path / "o.jsonl").read_bytes() != out.read_bytes() and other["recordings"] == 30
    whole = draw_recordings(str(plan), str(tmp_path / "w.jsonl"), str(tmp_path / "w2.jsonl"), 100.0, 0)
    assert whole["sample_recordings"] == 30  # a dataset under the sample's hours: all of it
    # the calibration cut the sample into 120 records of 8 s, the small run into 40 of 7 s
    for run, n, each in (("sample", 120, 8.0), ("small", 40, 7.0)):
        prepared = tmp_path / run / layout.dataset_files("talks").prepared
        write_jsonl(prepared, [{"audio_filepath": "x", "duration": each}] * n)
    full = segmented_summary(summary, "talks", tmp_path / "sample", tmp_path / "small")
    ratio = summary["recording_seconds"] / taken
    assert full["estimated"] and full["sample_records"] == 120 and full["small_seconds"] == 280.0
    assert full["records"] == round(120 * ratio) and full["seconds"] == pytest.approx(960.0 * ratio, abs=1e-3)


def test_a_jobs_dataset_is_read_from_its_logs_path_at_any_depth(tmp_path):
    for path in ("prepare/demo", "quality_part/demo/part-0", "codes_shard/demo/dev_seen/tiny/0", "input_cfg"):
        (tmp_path / "logs" / path).parent.mkdir(parents=True, exist_ok=True)
        with job_log(str(tmp_path / "logs" / f"{path}.log")):
            pass
    jobs = {j.rule: j.dataset for j in read_job_costs(tmp_path / "logs", {"demo", "part-0"})}
    assert jobs == {"prepare": "demo", "quality_part": "demo", "codes_shard": "demo", "input_cfg": None}


def test_a_whole_dataset_jobs_memory_grows_by_its_benchmarked_bytes_a_record():
    """The calibration's peak, plus RSS_PER_RECORD for each record more the job sees in the full run
    (its dataset's: one job); a part rule's memory is its calibration peak (bounded by its part)."""
    from sharflow.plan.model import RSS_PER_RECORD

    scales = {"a": Scale(4_500_000, 3.6e7, 300, 2400.0, 75, 600.0)}
    sample = [cost("shar_plan", "a", cpu=1.0, rss=90.0), cost("quality_part", "a", cpu=5.0, rss=700.0)]
    small = [cost("shar_plan", "a", cpu=0.9, rss=89.0), cost("quality_part", "a", cpu=2.0, rss=690.0)]
    rules = plan_rules(sample, small, [], scales, CONFIG, shards={})
    grown = RSS_PER_RECORD["shar_plan"] * (4_500_000 - 300) / 2**20
    assert RSS_PER_RECORD["shar_plan"] > 0 and rules["shar_plan"].peak_rss_mb == pytest.approx(90.0 + grown)
    assert rules["shar_plan"].peak_rss_mb > 1000  # the 4.5 M records' plan: ~1 GB, over the 1,000 MB floor
    assert rules["quality_part"].peak_rss_mb == 700.0


def test_shard_jobs_are_planned_per_shard_and_sized_per_kind():
    """The calibration's shard jobs of a stage give a per-shard cost; the full run's jobs are its
    blocks of shards_per_job, per codec; each kind of shard job asks for its own number of shards."""
    scales = {"a": Scale(2000, 20000.0, 200, 2000.0, 50, 500.0)}
    # 4 s fixed + 0.01 s an audio second, in the calibration's jobs of two kinds
    sample = [cost("shar_tail2", "a", startup=2.0, wall=2.0 + 0.01 * 2000, cpu=4.0 + 0.01 * 2000, rss=700.0)]
    small = [cost("shar_shard", "a", startup=2.0, wall=2.0 + 0.01 * 500, cpu=4.0 + 0.01 * 500, rss=600.0)]
    codes = [cost("codes_tail2", "a", startup=1.0, wall=9.0, cpu=9.0)]
    rules = plan_rules(sample + codes, small, [], scales, CONFIG, shards={"a": 20})
    s = rules["shar_jobs"]
    assert s.jobs == 2 and s.cpu_s == pytest.approx(2 * 4.0 + 0.01 * 20000)
    assert s.per_shard_wall_s == pytest.approx(0.01 * 20000 / 20) and s.fixed_wall_s == pytest.approx(4.0)
    assert rules["codes_jobs"].jobs == 2 * 2  # two codecs
    one = s.per_shard_wall_s
    table = resources_table(rules, CONFIG, safety=1.5)
    assert table["shar_block"] == planned_figures(700.0, 4.0 + 10 * one, 1.5)
    assert table["shar_tail3"]["runtime"] == max(10, math.ceil((4.0 + 3 * one) * 1.5 / 60))
    assert table["shar_shard"]["mem_mb"] == 1100  # 700 MB x 1.5, rounded up to 100 MB
    # the kinds of job the config makes (sharflow.work.jobs.job_kinds): with 100 shards a job,
    # shar_block is a block of 100 and shar_block10 one of 10
    assert "shar_block10" not in table and "shar_block100" not in table
    per_100 = resources_table(rules, {**CONFIG, "shar": {"shards_per_job": 100, "shard_size": 100}}, 1.5)
    assert per_100["shar_block"]["runtime"] == math.ceil((4.0 + 100 * one) * 1.5 / 60)
    assert per_100["shar_block10"] == table["shar_block"] and "shar_block100" not in per_100


def test_a_rule_asks_for_the_plans_figures_else_the_defaults(tmp_path):
    missing = PlannedResources(tmp_path / "none.yaml")
    assert missing.figures("quality_part") == DEFAULTS["quality_part"] == (16000, 480)
    assert missing.figures("no_such_rule") == FALLBACK
    assert (
        missing.mem_mb("quality_part")(None, 2) == 32000 and missing.runtime("quality_part")(None, 3) == 1440
    )
    path = tmp_path / "resources.yaml"
    path.write_text(yaml.safe_dump({"quality_part": {"mem_mb": 1200, "runtime": 25}}))
    planned = PlannedResources(path)
    assert planned.figures("quality_part") == (1200, 25) and planned.source("quality_part") == "plan"
    assert planned.mem_mb("quality_part")(None, 2) == 2400 and planned.runtime("quality_part")(None, 2) == 50
    assert (
        planned.figures("codes_block") == DEFAULTS["codes_block"]
        and planned.source("codes_block") == "default"
    )
    path.write_text(yaml.safe_dump({"quality_part": {"mem_mb": "lots"}}))
    with pytest.raises(SharflowError, match=r"resources\.yaml: not a plan's resources"):
        PlannedResources(path)
    assert planned_figures(100.0, 30.0) == {"mem_mb": 1000, "runtime": 10}  # the minimums
    assert planned_figures(3000.0, 3600.0, 1.5) == {"mem_mb": 4500, "runtime": 90}


def test_a_plan_is_used_only_for_the_config_corpus_and_code_it_was_made_for(tmp_path):
    """PlannedResources takes the plan's figures only under the key a plan made now would have
    (sharflow.plan.key); anything else in the key gives every rule the defaults, and says what."""
    from sharflow.plan.key import code_version, key_now, plan_key

    manifest = tmp_path / "m.json"
    manifest.write_text('{"a": 1}\n{"a": 2}\n')
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({"records_in": 2}))
    config = {"shar": {"shard_size": 16}, "codecs": {"c": {"backend": "nemo"}},
              "datasets": {"d": {"manifest": str(manifest), "weight": None, "tags": {}}},
              "training": {"path_prefix": None}}  # fmt: skip
    state = {"config": config, "inputs": {"d": [str(manifest)]}, "stats": {"d": str(stats)}}

    def now():
        return key_now(state["config"], state["inputs"], state["stats"])

    resources, plan = tmp_path / "resources.yaml", tmp_path / "plan.json"
    resources.write_text(yaml.safe_dump({"quality_part": {"mem_mb": 1200, "runtime": 25}}))
    plan.write_text(json.dumps({"key": now()}))

    def used():
        r = PlannedResources(resources, plan, now)
        return r.figures("quality_part"), r.stale, r.message()

    assert used() == ((1200, 25), [], None)
    # what changes no job's cost keeps the plan
    state["config"] = {**config, "training": {"path_prefix": "s3://b/run"}}
    state["config"]["datasets"] = {"d": {**config["datasets"]["d"], "weight": 2.0, "tags": {"x": 1}}}
    assert used()[0] == (1200, 25)
    changes = {
        "a config value": lambda: state.update(config={**config, "shar": {"shard_size": 32}}),
        "another codec": lambda: state.update(config={**config, "codecs": {"c": {}, "e": {"backend": "hf"}}}),
        "the manifest": lambda: manifest.write_text('{"a": 1}\n{"a": 2}\n{"a": 3}\n'),
        "the record count": lambda: stats.write_text(json.dumps({"records_in": 3})),
        "another dataset": lambda: state.update(inputs={**state["inputs"], "e": []}),
        "the code": lambda: state.update(code=True),
    }
    for what, change in changes.items():
        state.update(config=config, inputs={"d": [str(manifest)]}, code=False)
        manifest.write_text('{"a": 1}\n{"a": 2}\n')
        stats.write_text(json.dumps({"records_in": 2}))
        plan.write_text(json.dumps({"key": now()}))
        assert used()[0] == (1200, 25), what
        change()
        if state.get("code"):
            key = now()
            plan.write_text(json.dumps({"key": {**key, "code": "sharflow 0.0.9 (source 000000000000)"}}))
        figures, stale, message = used()
        assert figures == DEFAULTS["quality_part"] and stale, what
        assert "asks for the default mem_mb and runtime" in message and stale[0] in message, what
    state.update(config=config, inputs={"d": [str(manifest)]})
    said = PlannedResources(resources, plan, now).stale
    assert said == [f"code: sharflow 0.0.9 (source 000000000000) -> {code_version()}"]
    plan.write_text(json.dumps({"key": plan_key({**config, "shar": {"shard_size": 32}}, now()["corpus"])}))
    assert PlannedResources(resources, plan, now).stale == ["shar.shard_size: 32 -> 16"]
    plan.write_text(json.dumps({"stages": {}}))  # a plan of a sharflow before keys
    assert "records no key" in PlannedResources(resources, plan, now).stale[0]
    assert PlannedResources(tmp_path / "none.yaml", plan, now).stale == []  # no plan: nothing to say


def test_a_job_writes_its_cost_beside_its_log(tmp_path):
    from sharflow.core.logs import model_load

    log = tmp_path / "logs" / "text" / "demo.log"
    log.parent.mkdir(parents=True)
    with job_log(str(log)):
        with model_load("codec:x"):
            sum(i * i for i in range(200_000))
        sum(i * i for i in range(500_000))
    record = json.loads(Path(cost_path(str(log))).read_text())
    assert record["cpu_s"] > 0 and record["wall_s"] >= record["model_load_s"]["codec:x"] > 0
    assert record["peak_rss_mb"] > 10 and record["gpu_peak_mb"] == 0
    (job,) = read_job_costs(tmp_path / "logs", {"demo"})
    assert (job.rule, job.dataset, job.load_s) == ("text", "demo", record["model_load_s"]["codec:x"])


def run_plan(work):
    """`snakemake plan` on the demo and its long recordings (talks), the demo's sample 24 records
    (conftest's planned_demo, in the background)."""
    return work, run_snakemake(work, planned_config(work), "plan", timeout=LONG_RUN)


# The demo codec's encoder as it was before 2026-11-30 (~4x its cost a record): the plan test's codes jobs
# must grow above the calibration's noise (a job's start-up), as a real codec's, far heavier, do
HEAVIER_ENCODER = {"resblock_dilation_sizes": [1, 3, 5], "down_sample_rates": [2, 4, 4, 8, 4]}


def planned_config(work: Path, **overrides) -> dict:
    """The plan test's config: the demo's, its codec's encoder HEAVIER_ENCODER (its config in `work`)."""
    config = demo_config(talks=True, plan={"sample_records": 24}, **overrides)
    codec = yaml.safe_load((DEMO.parent / "config/models/tiny_codec.yaml").read_text())
    codec["audio_encoder"].update(HEAVIER_ENCODER)
    path = work / "heavier_codec.yaml"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(codec))
    for spec in config["codecs"].values():
        if spec.get("random_from_config"):
            spec["random_from_config"] = str(path)
    return config


def test_snakemake_plan_calibrates_on_a_sample_and_plans_every_stage(planned_demo):
    work, proc = planned_demo
    plan = json.loads((work / "results/plan/plan.json").read_text())
    assert plan["datasets"]["demo"]["records"] == 56 and plan["datasets"]["demo"]["sample_records"] == 24
    assert len(read_jsonl(work / "results/plan/calibration/samples/demo.jsonl")) == 24
    assert list(plan["stages"]) == [
        "segment", "prepare", "text", "quality", "context", "shar", "codes", "dataset", "verify", "report"
    ]  # fmt: skip
    for stage, s in plan["stages"].items():
        assert s["cpu_s"] > 0 and s["jobs"] >= 1 and s["peak_rss_mb"] > 0, stage
    # the calibration ran every stage's real jobs on the sample and on a quarter of it, each in a
    # folder of its own
    assert len(read_jsonl(work / "results/plan/calibration/samples/demo.small.jsonl")) == 6
    for run, most in (("sample", 24), ("small", 6)):
        stats = (work / "results/plan/calibration" / run / "results/demo").rglob("shar_stats.json")
        assert 0 < sum(json.loads(p.read_text())["cuts"] for p in stats) <= most, run
        assert (work / "results/plan/calibration" / run / "logs/codes_merge").is_dir()
    # the real run's parts, a dataset's
    assert plan["stages"]["quality"]["rules"]["quality_part"]["jobs"] == 2 * 2
    # a 56-record corpus from a 24-record sample: the audio stages scale by more than 1
    q = plan["stages"]["quality"]["rules"]["quality_part"]
    assert q["cpu_s"] > q["calibration_cpu_s"] - 1e-6
    assert "text_normalizer" in plan["not_scaled"] and "segment_plan" in plan["not_scaled"]
    # the long recordings (talks: 2 of 75 s, all in the sample, one in the small run) were segmented in
    # the calibration alone; their records are the segments it prepared, per second of recording
    talks = plan["datasets"]["talks"]
    assert (talks["recordings"], talks["sample_recordings"], talks["small_recordings"]) == (2, 2, 1)
    assert talks["estimated"] and talks["records"] == talks["sample_records"] > talks["small_records"] > 0
    assert len(read_jsonl(work / "results/plan/calibration/samples/talks.small.jsonl")) == 1
    assert (work / "results/talks/segment/plan.json").is_file()
    assert not (work / "results/talks/segment/manifest.jsonl").exists()  # not segmented in full
    assert not (work / "results/talks/prepare").exists()
    segment = plan["stages"]["segment"]["rules"]
    assert segment["segment_part"]["driver"] == "recordings" and segment["segment_part"]["jobs"] == 1
    assert segment["segment_part"]["cpu_s"] > 0 and plan["stages"]["segment"]["gpu_s"] > 0
    assert plan["stages"]["prepare"]["rules"]["prepare"]["driver"] == "records"  # talks's; demo's as it ran
    # rules whose cost did not grow above noise are named, not scaled. Which ones varies by run and by
    # the machine's load (a merge of a few records' CPU-seconds may grow by more than noise on a busy
    # machine, a part's by less), but the codes jobs' encoding grows well above it, and of the
    # merges, whose work a record is the least, some stay within it
    assert "codes_jobs" not in plan["not_grown"]
    assert any(name.endswith("_merge") for name in plan["not_grown"])
    for name in plan["not_grown"]:
        rule = next(r for s in plan["stages"].values() for n, r in s["rules"].items() if n == name)
        assert rule["driver"] in ("audio", "records")
    assert plan["disk"]["shar audio"]["bytes"] > plan["disk"]["shar audio"]["calibration_bytes"]
    page = (work / "results/plan/plan.md").read_text()
    assert "| quality (GPU) |" in page and "Most of the bill" in page and "| segment (GPU) |" in page
    assert "~ talks is long recordings: 2 of them" in page and "| talks | ~" in page
    assert (
        f"noise (0.2 s or 10 %) from the small sample to the sample: {', '.join(plan['not_grown'])}." in page
    )
    assert "| quality (GPU) |" in proc.stdout  # printed in the terminal
    path = plan["critical_path"]  # the spine's jobs for this corpus, summed, its longest named
    spine = ["segment_plan", "segment_merge", "prepare", "text_merge"]
    assert [rule for rule, _ in path["steps"]][:4] == spine
    assert path["longest"] in dict(path["steps"]) and path["wall_s"] == round(
        sum(w for _, w in path["steps"]), 1
    )
    assert f"the longest is {path['longest']}" in proc.stdout
    table = yaml.safe_load((work / "results/plan/resources.yaml").read_text())
    assert {"quality_part", "context_part", "codes_block", "shar_block", "text_part", "verify"} <= set(table)
    # the shipped config's text.parts, a dataset's
    assert plan["stages"]["text"]["rules"]["text_part"]["jobs"] == 2


def test_a_run_after_the_plan_asks_for_the_plans_resources(planned_demo):
    from test_profiles import slurm_dry_run

    work, _ = planned_demo
    table = yaml.safe_load((work / "results/plan/resources.yaml").read_text())
    jobs = slurm_dry_run(work, planned_config(work))
    # a dry run shows every stage of the plan, the shard jobs behind the checkpoint included
    dry = run_snakemake(work, planned_config(work), "-n")
    assert "sharflow: the cost plan" in dry.stderr + dry.stdout
    assert "codes (GPU)" in dry.stderr + dry.stdout
    for rule in ("prepare", "quality_part", "context_part", "text_part", "segment_part"):
        if rule not in jobs:
            continue  # done already (the demo's prepare): not in the dry run
        for job in jobs[rule]:
            assert int(job["mem_mb"]) == table[rule]["mem_mb"], rule
            assert int(job["runtime"]) == table[rule]["runtime"], rule
    # the long recordings were segmented in the calibration alone: the run segments them all
    assert "quality_part" in jobs and "context_part" in jobs and "segment_part" in jobs
    assert "was made for another" not in dry.stderr + dry.stdout

    # the same plan under another config (shard size, a second codec): not used, and said once
    other = planned_config(work, shar={"shard_size": 8})
    other["codecs"]["second"] = dict(other["codecs"]["tiny_nemo"])
    dry = run_snakemake(work, other, "-n")
    said = dry.stderr + dry.stdout
    assert said.count("was made for another config, corpus or code") == 1
    assert "every rule asks for the default mem_mb and runtime" in said
    assert "shar.shard_size: 16 -> 8" in said and "codecs.second.backend: (none) -> " in said
    assert "sharflow: the cost plan (results/plan/plan.md)" not in said  # its stages are not this run's
    jobs = slurm_dry_run(work, other)
    for rule in ("quality_part", "context_part", "text_part"):
        for job in jobs.get(rule, []):
            assert (int(job["mem_mb"]), int(job["runtime"])) == DEFAULTS[rule], rule
    assert "quality_part" in jobs


def write_cost(logs: Path, rel: str, cpu: float, wall: float, rss: float) -> None:
    path = logs / f"{rel}.cost.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"startup_s": 1.0, "wall_s": wall, "cpu_s": cpu, "peak_rss_mb": rss, "gpu_peak_mb": 0.0}
    path.write_text(json.dumps({**record, "model_load_s": {}}))


def test_plan_against_actual_sets_each_stage_beside_the_runs_jobs(tmp_path):
    from sharflow.plan.actual import compare, compare_markdown

    logs = tmp_path / "logs"
    write_cost(logs, "quality_part/demo/part-0000", cpu=50.0, wall=40.0, rss=600.0)
    write_cost(logs, "quality_part/demo/part-0001", cpu=70.0, wall=700.0, rss=900.0)
    write_cost(logs, "text/demo", cpu=8.0, wall=5.0, rss=200.0)
    write_cost(logs, "text_normalizer/en", cpu=300.0, wall=300.0, rss=200.0)  # a one-off: left out
    write_cost(logs, "calibration", cpu=999.0, wall=999.0, rss=100.0)  # the plan's own: left out
    plan = {
        "datasets": {"demo": {}},
        "stages": {
            "quality": {"cpu_s": 150.0, "rules": {"quality_part": {"cpu_s": 150.0}}},
            "text": {"cpu_s": 30.0, "rules": {"text": {"cpu_s": 10.0}, "text_normalizer": {"cpu_s": 20.0}}},
        },
    }
    resources = {"quality_part": {"mem_mb": 1000, "runtime": 10}, "text": {"mem_mb": 1000, "runtime": 10}}
    result = compare(plan, resources, logs)
    assert result["stages"]["quality"] == {
        "planned_cpu_s": 150.0,
        "measured_cpu_s": 120.0,
        "ratio": 1.25,
        "measured_jobs": 2,
    }
    assert result["stages"]["text"]["planned_cpu_s"] == 10.0 and result["stages"]["text"]["ratio"] == 1.25
    assert result["total"] == {"planned_cpu_s": 160.0, "measured_cpu_s": 128.0, "ratio": 1.25}
    # part-0001 ran 701 s: over the 10 minutes asked for; text fitted
    assert not result["resources"]["quality_part"]["fits"] and result["resources"]["text"]["fits"]
    assert result["resources"]["quality_part"]["longest_s"] == 701.0
    page = compare_markdown(result)
    assert "| quality | 150.0 | 120.0 | 1.25 | 2 |" in page
    assert "Over what the plan asked for: quality_part" in page


def test_the_plans_stages_read_top_to_bottom_with_gpu_stages_marked():
    from sharflow.plan.model import is_gpu_rule
    from sharflow.plan.page import hours, plan_dot, plan_summary, shard_jobs_summary
    from sharflow.report.dag import parse_dot
    from testkit import GPU_RULES

    # a small stage still reads as more than nothing
    assert [hours(s) for s in (0.0, 1.0, 7.2, 17.0, 18.0, 5400.0)] == [
        "0.00",
        "<0.001",
        "0.002",
        "0.005",
        "0.01",
        "1.50",
    ]

    assert all(is_gpu_rule(rule) for rule in GPU_RULES) and is_gpu_rule("codes_jobs")
    assert not any(is_gpu_rule(rule) for rule in ("shar_block", "shar_jobs", "text", "verify"))
    plan = {
        "stages": {
            "text": {"jobs": 2, "cpu_s": 3600.0, "gpu_s": 0.0, "wall_s": 1800.0},
            "quality": {"jobs": 40, "cpu_s": 72000.0, "gpu_s": 36000.0, "wall_s": 900.0},
            "codes": {"jobs": 150, "cpu_s": 7200.0, "gpu_s": 7200.0, "wall_s": 600.0},
        },
        "total": {"cpu_s": 82800.0, "gpu_s": 43200.0, "wall_s": 3300.0},
    }
    summary = plan_summary(plan).splitlines()
    assert summary[2].split() == ["text", "2", "1.00", "0.00", "0.50"]
    assert summary[3].split() == ["quality", "(GPU)", "40", "20.00", "10.00", "0.25"]
    assert summary[-2].split() == ["total", "23.00", "12.00", "0.92"]
    assert summary[-1].strip().startswith("critical path: not planned")  # a plan from before it was
    nodes, edges = parse_dot(plan_dot(plan))
    assert [label.splitlines()[0] for label in nodes.values()] == ["text", "quality (GPU)", "codes (GPU)"]
    assert edges == [("n0", "n1"), ("n1", "n2")]  # a chain, top to bottom: no transitive edges
    # before a plan: the most shard jobs from each dataset's most records (4,097 records: 2 shards
    # of 4,096; over 5 Shar sets still 5: a sixth would need four more records)
    rows = [
        {"dataset": "a", "records": 4097, "source": "lines (nemo)", "sets": 1},
        {"dataset": "b", "records": 4097, "source": "lines (nemo)", "sets": 5},
        {"dataset": "c", "records": None, "source": "not known before prepare has read the corpus"},
    ]
    lines = shard_jobs_summary(rows, 4096, {"shar": 10, "codes": 1}, ["x", "y"], "GPU rules: q").splitlines()
    assert lines[2].split() == ["a", "4,097", "lines", "(nemo)", "1", "2", "1", "2", "2"]
    assert lines[3].split() == ["b", "4,097", "lines", "(nemo)", "5", "5", "5", "5", "5"]
    assert lines[4].split()[:2] == ["c", "?"] and "GPU rules: q" in lines[5] and "snakemake plan" in lines[6]
    assert "codes[x] (GPU)" in lines[1] and "codes[y] (GPU)" in lines[1]


def test_the_gpu_bill_scales_the_plans_gpu_hours_to_10000_hours_beside_nemos_codes_alone():
    """The page's bill: every GPU stage's hours for the corpus, at 10,000 h of audio at the same rates,
    and NeMo's step-4 codes at its measured rate; the context parts hold a GPU only with quality off
    (with quality on they read the one pass's embeddings)."""
    from sharflow.plan.model import is_gpu_rule
    from sharflow.plan.page import bill_lines, gpu_bill, plan_summary

    plan = {
        "datasets": {"a": {"seconds": 36000.0}, "b": {"seconds": 36000.0}},  # 20 h
        "stages": {
            "text": {"jobs": 2, "cpu_s": 3600.0, "gpu_s": 0.0, "wall_s": 1800.0},
            "quality": {"jobs": 4, "cpu_s": 72000.0, "gpu_s": 7200.0, "wall_s": 900.0},
            "codes": {"jobs": 15, "cpu_s": 7200.0, "gpu_s": 3600.0, "wall_s": 600.0},
        },
        "total": {"cpu_s": 82800.0, "gpu_s": 10800.0, "wall_s": 3300.0},
        "gpu_rules_on_cpu": [],
    }
    bill = gpu_bill(plan)
    assert bill["gpu_hours"] == 3.0 and bill["gpu_hours_at_target"] == pytest.approx(1500.0)  # x 500
    assert bill["at_target"] == pytest.approx({"quality": 1000.0, "codes": 500.0})
    nemo = 500.0 * 981 / 427  # the codes stage's hours at 10,000 h, at NeMo's step-4 rate
    assert bill["nemo_codes_hours_at_target"] == pytest.approx(nemo)
    assert bill["nemo_codes_hours"] == pytest.approx(981 / 427)
    page = "\n".join(bill_lines(plan))
    assert "**1,500.00 GPU-h** (quality 1,000.00, codes 500.00)" in page and f"{nemo:,.2f} GPU-h" in page
    assert "not comparable" not in page
    assert "GPU bill at 10,000 h of audio: 1,500.00 GPU-h" in plan_summary(plan)
    assert "not comparable" in "\n".join(bill_lines({**plan, "gpu_rules_on_cpu": ["quality_part"]}))
    assert gpu_bill({**plan, "datasets": {}}) is None
    assert is_gpu_rule("context_part") and is_gpu_rule("context_part", {"quality": {"enabled": False}})
    assert not is_gpu_rule("context_part", {"quality": {"enabled": True}})


def test_the_critical_path_sums_the_spines_jobs_and_names_the_longest():
    """The jobs that wait each for the one before, summed, side by side ones as their longest; the part
    and shard jobs (side by side over the cluster) are not on it."""
    from sharflow.plan.critical import critical_path
    from sharflow.plan.model import RulePlan
    from sharflow.plan.page import critical_line

    walls = {
        "prepare": 600.0,
        "text_part": 9000.0,  # a part job: not on the spine
        "text_merge": 5400.0,
        "quality_part": 9000.0,
        "quality_merge": 30.0,
        "shar_plan": 90.0,
        "codes_jobs": 20000.0,  # the codes jobs: GPU, side by side
        "codes_merge": 2.0,
        "shar_merge": 5.0,
        "catalog": 40.0,
        "verify": 1800.0,
        "buckets": 3.0,
        "report": 60.0,
    }
    rules = {r: RulePlan(r, "records", 1, job_wall_s=w) for r, w in walls.items()}
    path = critical_path(rules)
    assert path["steps"] == [
        ["prepare", 600.0],
        ["text_merge", 5400.0],
        ["quality_merge", 30.0],
        ["shar_plan", 90.0],
        ["shar_merge", 5.0],
        ["catalog", 40.0],
        ["verify", 1800.0],
        ["report", 60.0],
    ]
    assert path["wall_s"] == 8025.0 and path["longest"] == "text_merge"
    line = critical_line({"critical_path": path})
    assert line.startswith("critical path: 2.23 h of jobs") and "the longest is text_merge (1.50 h)" in line
    assert "prepare 0.17 -> text_merge 1.50 -> quality_merge 0.01 -> shar_plan 0.03" in line


def test_the_most_shard_jobs_bound_every_way_the_records_can_fall_into_sets():
    """most_shards and most_jobs are upper bounds of what the plan's jobs (sharflow.work.jobs.plan_jobs)
    make however the records fall into Shar sets (every split of small corpora, random and worst-case
    splits of larger ones), and most_shards is reached by some split (tight)."""
    import itertools
    import random

    from sharflow.plan.page import most_jobs, most_shards
    from sharflow.work.jobs import plan_jobs

    rng = random.Random(7)
    for records, sets, size in itertools.product((0, 1, 3, 17, 64, 250, 1234), (1, 2, 5), (1, 4, 16)):
        if records <= 17:
            splits = [c for c in itertools.product(range(records + 1), repeat=sets) if sum(c) <= records]
        else:  # random splits, and the worst case: each set one record past a multiple of the size
            splits = [sorted(rng.sample(range(records + sets), sets)) for _ in range(300)]
            splits = [[b - a for a, b in zip([0, *cuts], cuts, strict=False)] for cuts in splits]
            worst = [1 + size * ((records - sets) // size // sets)] * sets
            splits.append([worst[0] + records - sum(worst), *worst[1:]])
        shards = [[-(-n // size) for n in split if n > 0] for split in splits if sum(split) <= records]
        assert max(map(sum, shards)) <= most_shards(records, sets, size), (records, sets, size)
        if records <= 17:
            assert max(map(sum, shards)) == most_shards(records, sets, size), (records, sets, size)
        for per_job in (1, 10, 100):
            made = max(sum(len(plan_jobs(s, per_job)) for s in counts) for counts in shards)
            bound = most_jobs(most_shards(records, sets, size), sets, per_job)
            assert made <= bound, (records, sets, per_job)
    # a single set's bound is exact where the plan's job kinds make it so: 199 shards at 100 a job
    assert most_jobs(199, 1, 100) == len(plan_jobs(199, 100)) == 11 and most_jobs(12, 1, 10) == 2


def test_slurms_efficiency_report_stands_beside_the_plan(tmp_path):
    """What --slurm-efficiency-report writes (the executor plugin's own parsing of sacct's lines, as
    its create_efficiency_report saves it), read per rule onto plan_vs_actual's page."""
    from snakemake_executor_plugin_slurm.efficiency_report import parse_sacct_data

    sacct = [  # JobID|JobName|Comment|Elapsed|TotalCPU|NNodes|NCPUS|MaxRSS|ReqMem
        "101|run|rule_quality_part_wildcards_dataset=demo,part=0|00:10:00|17:40.000|1|2|0|8000M",
        "101.batch|batch||00:10:00|00:00.100|1|2|300M|",
        "101.0|python3.11||00:09:50|17:40.000|1|2|2900M|",
        "102|run|rule_quality_part_wildcards_dataset=demo,part=1|00:05:00|03:50.000|1|2|0|8000M",
        "102.0|python3.11||00:04:55|03:50.000|1|2|1500M|",
        "103|run|rule_shar_block|00:01:00|00:29.000|1|1|0|4000M",
        "103.0|python3.11||00:00:58|00:29.000|1|1|700M|",
    ]
    folder = tmp_path / "slurm_efficiency"
    folder.mkdir()
    parse_sacct_data(sacct, 80, "run", logging.getLogger("test")).to_csv(folder / "efficiency_report_run.csv")
    got = slurm_efficiency(folder)
    assert set(got) == {"quality_part", "shar_block"}
    q, s = got["quality_part"], got["shar_block"]
    assert (q["jobs"], q["max_rss_mb"], q["requested_mem_mb"], q["longest_s"]) == (2, 2900, 8000, 590)
    assert q["cpu_efficiency_pct"] == pytest.approx((1060 / 1180 + 230 / 590) * 50, abs=0.1)  # mean of 2
    assert (s["jobs"], s["max_rss_mb"], s["requested_mem_mb"]) == (1, 700, 4000) and s[
        "cpu_efficiency_pct"
    ] == 50
    result = {
        "stages": {},
        "total": {"planned_cpu_s": 0, "measured_cpu_s": 0, "ratio": None},
        "resources": {},
    }
    page = compare_markdown({**result, "slurm": got})
    assert "| quality_part | 2 | 64 % | 2,900 MB | 8,000 MB | 590 s |" in page
    assert "sacct" not in compare_markdown({**result, "slurm": {}})  # no report, no section
    assert slurm_efficiency(tmp_path / "none") == {}
