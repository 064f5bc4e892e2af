"""sharflow.core.layout: the one place for paths, and the rules' declared outputs checked against it."""

import re
from pathlib import Path

import pytest
import yaml
from snakemake.api import SnakemakeApi
from snakemake.settings.types import (
    ConfigSettings,
    DeploymentSettings,
    OutputSettings,
    ResourceSettings,
    StorageSettings,
    WorkflowSettings,
)

from sharflow.core import blocks, layout
from sharflow.core.blocks import shard_key
from sharflow.core.errors import SharflowError
from sharflow.core.layout import DatasetFiles, ShardFiles, rejected_beside
from testkit import REPO, demo_config

DS = layout.dataset_files("{dataset}")

# rule -> {output name: path}, everything from sharflow.core.layout
EXPECTED = {
    "recipe": {
        "recordings": DS.recipe_recordings,
        "supervisions": DS.recipe_supervisions,
        "stats": DS.recipe_stats,
    },
    "segment_plan": {"plan": DS.segment_plan},
    "segment_part": {"stats": DS.segment_part("{part}")},
    "segment_merge": {"manifest": DS.segment_manifest, "stats": DS.segment_stats},
    "prepare": {"prepared": DS.prepared, "rejected": DS.prepare_rejected, "stats": DS.prepare_stats},
    "text_normalizer": {"normalizer": layout.text_normalizer("{language}")},
    "text_part": DS.text_part("{part}").named(),
    "text_merge": {"records": DS.text_records, "rejected": DS.text_rejected, "stats": DS.text_stats},
    "build_random_asr": {"model": layout.RANDOM_ASR},
    "quality_part": DS.quality_part("{part}").named(),
    "quality_merge": {
        "metrics": DS.quality_metrics,
        "embeddings": DS.quality_embeddings,
        "stats": DS.quality_metrics_stats,
    },
    "quality_filter": {"kept": DS.quality_kept, "rejected": DS.quality_rejected, "stats": DS.quality_stats},
    "identity_index": {**layout.IDENTITY_INDEX.named(), "decisions": layout.SPEAKER_DECISIONS},
    "identity_check": layout.identity_check("{part}").named(),
    "identity_merge": {"links": layout.IDENTITY_LINKS, "stats": layout.IDENTITY_STATS},
    "splits": {"records": DS.split_records, "rejected": DS.split_rejected, "stats": DS.split_stats},
    "context_plan": {"plan": DS.context_plan},
    "context_part": DS.context_part("{part}").named(),
    "context_merge": {
        "with_context": DS.with_context,
        "rejected": DS.context_rejected,
        "stats": DS.context_stats,
    },
    "shar_plan": {"plan": DS.shard_plan},
    "shar_block": DS.shard_block("{block}", 10),
    **{f"shar_tail{n}": DS.shard_block("{block}", 10, n) for n in range(2, 10)},
    "shar_shard": {
        **{f"{name}_0": path for name, path in DS.shard("{block}").named().items()},
        "job": DS.shar_job("{block}", 1),
    },
    "shar_merge": {"stats": DS.shar_stats, "rejected": DS.shar_rejected},
    "build_random_codec": {"model": layout.codec_model("{codec}")},
    "codec_model": {"spec": layout.codec_spec("{codec}")},
    "codes_block": DS.codes_block("{codec}", "{block}", 10),
    **{f"codes_tail{n}": DS.codes_block("{codec}", "{block}", 10, n) for n in range(2, 10)},
    "codes_shard": {
        **{f"{name}_0": path for name, path in DS.codes("{codec}", "{block}").named().items()},
        "job": DS.codes_job("{codec}", "{block}", 1),
    },
    "codes_merge": {"stats": DS.codes_stats("{codec}")},
    "catalog": {"catalog": DS.catalog},
    "dataset_card": {"card": DS.dataset_card},
    "buckets": {"buckets": DS.buckets},
    "verify": {"verify": DS.verify},
    "input_cfg": {"input_cfg": layout.INPUT_CFG},
    "validation_ds": {"validation_ds": layout.VALIDATION_DS},
    "evaluation_set": {"evaluation": DS.evaluation},
    "publish": {"published": layout.PUBLISHED},
    "report": {
        **{
            plot: f"{layout.REPORT_DIR}/{plot}.png" for plot in ("durations", "buckets", "similarity", "load")
        },
        "rejects": f"{layout.REPORT_DIR}/rejects.png",
        "text": f"{layout.REPORT_DIR}/text.png",
        "quality": f"{layout.REPORT_DIR}/quality.png",
        "quality_kept": f"{layout.REPORT_DIR}/quality_kept.png",
        "quality_table": f"{layout.REPORT_DIR}/quality.html",
        "quality_tsv": f"{layout.REPORT_DIR}/quality.tsv",
        "summary": f"{layout.REPORT_DIR}/summary.html",
        "summary_tsv": f"{layout.REPORT_DIR}/summary.tsv",
        "tables": f"{layout.REPORT_DIR}/tables.html",
        "speakers_tsv": f"{layout.REPORT_DIR}/speakers.tsv",
        "buckets_tsv": f"{layout.REPORT_DIR}/buckets.tsv",
    },
    "calibration_sample": {
        "sample": layout.calibration_sample("{dataset}"),
        "small": layout.calibration_small("{dataset}"),
        "summary": layout.calibration_summary("{dataset}"),
    },
    "calibration": {"done": layout.CALIBRATION_DONE},
    "cost_plan": {
        "plan": layout.PLAN,
        "page": layout.PLAN_PAGE,
        "dot": layout.PLAN_DOT,
        "resources": layout.PLAN_RESOURCES,
    },
    "plan_vs_actual": {"json": layout.PLAN_ACTUAL, "page": layout.PLAN_ACTUAL_PAGE},
    "plan": {},
    "all": {},
}


def parsed_rules(config: dict, tmp: Path):
    """The workflow's rules as Snakemake parses them."""
    configfile = tmp / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    with SnakemakeApi(OutputSettings()) as api:
        workflow = api.workflow(
            resource_settings=ResourceSettings(cores=1),
            config_settings=ConfigSettings(configfiles=[configfile]),
            storage_settings=StorageSettings(),
            workflow_settings=WorkflowSettings(),
            deployment_settings=DeploymentSettings(),
            snakefile=REPO / "Snakefile",
            workdir=tmp,
        )
        return list(workflow._workflow.rules)  # the parsed rules; no public accessor


def unconstrained(pattern) -> str:
    return re.sub(r"\{(\w+),[^{}]*(\{[^{}]*\}[^{}]*)*\}", r"{\1}", str(pattern))


def declared_outputs(config: dict, tmp: Path) -> dict[str, dict[str, str]]:
    """{rule: {output name: pattern}} as Snakemake parses the workflow, wildcard constraints dropped."""
    return {
        rule.name: {
            name: unconstrained(rule.output[index]) for name, (index, _) in rule.output._names.items()
        }
        for rule in parsed_rules(config, tmp)
    }


def test_every_job_logs_where_layout_says(tmp_path):
    for rule in parsed_rules(demo_config(), tmp_path):
        if rule.name in ("all", "plan"):  # targets: no job of their own
            continue
        (log,) = map(unconstrained, rule.log)
        inside = log.removeprefix(f"{layout.LOGS}/{rule.name}").removesuffix(".log")
        keys = inside.removeprefix("/").split("/") if inside else []
        assert log == layout.log(rule.name, *keys), rule.name
        if rule.benchmark:
            assert unconstrained(rule.benchmark) == layout.benchmark(rule.name, *keys), rule.name


def test_every_rule_declares_the_outputs_layout_names(tmp_path):
    assert declared_outputs(demo_config(), tmp_path) == EXPECTED


def test_the_identity_parts_are_named_by_layout_whichever_job_writes_them(tmp_path):
    """With splits, the quality parts write the identity parts too (one decode); with quality off,
    the identity_part jobs do."""
    identity = {f"identity_{name}": path for name, path in DS.identity_part("{part}").named().items()}
    outputs = declared_outputs(demo_config(splits=True), tmp_path)
    assert (
        outputs["quality_part"] == {**EXPECTED["quality_part"], **identity} and "identity_part" not in outputs
    )
    alone = declared_outputs(demo_config(splits=True, quality={"enabled": False}), tmp_path)
    assert alone["identity_part"] == DS.identity_part("{part}").named()


def test_saved_embeddings_are_named_by_layout_too(tmp_path):
    outputs = declared_outputs(demo_config(context={"save_embeddings": True}), tmp_path)
    assert outputs["context_part"] == {**EXPECTED["context_part"], **DS.context_embeddings("{part}")}


def test_one_jobs_files_and_patterns_share_one_spelling():
    demo = DatasetFiles("results/demo")
    assert demo.shard(7) == DatasetFiles("results/demo").shard("000007")
    unindexed = {  # shar.index: false, as sharflow wrote shards before indexes
        "cuts": "results/demo/shar/cuts/cuts.000007.jsonl.gz",
        "target": "results/demo/shar/target_audio/recording.000007.tar",
        "context": "results/demo/shar/context_audio/recording.000007.tar",
        "stats": "results/demo/shar_jobs/shard-000007.stats.json",
        "rejected": "results/demo/shar_jobs/shard-000007.rejected.jsonl",
        "catalog": "results/demo/shar_jobs/shard-000007.catalog.parquet",
    }
    assert DatasetFiles("results/demo", indexed=False).shard(7).named() == unindexed
    assert demo.shard(7).named() == {  # indexed, the default: plain cuts, and an index beside each file
        **unindexed,
        "cuts": "results/demo/shar/cuts/cuts.000007.jsonl",
        "cuts_index": "results/demo/shar/cuts/cuts.000007.jsonl.idx",
        "target_index": "results/demo/shar/target_audio/recording.000007.tar.idx",
        "context_index": "results/demo/shar/context_audio/recording.000007.tar.idx",
    }
    assert ShardFiles.of(demo.shard(7).named()) == demo.shard(7)
    assert ShardFiles.of(unindexed).cuts_index is None
    assert demo.codes("c", 12).target == "results/demo/shar/codes_c/target_codes/codes.000012.tar"
    assert demo.codes("c", 12).target_index == "results/demo/shar/codes_c/target_codes/codes.000012.tar.idx"
    assert DatasetFiles("results/demo", indexed=False).codes("c", 12).target_index is None
    assert demo.context_part(3).stats == "results/demo/context/parts/part-0003.stats.json"
    assert DS.shard("{shard}").cuts == "results/{dataset}/shar/cuts/cuts.{shard}.jsonl"
    assert shard_key(123456) == "123456" and shard_key("{shard}") == "{shard}"
    assert rejected_beside(demo.shard(7).stats) == demo.shard(7).rejected
    with pytest.raises(ValueError, match="not a shard stats file"):
        rejected_beside("results/demo/shar_stats.json")


def test_blocks_are_shard_keys_sharing_all_digits_but_the_last():
    assert [blocks.block_digits(n) for n in (1, 10, 100, 1000)] == [0, 1, 2, 3]
    for bad in (2, 16, 0):
        with pytest.raises(ValueError, match="power of ten"):
            blocks.block_digits(bad)
    assert blocks.block_members("00012", 10) == [f"0001{2}{m}" for m in range(10)]
    assert (
        blocks.block_members("0001", 100)[:2] == ["000100", "000101"]
        and len(blocks.block_members("0001", 100)) == 100
    )
    assert blocks.block_members("000123", 1) == ["000123"]
    assert [blocks.block_size(k) for k in ("000123", "00012", "0001", "000")] == [1, 10, 100, 1000]
    assert blocks.block_members("{block}", 10)[3] == "{block}3"
    for shard in (0, 9, 10, 123, 999_999):
        assert shard_key(shard) in blocks.block_members(shard_key(shard)[:5])  # its block of 10
    files = DatasetFiles("results/demo").codes_block("c", "00001", 10)
    assert files["target_0"] == "results/demo/shar/codes_c/target_codes/codes.000010.tar"
    assert files["stats_9"] == "results/demo/codes_jobs/c/shard-000019.stats.json" and len(files) == 51
    assert files["context_index_9"] == "results/demo/shar/codes_c/context_codes/codes.000019.tar.idx"
    assert len(DatasetFiles("results/demo", indexed=False).codes_block("c", "00001", 10)) == 31
    assert files["job"] == "results/demo/codes_jobs/c/shards-000010-000019.json"
    tail = DatasetFiles("results/demo").shard_block("00002", 10, 3)
    assert tail["job"] == "results/demo/shar_jobs/shards-000020-000022.json" and "cuts_3" not in tail
    assert blocks.block_members("00002", count=3) == ["000020", "000021", "000022"]


def test_a_job_record_is_named_by_its_first_and_last_shard():
    assert blocks.job_file_name("00002", 10, 3) == "shards-000020-000022.json"
    assert blocks.job_file_name("{shard}", 1) == "shards-{shard}-{shard}.json"


def test_a_shard_file_deleted_after_its_job_is_named_with_the_command_that_makes_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    files = layout.dataset_files("demo")
    Path(files.shard_plan).parent.mkdir(parents=True)
    Path(files.shard_plan).write_text('{"num_shards": 2, "indexed": true}')
    for shard in (files.shard(0), files.shard(1)):
        for path in shard.named().values():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text("x")
    assert [s.stats for s in files.planned()] == [files.shard(0).stats, files.shard(1).stats]
    Path(files.shard(1).catalog).unlink()
    with pytest.raises(
        SharflowError, match=rf"{files.shard(1).catalog} is missing.*snakemake {files.shard(1).catalog}$"
    ):
        files.planned()
    with pytest.raises(SharflowError, match=r"codes\.000000\.tar is missing"):
        files.planned("c")
