"""The real snakemake CLI on the demo corpus (plus a dirty dataset) in a temp working directory."""

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import matplotlib.image
import pandas as pd
import pytest
import yaml
from test_lhotse2 import check_sets, shar_sets

from sharflow.core import blocks, layout
from sharflow.core.config import validate_config
from sharflow.core.layout import DatasetFiles
from sharflow.report.dag import parse_dot, render_dag
from sharflow.shar.plan import cut_id
from sharflow.work import jobs
from sharflow.work.resume import kept_folder
from testkit import (
    README,
    REPO,
    assert_informative_codes,
    assert_same_outputs,
    codes_in_tars,
    data_files,
    demo_config,
    read_jsonl,
    run_snakemake,
    write_jsonl,
)


def test_demo_corpus_is_prepared_whole(two_datasets):
    work, _, _ = two_datasets
    prep = work / "results" / "demo" / "prepare"
    stats = json.loads((prep / "stats.json").read_text())
    demo_lines = (REPO / "demo" / "manifest.json").read_text().splitlines()
    assert stats["records_in"] == len(demo_lines) == stats["records_out"] == 56
    records = read_jsonl(prep / "prepared.jsonl")
    speakers = {r["speaker"] for r in records}
    assert len(speakers) >= 6
    assert all(s.startswith("| Language:en Dataset:demo Speaker:") for s in speakers)
    rates = {r["source_audio"]["sampling_rate"] for r in records}
    assert {16000, 22050} <= rates
    assert any(r["offset"] > 0 for r in records)
    assert stats["hours_out"] == pytest.approx(sum(r["duration"] for r in records) / 3600, abs=1e-6)


def test_dirty_dataset_accounting_through_the_workflow(two_datasets):
    work, _, manifest = two_datasets
    prep = work / "results" / "dirty" / "prepare"
    stats = json.loads((prep / "stats.json").read_text())
    rejected_lines = sum(len(f.read_text().splitlines()) for f in (prep / "rejected").glob("*.jsonl"))
    prepared_lines = len((prep / "prepared.jsonl").read_text().splitlines())
    assert stats["records_in"] == len(manifest.read_text().splitlines())
    assert (
        stats["records_in"]
        == prepared_lines + rejected_lines
        == stats["records_out"] + stats["rejected_total"]
    )
    assert all(
        r["speaker"].startswith("| Language:de Dataset:dirty ") for r in read_jsonl(prep / "prepared.jsonl")
    )
    log = (work / "logs" / "prepare" / "dirty.log").read_text()
    assert "duplicate" in log and "first: line" in log  # the human-readable summary


@pytest.mark.ahead
def test_rerun_is_a_no_op_a_new_codec_runs_alone_and_a_named_shard_reruns_alone(
    two_datasets, lhotse2, tmp_path
):
    # (that outputs do not depend on the worker count is test_crash's: its 1-core run equals this one)
    work, _, _ = two_datasets
    config = yaml.safe_load((work / "config.yaml").read_text())
    proc = run_snakemake(work, config, "-n")
    assert "Nothing to be done" in proc.stdout + proc.stderr
    again = tmp_path / "again"
    shutil.copytree(work, again, symlinks=True)  # keeps mtimes, so nothing is out of date

    # adding a codec runs only that codec's jobs and touches nothing that exists
    # (verify checks the new codes, and the report shows them)
    # (the catalog gains the codec's frames columns; the jobs that read it rerun, to the same bytes)
    rechecked = ("verify.json", "report", "catalog.parquet", "DATASET.md")
    rebuilt_same = ("buckets.yaml", "input_cfg.yaml")
    before = {
        p: (p.stat().st_mtime_ns, p.read_bytes())
        for p in (again / "results").rglob("*")
        if p.is_file() and not any(part in rechecked + rebuilt_same for part in p.parts)
    }
    same_bytes = {  # (input_cfg's absolute paths name the copy once rebuilt there)
        p: p.read_bytes().replace(str(work).encode(), str(again).encode())
        for p in (again / "results").rglob("*")
        if p.name in rebuilt_same
    }
    config["codecs"]["second"] = dict(config["codecs"]["tiny_nemo"])
    proc = run_snakemake(again, config)
    assert job_counts(proc.stdout + proc.stderr) == {
        "all": 1,
        "build_random_codec": 1,
        "codec_model": 1,
        "codes_block": 1,  # demo: shards 0-9 (codes.shards_per_job 10)
        "codes_tail2": 1,  # demo: shards 10 and 11 (a short last block)
        "codes_shard": 1,  # dirty: its one shard
        "codes_merge": 2,
        "catalog": 2,
        "buckets": 2,
        "dataset_card": 2,
        "input_cfg": 1,
        "verify": 2,
        "report": 1,
    }
    # (input_cfg points at the first codec, so it does not change)
    assert all((p.stat().st_mtime_ns, p.read_bytes()) == v for p, v in before.items())
    assert len(same_bytes) == 3 and all(p.read_bytes() == v for p, v in same_bytes.items())
    catalog = pd.read_parquet(again / "results" / "demo" / "catalog.parquet")
    assert (catalog.frames_second == catalog.frames_tiny_nemo).all() and catalog.frames_second.nunique() > 20
    assert (
        "target_codes[second]"
        in json.loads((again / "results" / "demo" / "verify.json").read_text())["fields"]
    )
    second = sorted((again / "results" / "demo" / "shar" / "codes_second" / "target_codes").glob("*.tar"))
    assert len(second) == 12
    # the same codec config and seed build the same codec: the new codes equal the first codec's
    first = again / "results" / "demo" / "shar" / "codes_tiny_nemo" / "target_codes"
    assert_informative_codes(codes_in_tars(second))
    assert [a.tobytes() for a in codes_in_tars(second)] == [
        a.tobytes() for a in codes_in_tars(sorted(first.glob("*.tar")))
    ]
    # lhotse 2 reads both codecs' codes by their indexes as lhotse 1.33 reads them (tests/test_lhotse2.py)
    check_sets(
        {
            f"demo[{codec}]": sets["demo"]
            for codec in ("tiny_nemo", "second")
            for sets in [shar_sets(again / "results", ["demo"], codec)]
        },
        lhotse2,
        tmp_path,
    )

    # a user reruns one shard by naming its file: only its block's job runs, with the same bytes
    lost = again / "results" / "demo" / "shar" / "target_audio" / "recording.000001.tar"
    lost.unlink()
    proc = run_snakemake(again, config, str(lost.relative_to(again)))
    assert job_counts(proc.stdout + proc.stderr) == {"shar_block": 1}
    assert (
        lost.read_bytes()
        == (work / "results" / "demo" / "shar" / "target_audio" / "recording.000001.tar").read_bytes()
    )


def job_counts(output: str) -> dict[str, int]:
    """The 'Job stats' table of a snakemake run, without the total."""
    table = output.split("Job stats:")[1].split("total")[0]
    rows = [line.split() for line in table.splitlines()[3:] if line.strip()]
    return {name: int(n) for name, n in rows}


def test_context_stage_in_the_workflow(two_datasets):
    work, _, _ = two_datasets
    demo = json.loads((work / "results" / "demo" / "context" / "stats.json").read_text())
    assert demo["records_in"] == demo["records_out"] == 56
    assert len(demo["parts"]) == 2  # the shipped config's context.parts
    dirty = json.loads((work / "results" / "dirty" / "context" / "stats.json").read_text())
    prepared = json.loads((work / "results" / "dirty" / "prepare" / "stats.json").read_text())["records_out"]
    assert dirty["records_in"] == prepared == dirty["records_out"] + dirty["rejected_total"]
    assert dirty["rejected"].get("no_context_candidate") == 1  # speaker 12 has one utterance


def test_text_stage_in_the_workflow(two_datasets):
    """lang and tokenizer_names on every cut (NeMo's tokenizer for the dataset's language), NeMo's spoken
    form as normalized_text, the grammars built once into the session's cache (outside results/)."""
    work, _, _ = two_datasets
    for ds, lang, names, source in (
        ("demo", "en", ["english_phoneme"], "normalizer"),
        ("dirty", "de", ["german_phoneme"], "text"),  # normalized_text: text (conftest)
    ):
        files = DatasetFiles(str(work / "results" / ds))
        stats = json.loads(Path(files.text_stats).read_text())
        prepared = json.loads(Path(files.prepare_stats).read_text())
        assert (
            stats["records_in"] == prepared["records_out"] == stats["records_out"] + stats["rejected_total"]
        )
        assert stats["normalized_text_source"] == {source: stats["records_out"]} and stats["languages"] == {
            lang: stats["records_out"]
        }
        cut_files = sorted((Path(files.shar_dir) / "cuts").glob("*.jsonl"))
        cuts = [json.loads(line) for f in cut_files for line in f.read_bytes().splitlines()]
        assert cuts and all(
            c["custom"]["lang"] == lang and c["custom"]["tokenizer_names"] == names for c in cuts
        )
        sources = {c["supervisions"][0]["custom"]["normalized_text_source"] for c in cuts}
        assert sources == {source} and all(c["supervisions"][0]["language"] == lang for c in cuts)
    normalizer = json.loads((work / layout.text_normalizer("en")).read_text())
    assert normalizer["available"] and normalizer["folder"].startswith(os.environ["SHARFLOW_CACHE_DIR"])
    assert not (work / layout.text_normalizer("de")).exists()  # dirty reads its text as it is
    assert "spoken form" not in (work / "logs" / "text_merge" / "demo.log").read_text()  # no symbols left
    # English is measured by default (english_phoneme over the dictionary made from cmudict): the card's
    # line on text gives a figure over measured cuts only; German's phoneme tokenizer cannot be built
    # here, and the cuts not measured stand first
    coverage = json.loads(Path(DatasetFiles(str(work / "results" / "demo")).text_stats).read_text())[
        "coverage"
    ]
    assert coverage["unmeasured"] == 0 and coverage["measured"] == 56
    cards = {ds: (work / "results" / ds / "DATASET.md").read_text() for ds in ("demo", "dirty")}
    first = {ds: card.split("## Text the model reads\n\n")[1].splitlines()[0] for ds, card in cards.items()}
    assert re.fullmatch(r"- \*\*0 of (\d+) train cuts lose characters to their tokenizers\*\*", first["demo"])
    assert first["dirty"].startswith("- **not measured: ")


def test_shar_stage_in_the_workflow(two_datasets):
    from lhotse import CutSet

    work, _, _ = two_datasets
    stats = json.loads((work / "results" / "demo" / "shar_stats.json").read_text())
    assert stats["cuts"] == 56 and stats["shards"] == 12  # testkit.SMALL_SHARDS: shard_size 5
    shar = work / "results" / "demo" / "shar"
    assert sorted(p.name for p in shar.iterdir()) == [
        "codes_tiny_nemo",
        "context_audio",
        "cuts",
        "target_audio",
    ]
    fields = {f: data_files(shar / f) for f in ("cuts", "target_audio", "context_audio")}
    assert [len(v) for v in fields.values()] == [12, 12, 12]
    assert len(list(CutSet.from_shar(fields=fields))) == 56


def test_codes_stage_in_the_workflow(two_datasets):
    from lhotse import CutSet

    work, _, _ = two_datasets
    stats = json.loads((work / "results" / "demo" / "codes_stats" / "tiny_nemo.json").read_text())
    assert stats["cuts"] == 56 and stats["shards"] == 12 and stats["dtype"] == "int16"
    shar = work / "results" / "demo" / "shar"
    fields = {f: data_files(shar / f) for f in ("cuts", "target_audio")}
    fields.update({f: data_files(shar / "codes_tiny_nemo" / f) for f in ("target_codes", "context_codes")})
    cuts = list(CutSet.from_shar(fields=fields))
    assert len(cuts) == 56 and all(c.target_codes.load().shape[0] == 8 for c in cuts)
    # the demo codec's codes carry information: every codebook takes >= 64 values, and cuts of
    # different text never share a code sequence (the 56 demo texts are distinct)
    texts = {c.supervisions[0].text for c in cuts}
    assert len(texts) == 56
    assert_informative_codes([c.target_codes.load() for c in cuts], min_distinct=64)
    verify = json.loads((work / "results" / "demo" / "verify.json").read_text())
    assert verify["shards_with_constant_codebooks"] == {
        "target_codes[tiny_nemo]": 0,
        "context_codes[tiny_nemo]": 0,
    }
    log = (work / "logs" / "build_random_codec" / "tiny_nemo.log").read_text()
    assert "RANDOMLY INITIALISED" in log
    # the codec is loaded once per rank and job (one rank here): a block of 10 shards, one job for
    # the short last block (10, 11) and one for the dirty dataset's one shard
    logs = {
        p.relative_to(work / "logs").as_posix(): p.read_text()
        for p in (work / "logs").glob("codes_*/*/*/*.log")
    }
    assert sorted(logs) == [
        "codes_block/demo/tiny_nemo/00000.log",
        "codes_shard/dirty/tiny_nemo/000000.log",
        "codes_tail2/demo/tiny_nemo/00001.log",
    ]
    assert all(text.count("codec tiny_nemo loaded on cpu") == 1 for text in logs.values()), logs
    block = logs["codes_block/demo/tiny_nemo/00000.log"]
    assert block.count("codes tiny_nemo, shard 0000") == 10 and "shards 000000-000009 (10): " in block
    assert re.search(r"start-up [\d.]+ s \(process [\d.]+ s, framework import [\d.]+ s, model restore", block)
    # the quality models (and the context stage's speaker embedder, in the same pass) too: at most
    # once per rank and job (a rank with no records loads none); the context parts load no model,
    # they read the quality parts' embeddings
    for rule, loaded in (
        ("quality_part", r"quality models loaded on .*speaker embedder ge2e"),
        ("context_part", r"speaker embeddings of ge2e read from \S+/quality/embeddings.npy"),
    ):
        part_logs = [p.read_text() for p in (work / "logs" / rule).rglob("*.log")]
        assert part_logs
        for text in part_logs:
            ranks = re.search(r"records on ranks \[(.*)\]", text).group(1).split(", ")
            assert 1 <= len(re.findall(loaded, text)) <= len(ranks), text


def test_training_hand_off_in_the_workflow(two_datasets):
    work, _, _ = two_datasets
    cfg = yaml.safe_load((work / "results" / "input_cfg.yaml").read_text())
    assert [e["tags"]["dataset"] for e in cfg["input_cfg"]] == ["demo", "dirty"]
    demo = cfg["input_cfg"][0]
    assert demo["shar_path"]["target_codes"].endswith(
        "codes_tiny_nemo/target_codes/codes.{000000..000011}.tar"
    )
    assert demo["weight"] == pytest.approx(
        json.loads((work / "results" / "demo" / "shar_stats.json").read_text())["hours"]
    )
    assert cfg["use_bucketing"] and len(cfg["bucket_duration_bins"]) == cfg["num_buckets"] - 1
    buckets = yaml.safe_load((work / "results" / "demo" / "buckets.yaml").read_text())
    assert buckets["cuts"] == 56 and len(buckets["bucket_duration_bins_2d"]) == 2 * buckets["num_buckets"]


@pytest.mark.ahead
def test_verify_and_report_in_the_workflow(two_datasets, tmp_path, chromium):
    work, _, _ = two_datasets
    for ds, cuts in (("demo", 56), ("dirty", None)):
        verify = json.loads((work / "results" / ds / "verify.json").read_text())
        shar = json.loads((work / "results" / ds / "shar_stats.json").read_text())
        assert verify["ok"] and verify["cuts"] == shar["cuts"] == (cuts or shar["cuts"])
        assert verify["shards"] == len(
            blocks.planned_shards(DatasetFiles(str(work / "results" / ds)).shard_plan)
        )
    rows = [
        line.split("\t")
        for line in (work / "results" / "report" / "summary.tsv").read_text().splitlines()[1:]
    ]
    assert {r[1] for r in rows} == {"demo", "dirty"}
    assert all(int(r[2]) == int(r[3]) + int(r[4]) for r in rows)
    assert any(r[0] == "prepare" and r[1] == "dirty" and int(r[4]) > 0 for r in rows)

    # snakemake's own report, opened in a headless Chromium: every plot is on the screen
    config = yaml.safe_load((work / "config.yaml").read_text())
    run_snakemake(work, config, "--report", str(tmp_path / "report.html"))
    from sharflow.report.view import check_report

    found = check_report(
        str(tmp_path / "report.html"),
        str(tmp_path / "screens"),
        str(work / "results" / "report"),
        browser=chromium,
    )
    plots = {"durations", "buckets", "similarity", "load", "rejects", "text", "quality", "quality_kept"}
    assert {k.rsplit("/", 1)[1].split(".")[0] for k in found} == plots | {"summary", "tables", "DATASET"}
    assert sum(k.endswith("DATASET.md") for k in found) == 2  # one card per dataset
    for key, info in found.items():
        if "colour" in info:  # the plot's main colour covers a good part of its area on screen
            assert info["screen_pixels"] > 0.2 * info["plot_pixels"], (key, info)


@pytest.mark.ahead
def test_damaged_shard_fails_verify_then_a_targeted_rerun_repairs_it(two_datasets, tmp_path):
    work, _, _ = two_datasets
    copy = tmp_path / "copy"
    shutil.copytree(work, copy, symlinks=True)  # keeps mtimes, so nothing is out of date
    config = yaml.safe_load((work / "config.yaml").read_text())
    codes = copy / "results" / "demo" / "shar" / "codes_tiny_nemo" / "context_codes" / "codes.000002.tar"
    good = codes.read_bytes()
    # bytes damaged in place (a bad disk block): the size is right, so only verify's reading finds it
    # (a file of another size is remade by any run: test_a_lost_or_damaged_shard_file_is_found...)
    codes.write_bytes(good[:1024] + bytes(len(good) - 2048) + good[-1024:])
    proc = run_snakemake(
        copy, config, "--forcerun", "verify", check=False
    )  # docs (verify): re-check the files
    assert proc.returncode != 0
    log = (copy / "logs" / "verify" / "demo.log").read_text()
    assert (
        "dataset demo, field context_codes[tiny_nemo], shard 2" in log and str(codes.relative_to(copy)) in log
    )
    assert "verify" in proc.stderr and "logs/verify/demo.log" in proc.stderr

    assert_informative_codes(
        codes_in_tars([codes.with_name("codes.000001.tar")]), distinct_arrays=False, min_distinct=32
    )
    every_codes_file = sorted((copy / "results").glob("*/shar/codes_*/*/*.tar"))
    before = {p: p.read_bytes() for p in every_codes_file if p != codes}
    codes.unlink()  # docs (verify): delete the named file and ask for it
    proc = run_snakemake(copy, config, str(codes.relative_to(copy)))
    # shard 2 is in the block of shards 0-9: that one job reruns, and every codes file is as it was
    assert job_counts(proc.stdout + proc.stderr) == {"codes_block": 1}
    assert "dataset=demo, codec=tiny_nemo, block=00000" in proc.stdout + proc.stderr
    assert codes.read_bytes() == good
    assert all(p.read_bytes() == data for p, data in before.items()) and len(before) == 2 * 13 - 1
    proc = run_snakemake(copy, config)
    assert job_counts(proc.stdout + proc.stderr) == {
        "all": 1,
        "codes_merge": 1,
        "catalog": 1,
        "buckets": 1,
        "dataset_card": 1,
        "input_cfg": 1,
        "verify": 1,
        "report": 1,
    }


def folder_digest(root: Path) -> dict[str, tuple]:
    """{path: (size, mtime, content digest)} of every file and folder under `root`, but Snakemake's own
    bookkeeping (.snakemake/: its I/O cache and log of each invocation, which Snakemake writes on a
    dry run too) and Python's byte-code caches."""
    out = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in (".snakemake", "__pycache__"))
        for name in [*dirs, *files]:
            path = Path(folder, name)
            st = path.lstat()
            digest = hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest() if path.is_file() else ""
            out[str(path.relative_to(root))] = (st.st_size if path.is_file() else 0, st.st_mtime_ns, digest)
    return out


LOOKS = (("-n",), ("--dag",), ("--rulegraph",), ("--summary",), ("--list-changes", "params"))


@pytest.mark.ahead
def test_looking_changes_nothing_and_the_run_repairs_what_the_look_named(two_datasets, tmp_path):
    """A finished run broken four ways: shard files lost or cut short (of a block job, a tail job and
    a one-shard job, shar and codes), a job record deleted, a cost plan made for another config, a
    manifest line changed. Each look (-n, --dag, --rulegraph, --summary, --list-changes params) leaves
    every path, size, mtime and byte of the working folder as it was (Snakemake's own .snakemake/
    aside); the dry run names each broken file and the job that will run because of it, and the
    plan's changed keys. The real run then makes exactly those jobs (and what follows) and restores
    every file byte for byte as a clean run made it, verify runs again and passes, and the run after
    is a no-op. Naming a lost file of any kind of job rebuilds it alone."""
    from sharflow.plan.key import plan_key

    work, _, dirty_manifest = two_datasets
    copy = tmp_path / "copy"
    shutil.copytree(work, copy, symlinks=True)  # keeps mtimes, so nothing is out of date
    config = yaml.safe_load((work / "config.yaml").read_text())
    demo, dirty = copy / "results" / "demo" / "shar", copy / "results" / "dirty" / "shar"
    (demo / "target_audio" / "recording.000003.tar").unlink()  # shar_block 00000 (shards 0-9)
    tail = demo / "codes_tiny_nemo" / "context_codes" / "codes.000011.tar"  # codes_tail2 00001 (10-11)
    tail.write_bytes(tail.read_bytes()[:2048])
    (dirty / "cuts" / "cuts.000000.jsonl").unlink()  # shar_shard 000000 (dirty's one shard)
    record = copy / "results" / "demo" / "shar_jobs" / "shards-000010-000011.json"  # shar_tail2 00001
    record.unlink()
    plan = copy / "results" / "plan"  # a plan made for another config: not used, and said so
    plan.mkdir(parents=True)
    (plan / "resources.yaml").write_text(yaml.safe_dump({"shar_block": {"mem_mb": 1000, "runtime": 10}}))
    other = validate_config(
        yaml.safe_load(yaml.safe_dump({**config, "shar": {**config["shar"], "shard_size": 64}})),
        REPO / "config" / "schema.yaml",
    )
    (plan / "plan.json").write_text(json.dumps({"key": plan_key(other, {})}))
    lines = dirty_manifest.read_text().splitlines(keepends=True)  # one line written another way
    changed = copy / "dirty_manifest.json"
    changed.write_text(
        json.dumps(json.loads(lines[0]), indent=None, separators=(",", ":")) + "\n" + "".join(lines[1:])
    )
    looked = {
        **config,
        "datasets": {
            **config["datasets"],
            "dirty": {**config["datasets"]["dirty"], "manifest": str(changed)},
        },
    }
    (copy / "config.yaml").write_text(yaml.safe_dump(looked, sort_keys=False))
    verified = (copy / "results" / "demo" / "verify.json").stat().st_mtime_ns

    before = folder_digest(copy)
    said = {}
    for look in LOOKS:
        proc = run_snakemake(copy, looked, *look)
        assert folder_digest(copy) == before, f"snakemake {' '.join(look)} changed the folder"
        said[look] = proc.stdout + proc.stderr
    dry = said[("-n",)]
    job = "results/demo/shar_jobs/shards-000000-000009.json"
    assert f"recording.000003.tar is missing: its job ({job}) runs again" in dry
    assert "codes.000011.tar is 2048 bytes" in dry
    # (dirty's shards come from a plan made again after its changed manifest: named below, without it)
    assert "the cost plan (results/plan/resources.yaml) was made for another config" in dry
    assert "shar.shard_size: 64 -> 5" in dry
    assert re.search(r"rule prepare:\n(.*\n)*?\s+wildcards: dataset=dirty", dry)  # the changed manifest
    assert "sharflow: results/demo/shar/target_audio/recording.000003.tar is missing" in said[("--dag",)]

    # the real run (on the manifest as it was): exactly the broken jobs and what follows
    proc = run_snakemake(copy, config, "-n")
    assert "results/dirty/shar/cuts/cuts.000000.jsonl is missing" in proc.stdout + proc.stderr
    assert job_counts(proc.stdout + proc.stderr) == {
        "shar_block": 1,
        "shar_tail2": 1,  # its record deleted
        "shar_shard": 1,
        "codes_block": 1,  # its shards' shar job ran again
        "codes_tail2": 1,
        "codes_shard": 1,
        "shar_merge": 2,
        "codes_merge": 2,
        "catalog": 2,
        "buckets": 2,
        "dataset_card": 2,
        "verify": 2,
        "input_cfg": 1,
        "report": 1,
        "all": 1,
    }
    proc = run_snakemake(copy, config)
    assert "was made for another config" in proc.stdout + proc.stderr  # the run says it once too
    assert_same_outputs(work / "results", copy / "results", ["demo", "dirty"], "repaired vs first run")
    assert (copy / "results" / "demo" / "verify.json").stat().st_mtime_ns > verified  # checked again
    again = run_snakemake(copy, config, "-n")
    assert "Nothing to be done" in again.stdout + again.stderr

    # (a named file of a full block: test_rerun_is_a_no_op_..., of a codes block: test_damaged_shard_...)
    for lost, rule in (
        (demo / "cuts" / "cuts.000010.jsonl", "shar_tail2"),
        (demo / "cuts" / "cuts.000011.jsonl.idx", "shar_tail2"),  # an index is its shard's too
        (dirty / "target_audio" / "recording.000000.tar", "shar_shard"),
    ):
        good = lost.read_bytes()
        lost.unlink()
        proc = run_snakemake(copy, config, str(lost.relative_to(copy)))
        assert job_counts(proc.stdout + proc.stderr) == {rule: 1} and lost.read_bytes() == good, rule


def most_jobs_said(output: str) -> dict[str, tuple[int, int, list[int]]]:
    """{dataset: (Shar sets, shar jobs, [codes jobs per codec])} of a dry run's summary before the plan."""
    found = {}
    for m in re.finditer(
        r"^  (\S+)\s+([\d,]+)  .+?\)\s+(\d+)\s+([\d,]+)\s+([\d,]+)((?:\s+[\d,]+)+)$", output, re.M
    ):
        codes = [int(c.replace(",", "")) for c in m.group(6).split()]
        found[m.group(1)] = (int(m.group(3)), int(m.group(5).replace(",", "")), codes)
    return found


def assert_fresh_dry_run_bounds_the_run(work: Path, config: dict, fresh: Path) -> dict:
    """A dry run in a fresh folder (nothing prepared) prints, per dataset and codec, the most shar and
    codes jobs the run can make; the finished run in `work` made no more than that. What it said
    (most_jobs_said)."""
    dry = run_snakemake(fresh, config, "-n")
    said = dry.stdout + dry.stderr
    assert "the shar and codes jobs come after the shard plan" in said and "snakemake plan" in said
    # the context parts read the quality parts' embeddings: no GPU rule of their own
    assert "GPU rules in the counts below: quality_part (device: auto); and the codes jobs" in said
    most = most_jobs_said(said)
    assert set(most) == set(config["datasets"]), said[-3000:]
    for ds, (sets, shar, codes) in most.items():
        made = list((work / "results").glob(f"{ds}/**/shar_jobs/shards-*.json"))
        coded = list((work / "results").glob(f"{ds}/**/codes_jobs/*/shards-*.json"))
        assert 1 <= len(made) <= shar and 1 <= len(coded) <= sum(codes), (
            ds,
            len(made),
            shar,
            len(coded),
            codes,
        )
        assert len({p.parent.parent for p in made}) <= sets
    return most


def test_a_fresh_dry_run_says_how_many_shard_jobs_will_come_after_the_plan(two_datasets, tmp_path):
    work, _, _ = two_datasets
    assert_fresh_dry_run_bounds_the_run(
        work, yaml.safe_load((work / "config.yaml").read_text()), tmp_path / "f"
    )


@pytest.mark.ahead
def test_a_grown_and_corrected_corpus_remakes_only_the_new_shards_and_the_corrected_cuts(
    two_datasets, tmp_path
):
    """The demo's manifest, after a finished run, grown by six records (new spans of its own files, so
    new cut ids) and with two records' texts corrected (one in the block job of shards 0-9, one in
    the job of shards 10-11). The new records are a new generation of shards (from shard 20). The
    corrected records' shards, and those of the records that hold one of them as context (its text
    is in their cuts), get new cuts files, catalog fragments and stats; every other file of the
    run's Shar stays as it was (same inode, same bytes), and so does every audio and codes file: no
    audio is encoded again, no codes are. Only the new records and the corrected ones are measured
    again, and NeMo's dataloader reads every cut of both generations, with the new texts."""
    import torch
    from lhotse import CutSet
    from nemo.collections.common.data.lhotse.dataloader import get_lhotse_dataloader_from_config
    from omegaconf import OmegaConf

    work, _, _ = two_datasets
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(work), str(copy)], check=True)  # mtimes and hard links (.kept) kept
    config = yaml.safe_load((work / "config.yaml").read_text())
    records = read_jsonl(Path(config["datasets"]["demo"]["manifest"]))
    longer = [r for r in records if "offset" not in r and r["duration"] > 4.0][:6]
    grown = [{**r, "offset": 0.25, "duration": round(r["duration"] - 0.5, 3)} for r in longer]
    results = copy / "results" / "demo"
    catalog = pd.read_parquet(results / "catalog.parquet")
    shard_of = {(row.source_file, row.offset): row.shard for row in catalog.itertuples()}
    first = next(r for r in records if shard_of.get((r["audio_filepath"], 0.0), 99) < 10)
    second = next(r for r in records if shard_of.get((r["audio_filepath"], 0.0)) in (10, 11))
    fixed = {}
    for r in (first, second):
        r["text"] = fixed[r["audio_filepath"]] = r["text"].rstrip(".") + "!"
    manifest = write_jsonl(tmp_path / "grown.json", records + grown)
    config["datasets"]["demo"]["manifest"] = str(manifest)
    corrected = {shard_of[(f, 0.0)] for f in fixed}
    corrected |= {row.shard for row in catalog.itertuples() if row.context_file in fixed}
    shar = {p: (p.stat().st_ino, p.read_bytes()) for p in (results / "shar").rglob("*") if p.is_file()}
    run_snakemake(copy, config, "--until", "shar_plan")  # the plan made: a look names what will be remade
    dry = run_snakemake(copy, config, "-n")
    for shard in corrected:
        assert f"sharflow: demo: shard {shard} is written again" in dry.stdout + dry.stderr
    assert "its cuts file, catalog fragment and stats only: its audio and codes are kept" in dry.stdout
    proc = run_snakemake(copy, config)
    log = proc.stdout + proc.stderr
    ran = re.findall(r"^(?:local)?rule (\w+):", log, re.M)  # (also after the plan)
    made = sorted(r for r in ran if r.startswith(("shar_block", "shar_tail", "shar_shard", "codes_")))
    # the new shards 20-21; the corrected blocks 0-9 and 10-11, shar and codes, all kept but the cuts
    assert made == [
        "codes_block",
        "codes_merge",
        "codes_tail2",
        "codes_tail2",
        "shar_block",
        "shar_tail2",
        "shar_tail2",
    ]
    parts = [json.loads(p.read_text()) for p in (results / "quality" / "parts").glob("*.stats.json")]
    assert sum(p["measured"] for p in parts) == 6 + 2  # the new records and the corrected ones
    assert sum(p["reused"] for p in parts) == sum(p["records"] for p in parts) - 8 > 0
    changed = {p for p, v in shar.items() if (p.stat().st_ino, p.read_bytes()) != v}
    assert changed and {p.parent.name for p in changed} <= {"cuts"}, changed
    assert {int(p.name.split(".")[1]) for p in changed} == corrected and len(shar) == 12 * 5 * 2  # + indexes
    plan = json.loads((results / "shard_plan.json").read_text())
    assert [(g["first"], g["shards"]) for g in plan["generations"]] == [(0, 12), (20, 2)]
    assert {c["shard"] for c in plan["corrected"]} == corrected
    assert sorted(p.name for p in (results / "shar" / "cuts").iterdir())[-2:] == [
        "cuts.000021.jsonl",
        "cuts.000021.jsonl.idx",
    ]

    class Texts(torch.utils.data.Dataset):
        def __getitem__(self, batch: CutSet):
            assert all(c.has_custom("target_codes") and c.has_custom("context_audio") for c in batch)
            return [(c.id, c.supervisions[0].text) for c in batch]

    cfg = yaml.safe_load((copy / "results" / "input_cfg.yaml").read_text())
    loader_cfg = {
        **cfg,
        "batch_size": 8,
        "num_workers": 0,
        "seed": 0,
        "force_finite": True,
        "use_bucketing": False,
    }
    loader = get_lhotse_dataloader_from_config(
        OmegaConf.create(loader_cfg), global_rank=0, world_size=1, dataset=Texts()
    )
    seen = [cut for batch in loader for cut in batch]
    catalogs = [pd.read_parquet(copy / "results" / ds / "catalog.parquet") for ds in ("demo", "dirty")]
    assert sorted(c[0] for c in seen) == sorted(cut for c in catalogs for cut in c.cut_id)
    assert len(catalogs[0]) == 56 + 6
    texts = dict(seen)
    assert [texts[cut_id({"offset": 0.0, **r})] for r in (first, second)] == list(fixed.values())
    assert all(t.endswith("!") for t in fixed.values())
    assert json.loads((results / "verify.json").read_text())["shards"] == 14


def test_dry_run_dag_renders(tmp_path):
    proc = run_snakemake(tmp_path / "w", demo_config(), "--rulegraph")
    nodes, edges = parse_dot(proc.stdout)
    # per-shard jobs join the graph once the shar_plan checkpoint has run (see the next test)
    assert {
        "all",
        "prepare",
        "context_plan",
        "context_part",
        "context_merge",
        "shar_plan",
        "shar_merge",
        "codes_merge",
        "buckets",
        "input_cfg",
    } <= set(nodes.values())
    assert edges
    out = tmp_path / "dag.png"
    assert render_dag(proc.stdout, out, engine="matplotlib") == "matplotlib"
    image = matplotlib.image.imread(out)
    drawn = (image[..., :3] < 0.9).any(axis=-1)  # non-white pixels: boxes, labels, arrows
    assert image.shape[0] > 100 and 0.002 < drawn.mean() < 0.5
    if shutil.which("dot"):
        svg = tmp_path / "dag.svg"
        render_dag(proc.stdout, svg, engine="dot")
        assert "prepare" in svg.read_text()


def test_rule_graph_after_the_plan_shows_shard_jobs(two_datasets):
    work, _, _ = two_datasets
    proc = run_snakemake(work, yaml.safe_load((work / "config.yaml").read_text()), "--rulegraph")
    rules = set(parse_dot(proc.stdout)[0].values())
    assert {"shar_block", "shar_tail2", "codes_block", "codes_tail2", "build_random_codec"} <= rules


def test_bad_config_fails_at_parse_time_naming_the_key(tmp_path):
    config = demo_config(prepare={"workers": -3})
    proc = run_snakemake(tmp_path / "w", config, "-n", check=False)
    assert proc.returncode != 0
    assert "prepare.workers" in proc.stdout + proc.stderr


def test_job_error_is_readable(tmp_path):
    config = demo_config()
    config["datasets"]["demo"]["audio_root"] = str(tmp_path / "missing")
    proc = run_snakemake(tmp_path / "w", config, check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "sharflow: error: dataset 'demo': audio_root" in out
    assert "fix datasets.demo.audio_root" in out


def test_a_finished_run_holds_exactly_the_files_layout_names(two_datasets):
    work, _, _ = two_datasets
    config = validate_config(
        yaml.safe_load((work / "config.yaml").read_text()), REPO / "config" / "schema.yaml"
    )
    codecs = list(config["codecs"])
    expected, folders = set(), []
    for ds in ("demo", "dirty"):
        files = DatasetFiles(str(work / "results" / ds))
        shards = blocks.planned_shards(files.shard_plan)
        expected |= {
            files.prepared,
            files.prepare_stats,
            files.text_records,
            files.text_stats,
            files.quality_metrics,
            files.quality_embeddings,
            files.quality_metrics_stats,
            files.quality_kept,
            files.quality_stats,
            files.context_plan,
            files.with_context,
            files.context_stats,
            files.shard_plan,
            files.shar_stats,
            files.buckets,
            files.verify,
            files.catalog,
            files.dataset_card,
        }
        expected |= {
            path for p in range(config["context"]["parts"]) for path in files.context_part(p).named().values()
        }
        expected |= {
            path for p in range(config["quality"]["parts"]) for path in files.quality_part(p).named().values()
        }
        text_parts = [files.text_part(p) for p in range(config["text"]["parts"])]
        expected |= {path for part in text_parts for path in (part.records, part.stats)}
        folders += [part.rejected for part in text_parts]
        expected |= {path for s in shards for path in files.shard(s).named().values()}
        expected |= {path for c in codecs for s in shards for path in files.codes(c, s).named().values()}
        expected |= {files.codes_stats(c) for c in codecs}
        planned = jobs.plan_jobs(len(shards), config["shar"]["shards_per_job"])  # one record per job
        expected |= {files.shar_job(key, blocks.block_size(key), n) for key, n in planned}
        expected |= {files.shar_input(key, blocks.block_size(key), n) for key, n in planned}  # its records
        expected |= {f"{files.shar_inputs}/plan.json"}  # the plan's copy, kept for a grown corpus's plan
        records = [files.shar_job(key, blocks.block_size(key), n) for key, n in planned]
        planned = jobs.plan_jobs(len(shards), config["codes"]["shards_per_job"])
        records += [files.codes_job(c, key, blocks.block_size(key), n) for c in codecs for key, n in planned]
        expected |= set(records)
        folders += [str(kept_folder(record)) for record in records]  # each job's kept shards (work.resume)
        folders += [
            files.prepare_rejected,
            files.text_rejected,
            files.quality_rejected,
            files.context_rejected,
            files.shar_rejected,
        ]
    expected |= {str(work / layout.codec_model(c)) for c in codecs} | {
        str(work / layout.codec_spec(c)) for c in codecs
    }
    expected |= {str(work / layout.INPUT_CFG), str(work / layout.text_normalizer("en"))}
    expected |= {
        str(work / layout.REPORT_DIR / name)
        for name in (
            "durations.png",
            "buckets.png",
            "similarity.png",
            "load.png",
            "rejects.png",
            "text.png",
            "quality.png",
            "quality_kept.png",
            "quality.html",
            "quality.tsv",
            "summary.html",
            "summary.tsv",
            "tables.html",
            "speakers.tsv",
            "buckets.tsv",
        )
    }
    found = {str(p) for p in (work / "results").rglob("*") if p.is_file()}
    in_folders = {p for p in found if any(p.startswith(folder + "/") for folder in folders)}
    assert in_folders  # the dirty dataset has rejects
    assert found - in_folders == expected


def test_catalog_in_the_workflow_answers_the_readmes_questions(two_datasets):
    """The catalog of each dataset holds its verified cuts, and the README's pandas lines run on it."""
    work, _, _ = two_datasets
    for ds in ("demo", "dirty"):
        files = DatasetFiles(str(work / "results" / ds))
        catalog = pd.read_parquet(files.catalog)
        verify = json.loads(Path(files.verify).read_text())
        assert len(catalog) == verify["cuts"] == verify["catalog_rows"]
        assert catalog.duration.sum() / 3600 == pytest.approx(verify["hours"], abs=1e-5)
        assert "# " + ds in Path(files.dataset_card).read_text()
    code = README.read_text().split("## Explore your dataset")[1].split("```python")[1].split("```")[0]
    scope = {}
    with contextlib.chdir(work):
        exec(code, scope)
    demo = pd.read_parquet(work / "results" / "demo" / "catalog.parquet")
    hours = scope["hours_per_speaker"]
    assert len(hours) == demo.speaker.nunique() >= 4 and list(hours) == sorted(hours, reverse=True)
    assert hours.sum() == pytest.approx(demo.duration.sum() / 3600)
    worst = scope["worst_context"]
    assert len(worst) == 20 and worst.context_similarity.is_monotonic_increasing
    assert worst.context_similarity.max() <= demo.context_similarity.sort_values().iloc[20]
    below = demo.context_similarity < 0.9
    assert 0 < scope["dropped"] == below.sum() < len(demo)
    assert scope["dropped_hours"] == pytest.approx(demo.duration[below].sum() / 3600)


def test_quality_measures_every_record_into_the_cuts_and_a_new_threshold_reruns_only_the_filter(
    two_datasets, tmp_path
):
    from lhotse import CutSet

    from sharflow.shar.plan import cut_id

    work, _, _ = two_datasets
    for ds in ("demo", "dirty"):
        files = DatasetFiles(str(work / "results" / ds))
        prepared = json.loads(Path(files.prepare_stats).read_text())
        text = json.loads(Path(files.text_stats).read_text())
        quality = json.loads(Path(files.quality_stats).read_text())
        context = json.loads(Path(files.context_stats).read_text())
        assert text["records_in"] == prepared["records_out"]
        assert quality["records_in"] == text["records_out"] == len(read_jsonl(Path(files.quality_metrics)))
        assert quality["records_out"] + quality["rejected_total"] == quality["records_in"]
        assert context["records_in"] == quality["records_out"]
    files = DatasetFiles(str(work / "results" / "demo"))
    metrics = {cut_id(r): r for r in read_jsonl(Path(files.quality_kept))}  # records with their metrics
    assert len({r["dnsmos_ovrl"] for r in metrics.values()}) > 40  # measured, not constant
    cuts = CutSet.from_file(sorted((Path(files.shar_dir) / "cuts").iterdir())[0])
    for cut in cuts:
        source = metrics[cut.id]
        custom = cut.supervisions[0].custom
        assert {m: custom[m] for m in ("dnsmos_ovrl", "speech_ratio", "bandwidth_hz")} == {
            m: source[m] for m in ("dnsmos_ovrl", "speech_ratio", "bandwidth_hz")
        }
    catalog = pd.read_parquet(files.catalog)
    assert catalog.dnsmos_ovrl.notna().all() and catalog.speech_ratio.gt(0.3).all()

    # a new threshold: only quality_filter and what follows it would run, never quality_part
    copy = tmp_path / "copy"
    shutil.copytree(work, copy, symlinks=True)
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config["quality"]["filters"] = {"speech_ratio": {"min": 0.001}, "dnsmos_ovrl": {"min": 2.0}}
    counts = job_counts(run_snakemake(copy, config, "-n").stdout)
    assert counts["quality_filter"] == 2 and counts["context_part"] == 2 * config["context"]["parts"]
    assert not {"prepare", "quality_part", "quality_merge"} & set(counts)


@pytest.mark.ahead
def test_asr_check_in_the_workflow(tiny_asr, tmp_path):
    """Four degraded-demo records to the quality filter with a tiny random NeMo ASR model; the
    manifest's own cer is kept aside; a cer threshold reruns only the filter; random_from_config
    puts the model's build in the plan (the loud log: test_asr)."""
    models = REPO / "config" / "models"
    records = read_jsonl(REPO / "demo" / "degraded" / "manifest.json")
    records = [
        r for r in records if any(k in r["audio_filepath"] for k in ("slt_005", "silence_only", "noise"))
    ]
    manifest = tmp_path / "manifest.json"
    manifest.write_text("".join(json.dumps({**r, "cer": 0.01}) + "\n" for r in records))
    filters = {"speech_ratio": {"min": 0.001}, "cer": {"max": 50.0}}
    config = demo_config(
        degraded=True, quality={"parts": 1, "workers": 1, "asr": {"model": str(tiny_asr)}, "filters": filters}
    )
    config["datasets"] = {"degraded": {**config["datasets"]["degraded"], "manifest": str(manifest)}}
    work = tmp_path / "w"
    files = DatasetFiles(str(work / "results" / "degraded"))
    target = str(Path(files.quality_stats).relative_to(work))
    run_snakemake(work, config, target)
    kept = read_jsonl(Path(files.quality_kept))
    stats = json.loads(Path(files.quality_stats).read_text())
    assert stats["records_in"] == len(records) == 4 == len(kept) + stats["rejected_total"]
    assert stats["rejected"] == {"quality_speech_ratio": 1}  # the silent one
    # slt_005 and slt_005_wrong_text hold the same audio: one transcript, two references, two cers
    assert len({r["asr_text"] for r in kept}) == 2 and len({r["cer"] for r in kept}) == 3
    assert all(r["manifest_cer"] == 0.01 and r["cer"] != 0.01 for r in kept)
    assert json.loads(Path(files.quality_metrics_stats).read_text())["asr_model"] == str(tiny_asr)

    config["quality"]["filters"]["cer"] = {"max": 1.0}
    assert job_counts(run_snakemake(work, config, target, "-n").stdout) == {"quality_filter": 1}
    config["quality"]["asr"] = {"random_from_config": str(models / "tiny_asr.yaml")}
    planned = job_counts(run_snakemake(work, config, target, "-n").stdout)
    assert planned == {"build_random_asr": 1, "quality_part": 1, "quality_merge": 1, "quality_filter": 1}


@pytest.mark.ahead
def test_blocks_of_a_hundred_end_in_blocks_of_ten_then_one_job_for_the_rest(two_datasets, tmp_path):
    """shar and codes shards_per_job 100 over a plan of 123 shards (the run's plan, rewritten; a dry
    run): one job for shards 0-99, <stage>_block10 for 100-109 and 110-119, one job for 120-122."""
    work, _, _ = two_datasets
    copy = tmp_path / "copy"
    shutil.copytree(work, copy, symlinks=True)  # keeps mtimes
    config = yaml.safe_load((work / "config.yaml").read_text())
    config["codes"]["shards_per_job"] = config["shar"]["shards_per_job"] = 100
    plan = copy / DatasetFiles("results/demo").shard_plan
    stat = plan.stat()
    data = json.loads(plan.read_text())
    data.update(
        num_shards=123,
        shards_per_job=100,
        generations=[{"first": 0, "shards": 123, "records": 123}],
        shards=[{"index": i, "records": 1, "seconds": 1.0} for i in range(123)],
    )
    plan.write_text(json.dumps(data))
    os.utime(plan, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    inputs = DatasetFiles(str(copy / "results" / "demo"))
    for block, count in jobs.planned_jobs(data, 100):  # each shar job's records, as the plan writes them
        Path(inputs.shar_input(block, blocks.block_size(block), count)).write_text('{"shards": []}\n')
    # (mtime: the plan's new shards_per_job would make the checkpoint plan again from the records)
    proc = run_snakemake(
        copy, config, "-n", "--rerun-triggers", "mtime", "--", "results/demo/codes_stats/tiny_nemo.json"
    )
    counts = job_counts(proc.stdout + proc.stderr)
    for stage in ("shar", "codes"):
        assert [counts.get(f"{stage}_{rule}") for rule in ("block", "block10", "tail3", "shard")] == [
            1,
            2,
            1,
            None,
        ], counts
    out = proc.stdout + proc.stderr
    kinds = (("block", "0000"), ("block10", "00010"), ("block10", "00011"), ("tail3", "00012"))
    for rule, block in ((f"codes_{kind}", block) for kind, block in kinds):
        assert re.search(
            rf"rule {rule}:(?:\n    .*)*\n    wildcards: dataset=demo, codec=tiny_nemo, block={block}\n", out
        )
        shar = rule.replace("codes", "shar")
        assert re.search(rf"rule {shar}:(?:\n    .*)*\n    wildcards: dataset=demo, block={block}\n", out)
    # a shard's file named on the command line goes to the job the plan has for it, whatever its kind
    for shard, rule in ((5, "block"), (105, "block10"), (121, "tail3")):
        named = f"results/demo/shar/cuts/cuts.{shard:06d}.jsonl"
        proc = run_snakemake(
            copy, config, "-n", "--rerun-triggers", "mtime", "--forcerun", named, "--", named
        )
        assert job_counts(proc.stdout + proc.stderr) == {f"shar_{rule}": 1}, (shard, proc.stdout[-2000:])
