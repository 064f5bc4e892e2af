"""The workflow's Python without Snakemake (sharflow.workflow): every stage's input, params and resource
functions against a config and the layout, with a PlainEngine; and the two uses of Snakemake's internal
API (force_rerun, mend_group_components) against real Snakemake runs, so that an upgrade that breaks
either fails here.

The config is the shipped one with the demo's and degraded's paths, splits on for demo (its own
block), the identity stage on, two quality parts and two identity check parts: every branch a rule's
function takes where the shipped run has one.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from sharflow.core import blocks, layout
from sharflow.core.config import validate_config
from sharflow.work import jobs
from sharflow.workflow import PlainEngine, Workflow
from sharflow.workflow.inputs import TEXT_SETTINGS
from testkit import DEMO, REPO, demo_config, run_environment, write_tone

SCHEMA = REPO / "config" / "schema.yaml"
demo, degraded = SimpleNamespace(dataset="demo"), SimpleNamespace(dataset="degraded")


def workflow(tmp_path, monkeypatch, engine=None, **overrides) -> Workflow:
    """A Workflow over the demo config (splits, identity, two parts of quality and identity checks),
    in a fresh working folder."""
    monkeypatch.chdir(tmp_path)
    sections = {"quality": {"parts": 2}, "identity": {"check_parts": 2}, **overrides}
    config = validate_config(demo_config(degraded=True, splits=True, **sections), SCHEMA)
    return Workflow(config, engine or PlainEngine(), argv=["snakemake", "--cores", "2"], basedir=str(REPO))


def test_the_runs_constants_follow_from_the_config(tmp_path, monkeypatch):
    w = workflow(tmp_path, monkeypatch)
    run = w.run
    assert run.datasets == ["degraded", "demo"] and run.codecs == ["tiny_nemo"]
    assert run.quality and run.splits and run.identity and run.identity_parts == 2
    held_out = ["demo/dev_seen", "demo/dev_unseen", "demo/test_seen", "demo/test_unseen"]
    assert run.held_out_sets == held_out and run.test_sets == held_out[2:]
    assert run.dataset_of("demo/test_seen") == "demo" and run.split_of("demo/test_seen") == "test_seen"
    assert run.split_of("demo") == "train" and run.held_out_sets_of("degraded") == []
    outputs = run.final_outputs()
    for ds in run.datasets:
        files = layout.dataset_files(ds)
        assert {files.prepare_stats, files.quality_stats, files.split_stats, files.catalog} <= set(outputs)
    assert (
        layout.IDENTITY_STATS in outputs
        and layout.VALIDATION_DS in outputs
        and layout.PUBLISHED not in outputs
    )
    assert layout.dataset_files("demo/test_unseen").evaluation in outputs
    assert [k.name for k in run.job_kinds("shar")][:2] == ["shar_block", "shar_tail9"]
    # without quality: the identity parts are identity.parts, and the splits read text's records
    plain = workflow(tmp_path, monkeypatch, quality={"enabled": False}, identity={"parts": 3})
    text = layout.dataset_files("demo")
    assert plain.run.identity_parts == 3 and plain.run.measured_records("demo") == (
        text.text_records,
        text.text_stats,
    )
    # without splits: no held-out sets, no identity, and context reads quality's kept records
    bare = Workflow(validate_config(demo_config(), SCHEMA), PlainEngine())
    assert not (bare.run.splits or bare.run.identity or bare.run.held_out_sets)
    assert bare.measures.context_records(demo) == layout.dataset_files("demo").quality_kept


def test_threads_and_gpus_are_asked_as_the_executor_allows(tmp_path, monkeypatch):
    engine = PlainEngine(cores=1)
    w = workflow(
        tmp_path, monkeypatch, engine, shar={"workers": 4}, codes={"device": "auto", "gpus_per_job": 2}
    )
    assert w.run.threads_of("shar")(demo) == 1  # capped at --cores
    assert w.shar_threads == 4  # the per-shard rules' static value (the Slurm profile sets them)
    assert w.codes_gpus(demo) == 0 and w.quality_gpus(demo) == 0  # a local run without a GPU
    engine.cluster_or_dryrun = True  # read when asked: a dry run shows what a cluster is asked for
    assert w.codes_gpus(demo) == 2 and w.quality_gpus(demo) == 1
    assert w.context_gpus(demo) == 0 and w.context_device == "cpu"  # quality embeds: context selects
    cpu = workflow(tmp_path, monkeypatch, PlainEngine(cluster_or_dryrun=True), quality={"device": "cpu"})
    assert cpu.quality_gpus(demo) == 0 and cpu.quality_part_rule == "quality_part_cpu"
    assert w.quality_part_rule == "quality_part" and w.run.gpu_rules() == (("quality_part", "quality"),)


def test_prepare_and_text_read_the_configs_corpus_and_settings(tmp_path, monkeypatch):
    w = workflow(tmp_path, monkeypatch)
    assert w.inputs.manifest(demo) == [str(DEMO / "manifest.json")]
    assert w.inputs.manifest_version(demo) is None  # a local file: Snakemake watches its time
    assert w.inputs.audio_root(demo) == str(DEMO / "audio")
    settings = w.inputs.prepare_settings(degraded)
    assert settings["dataset"] == "degraded" and settings["manifest"] == str(
        DEMO / "degraded" / "manifest.json"
    )
    assert {"duration_tolerance", "language", "max_rejected_fraction"} <= set(settings)
    assert "form" not in settings  # a NeMo manifest's params stay as they were
    assert set(w.inputs.text_settings(demo)) == set(TEXT_SETTINGS)
    assert w.inputs.text_normalizers(demo) == [layout.text_normalizer("en")]
    metrics = w.inputs.part_files("quality", "metrics")(demo)
    assert metrics == [layout.dataset_files("demo").quality_part(p).metrics for p in range(2)]


def test_a_long_form_dataset_is_planned_segmented_merged_then_prepared(tmp_path, monkeypatch):
    """The segment rules' functions, and prepare reading the segment stage's manifest."""
    root = tmp_path / "recordings"
    write_tone(root / "b" / "two.flac", 1.0)
    write_tone(root / "one.wav", 1.0)
    (root / "notes.txt").write_text("not a recording")
    asr = {"random_from_config": str(REPO / "config/models/tiny_asr.yaml")}
    w = workflow(tmp_path, monkeypatch, segment={"parts": 3, "min_confidence": 0.2, "asr": asr})
    w.run.config["datasets"]["talks"] = long_form = {**w.run.config["datasets"]["demo"]}
    long_form.update(format="long_form", manifest=None, audio_root=str(root), splits=None)
    talks, files = SimpleNamespace(dataset="talks"), layout.dataset_files("talks")
    assert w.inputs.segment_inputs(talks) == [f"{root}/b/two.flac", f"{root}/one.wav"]
    assert w.inputs.segment_listing(talks) == {"audio_root": str(root), "listing": None, "language": "en"}
    settings = w.inputs.segment_settings(talks)
    assert settings["block"]["min_confidence"] == 0.2 and "parts" not in settings["block"]
    assert settings["asr"] == {"model": layout.SEGMENT_ASR_MODEL, "random": True, "batch_seconds": 120}
    assert w.inputs.segment_asr_file(talks) == [layout.SEGMENT_ASR_MODEL]
    assert w.measures.random_asr_config(SimpleNamespace(asr="segment")) == asr["random_from_config"]
    assert w.inputs.segment_parts(talks) == [files.segment_part(p) for p in range(3)]
    assert w.inputs.manifest(talks) == [files.segment_manifest]
    assert w.inputs.form("talks") == "nemo" and "form" not in w.inputs.prepare_settings(talks)
    assert w.run.threads_of("segment")(talks) >= 1 and w.segment_gpus(talks) == 0
    # the cost plan samples its recordings from the segment plan, and its key stamps the recordings
    # (the segments are cut after the plan); a prepared dataset's sample and key: what prepare reads
    demo = SimpleNamespace(dataset="demo")
    assert w.inputs.calibration_source(talks) == {"plan": files.segment_plan}
    assert w.inputs.calibration_source(demo) == {"prepared": layout.dataset_files("demo").prepared}
    assert w.inputs.plan_inputs("talks") == [f"{root}/b/two.flac", f"{root}/one.wav"]
    assert w.inputs.plan_inputs("demo") == w.inputs.corpus_files("demo") == [str(DEMO / "manifest.json")]
    long_form["manifest"] = str(root / "list.jsonl")
    assert w.inputs.plan_inputs("talks") == [str(root / "list.jsonl")] == w.inputs.segment_inputs(talks)
    # recordings in tars: each tar is an input once, whatever its members
    (root / "t").mkdir()
    with tarfile.open(root / "t" / "a.tar", "w") as tar:
        tar.add(root / "one.wav", arcname="x.wav")
        tar.add(root / "one.wav", arcname="y.wav")
    long_form["manifest"] = "t/"
    w.inputs._recordings.cache_clear()
    assert w.inputs.segment_inputs(talks) == [f"{root}/t/a.tar"] == w.inputs.plan_inputs("talks")
    assert w.inputs.segment_listing(talks)["listing"] == "t/"
    long_form["manifest"] = None
    w.inputs._recordings.cache_clear()
    # a model of the user's: transcripts from it, and a new file of it transcribes again
    model = tmp_path / "stt.nemo"
    model.write_bytes(b"a model")
    w.run.config["segment"]["asr"] = {"model": str(model), "random_from_config": None, "batch_seconds": 30}
    settings = w.inputs.segment_settings(talks)["asr"]
    assert settings == {"model": str(model), "random": False, "batch_seconds": 30}
    assert w.inputs.segment_asr_file(talks) == [str(model)]


def test_quality_identity_splits_and_context_read_what_the_stage_before_wrote(tmp_path, monkeypatch):
    w = workflow(tmp_path, monkeypatch)
    m, files = w.measures, layout.dataset_files("demo")
    assert m.asr_model_file(demo) == [] and m.asr_options(demo) is None
    part, identity = m.quality_part_outputs()
    assert set(part) == set(layout.dataset_files("{dataset}").quality_part("{part}").named())
    assert identity and all(name.startswith("identity_") for name in identity)
    assert m.last_quality_run(demo) == {
        "previous": files.quality_metrics,
        "previous_embeddings": files.quality_embeddings,
    }
    assert m.identity_options(demo)["voices"] == m.voice_embedding(demo)
    inputs = m.splits_inputs(demo)
    assert inputs["records"] == files.quality_kept and inputs["links"] == layout.IDENTITY_LINKS
    assert inputs["identity"] == [files.identity_part(p).records for p in range(2)]
    assert m.split_dataset(demo)["rules"] == w.run.config["datasets"]["demo"]["splits"]
    assert m.split_dataset(degraded)["rules"] == w.run.config["splits"]  # the workflow's block
    records = m.identity_part_files("records")(demo)
    assert records == [
        layout.dataset_files(ds).identity_part(p).records for ds in ("degraded", "demo") for p in range(2)
    ]
    assert m.identity_checks("links")(demo) == [layout.identity_check(p).links for p in range(2)]
    assert all(len(p) == 2 for p in m.identity_datasets(demo, voices=False)["demo"]["parts"])
    assert (
        m.context_records(demo) == files.split_records and m.context_records_stats(demo) == files.split_stats
    )
    assert m.measured_embeddings(demo) == {
        "measured_records": files.text_records,
        "embeddings": files.quality_embeddings,
    }
    assert m.context_part_settings(demo)["audio_root"] == str(DEMO / "audio")


def plan(tmp_path: Path, name: str, shards: int) -> str:
    path = Path(layout.dataset_files(name).shard_plan)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"generations": [{"first": 0, "shards": shards, "records": shards * 8}]}))
    return str(path)


def test_the_shard_jobs_come_from_the_plan_and_a_damaged_one_is_forced(tmp_path, monkeypatch):
    engine = PlainEngine()
    w = workflow(tmp_path, monkeypatch, engine, shar={"shards_per_job": 10})
    plan(tmp_path, "demo", 13)  # a block of 10, then a tail of 3
    s, files = w.shards, layout.dataset_files("demo")
    assert s.plan_jobs("demo", "shar").jobs == [("00000", 10), ("00001", 3)]
    block = SimpleNamespace(dataset="demo", block="00000")
    assert s.shar_block_inputs(10)(block) == {"inputs": files.shar_input("00000", 10, 10)}
    assert "beyond_the_plan" in s.shar_block_inputs(3)(block)  # not the plan's job of that size
    coded = SimpleNamespace(dataset="demo", block="00001", codec="tiny_nemo")
    assert s.codes_block_inputs(3)(coded)["shar_jobs"] == [files.shar_job("00001", 10, 3)]
    records = [files.shar_job("00000", 10, 10), files.shar_job("00001", 10, 3)]
    codes = [files.codes_job("tiny_nemo", "00000", 10, 10), files.codes_job("tiny_nemo", "00001", 10, 3)]
    assert s.repairs("demo")(None) == records + codes  # nothing made yet
    # a finished job whose file lost bytes is forced, and said once, however often it is looked at
    shard = Path(files.shard(0).cuts)
    shard.parent.mkdir(parents=True)
    shard.write_bytes(b"x" * 100)
    jobs.write_job_record(records[0], blocks.block_members("00000", 10, 10), [str(shard)])
    assert records[0] not in s.repairs("demo")(None)
    shard.write_bytes(b"x" * 50)
    os.utime(shard.parent, ns=(1, 1))  # the listing sees the folder as changed
    for _ in range(2):
        s.shar_block_inputs(10)(block)
    assert engine.forced == {records[0]}
    said = f"{shard.resolve().relative_to(tmp_path)} is 50 bytes, its job wrote 100"
    assert [m for m in engine.said if "50 bytes" in m] == [
        f"sharflow: {said}: its job ({records[0]}) runs again"
    ]


def test_the_hand_off_reads_every_set_and_the_plans(tmp_path, monkeypatch):
    w = workflow(tmp_path, monkeypatch, publish={"url": "s3://training/run"})
    h = w.handoff
    for name in w.run.held_out_sets:
        plan(tmp_path, name, 1)
    held = h.held_out_plans(demo)
    assert [split for split, _ in held] == ["dev_seen", "dev_unseen", "test_seen", "test_unseen"]
    assert h.held_out_plans(degraded) is None and h.held_out_job_records(degraded) == []
    assert h.held_out_job_records(demo) == [
        layout.dataset_files(n).shar_job("000000", 1, 1) for n in w.run.held_out_sets
    ]
    assert sorted(h.validation_sets(demo)) == ["demo/dev_seen", "demo/dev_unseen"]
    assert h.validation_codes_stats(demo) == [
        layout.dataset_files(n).codes_stats("tiny_nemo") for n in ("demo/dev_seen", "demo/dev_unseen")
    ]
    assert h.training_datasets(demo)["demo"]["catalog"] == layout.dataset_files("demo").catalog
    card = h.card_inputs(demo)
    assert (
        card["identity"] == layout.IDENTITY_STATS
        and card["splits"] == layout.dataset_files("demo").split_stats
    )
    report = h.report_datasets(demo)
    assert set(report) == {"degraded", "demo"} and "quality_metrics" in report["demo"]
    assert layout.dataset_files("demo").codes_stats("tiny_nemo") in h.report_inputs(demo)
    published = h.publish_inputs(demo)
    assert len(published["verify"]) == 2 + 4 and published["handoff"] == [
        layout.INPUT_CFG,
        layout.VALIDATION_DS,
    ]
    assert (
        w.run.publish == w.run.path_prefix == "s3://training/run"
        and layout.PUBLISHED in w.run.final_outputs()
    )


def test_a_dry_runs_summary_is_said_once_and_a_run_is_quiet(tmp_path, monkeypatch):
    engine = PlainEngine(dryrun=True)
    w = workflow(tmp_path, monkeypatch, engine)
    for _ in range(3):
        w.inputs.manifest(demo)  # every DAG pass asks prepare's inputs first
    summaries = [m for m in engine.said if "come after the shard plan" in m]
    assert len(summaries) == 1
    count = len((DEMO / "manifest.json").read_text().splitlines())
    rows = {line.split()[0]: line.split() for line in summaries[0].splitlines()[2:4]}
    # demo: its records, 5 Shar sets (train and the four held-out splits), each with its shar jobs
    assert rows["demo"][:2] == ["demo", str(count)] and rows["demo"][4] == "5"
    assert "quality_part (device: auto)" in summaries[0]
    quiet = PlainEngine()
    workflow(tmp_path, monkeypatch, quiet).inputs.manifest(demo)
    assert quiet.said == []
    assert w.look.most_records("demo") == {"records": count, "source": "lines (nemo)"}


SNAKEFILE = """
from sharflow.workflow import force_rerun

def forced(wildcards):
    if config.get("force"):
        assert force_rerun(workflow, "made.txt")
    return "made.txt"

rule all:
    input: forced

rule make:
    output: "made.txt"
    shell: "date +%s%N > {output}"
"""


@pytest.mark.ahead
def test_forcing_a_file_from_an_input_function_reruns_its_job_in_this_snakemake(tmp_path):
    """The one use of Snakemake's internal API (workflow.dag.forcefiles): a real run, then one whose
    input function forces the file. If a Snakemake upgrade changes how forced files are read, the job
    does not run again and this fails."""
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    snakemake = [sys.executable, "-m", "snakemake", "--cores", "1", "--directory", str(tmp_path)]

    def run(*extra):
        done = subprocess.run(
            [*snakemake, "-s", str(tmp_path / "Snakefile"), *extra],
            capture_output=True,
            text=True,
            timeout=600,
            env=run_environment(),
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return (tmp_path / "made.txt").read_text(), done.stderr

    first, _ = run()
    again, log = run()
    assert again == first and "Nothing to be done" in log
    forced, log = run("--config", "force=1")
    assert forced != first and "rule make" in log


GROUPED = """
{mend}
def parts(wildcards):
    with open(checkpoints.plan.get().output[0]) as f:
        return [f"part{{i}}.txt" for i in range(int(f.read()))]

rule all:
    input: parts

checkpoint plan:
    output: "plan.txt"
    shell: "echo 4 > {{output}}"

rule part:
    output: "part{{i}}.txt"
    group: "parts"
    shell: "touch {{output}}"
"""


# A dry run printing more than this is printing one group over and over (a finished one prints ~3 KB;
# one that prints forever, ~170 KB a second, filled 24 GB on a cluster)
PRINTING_FOREVER = 200_000


def grouped_dry_run(folder: Path, mend: bool, seed: int) -> str | None:
    """A dry run of GROUPED's four parts, bundled two by two (--group-components parts=2), after its
    checkpoint has run (Snakemake makes the DAG's groups again then); its output, None once it printed
    more than PRINTING_FOREVER (killed then: it prints the same group over and over)."""
    folder.mkdir()
    mend_line = "from sharflow.workflow import mend_group_components\nmend_group_components()" if mend else ""
    (folder / "Snakefile").write_text(GROUPED.format(mend=mend_line))
    (folder / "plan.txt").write_text("4\n")  # the checkpoint's output, as its job writes it
    cmd = [sys.executable, "-m", "snakemake", "-s", "Snakefile", "--cores", "1", "-n"]
    cmd += ["--group-components", "parts=2"]
    # (TMPDIR: a killed run leaves its temporary folder here)
    env = {**run_environment(), "PYTHONHASHSEED": str(seed), "TMPDIR": str(folder)}
    output = folder / "output.txt"
    deadline = time.monotonic() + 600
    with open(output, "wb") as f:
        proc = subprocess.Popen(
            cmd, cwd=folder, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        while proc.poll() is None:
            if output.stat().st_size > PRINTING_FOREVER:
                return None
            assert time.monotonic() < deadline, (
                f"the dry run neither ended nor printed forever:\n{output.read_text()}"
            )
            time.sleep(0.1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return f"{proc.returncode}\n{output.read_text()}"


def bundled_two_by_two(output: str | None) -> bool:
    """The dry run ended, said two group jobs, and each part's job once."""
    if output is None or not output.startswith("0\n"):
        return False
    parts = [line.split()[-1] for line in output.splitlines() if line.strip().startswith("output: part")]
    return output.count("Group job parts") == 2 and sorted(parts) == [f"part{i}.txt" for i in range(4)]


@pytest.mark.ahead
def test_bundled_group_components_stay_two_by_two_when_snakemake_groups_again(tmp_path):
    """Snakemake 9.27.1 grows a bundle of group components in place, and its group job factory hands
    the grown job back for its first component when the DAG's groups are made again (after a
    checkpoint): a part ends in two group jobs, and the dry run bundles four, stops with an error or
    prints one group forever (profiles/slurm's shard bundles: a dry run that filled 24 GB). With
    mend_group_components every hash seed bundles two by two; without it (the control, which shows
    the check can fail) no run of a few does. If the control passes, Snakemake bundles right itself:
    the mend can go."""
    for seed in (1, 2, 3):
        output = grouped_dry_run(tmp_path / f"mended-{seed}", mend=True, seed=seed)
        assert bundled_two_by_two(output), output
    unmended = [grouped_dry_run(tmp_path / f"own-{s}", mend=False, seed=s) for s in (2, 7)]
    assert not any(bundled_two_by_two(output) for output in unmended), "Snakemake bundles right itself"
