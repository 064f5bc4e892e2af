"""The NeMo input_cfg, read by NeMo's own Lhotse dataloader with the MagpieTTS dataset."""

import json
import shutil

import yaml

from sharflow.core.layout import DatasetFiles
from sharflow.dataset.catalog import merge_catalog
from sharflow.dataset.training import shard_range, shard_ranges, write_input_cfg
from testkit import magpie_dataset


def test_shard_ranges():
    assert shard_range("/d/cuts", "cuts", ".jsonl.gz", 0, 4) == "/d/cuts/cuts.{000000..000003}.jsonl.gz"
    assert shard_range("/d/cuts", "cuts", ".jsonl.gz", 0, 1) == "/d/cuts/cuts.000000.jsonl.gz"
    grown = [{"first": 0, "shards": 12, "records": 60}, {"first": 20, "shards": 1, "records": 3}]
    assert shard_ranges("/d/c", "c", ".tar", grown) == "/d/c/c.{{000000..000011},000020}.tar"
    assert shard_ranges("/d/c", "c", ".tar", grown[:1]) == "/d/c/c.{000000..000011}.tar"


def test_nemo_dataloader_reads_input_cfg_into_magpietts_batches(demo_shards, coded, tmp_path):
    from nemo.collections.common.data.lhotse.dataloader import get_lhotse_dataloader_from_config
    from omegaconf import OmegaConf

    # two shards of the demo with their codes, laid out as the workflow lays them out
    shar = tmp_path / "results" / "demo" / "shar"
    for field, src in [
        ("cuts", demo_shards[0] / "shar" / "cuts"),
        ("target_audio", demo_shards[0] / "shar" / "target_audio"),
        ("context_audio", demo_shards[0] / "shar" / "context_audio"),
        ("codes_tiny/target_codes", coded[0] / "shar" / "codes_tiny" / "target_codes"),
        ("codes_tiny/context_codes", coded[0] / "shar" / "codes_tiny" / "context_codes"),
    ]:
        (shar / field).mkdir(parents=True)
        for path in sorted(src.iterdir())[:2]:
            shutil.copy(path, shar / field)
    (tmp_path / "plan.json").write_text(json.dumps({"num_shards": 2}))
    source = DatasetFiles(str(demo_shards[0]))
    catalog = str(tmp_path / "catalog.parquet")
    merge_catalog([source.shard(s).catalog for s in range(2)], catalog, codecs=[])
    config = write_input_cfg(
        {
            "demo": {
                "shar_dir": str(shar),
                "plan": str(tmp_path / "plan.json"),
                "catalog": catalog,
                "weight": None,
                "tags": {"lang": "en"},
            }
        },
        str(tmp_path / "input_cfg.yaml"),
        codec="tiny",
        num_buckets=4,
        settings={"shuffle": True, "shard_seed": "randomized"},
    )
    written = yaml.safe_load((tmp_path / "input_cfg.yaml").read_text())
    assert written == config and written["input_cfg"][0]["weight"] > 0
    assert written["input_cfg"][0]["tags"] == {"dataset": "demo", "lang": "en"}

    loader_cfg = OmegaConf.create(
        {
            **written,
            "batch_duration": 40.0,
            "num_workers": 0,
            "seed": 0,
            "bucket_buffer_size": 100,
            "shuffle_buffer_size": 100,
            "force_finite": True,
        }
    )
    dataset = magpie_dataset(load_16khz_audio=False)
    loader = get_lhotse_dataloader_from_config(loader_cfg, global_rank=0, world_size=1, dataset=dataset)
    batch = next(iter(loader))
    assert batch["audio_codes"].shape[1] == 8 and batch["context_audio_codes"].shape[1] == 8
    assert batch["text"].shape[0] == batch["audio_codes"].shape[0] >= 1
    assert (batch["text_lens"] > 5).all()
