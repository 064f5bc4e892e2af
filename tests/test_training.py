"""The NeMo input_cfg, read by NeMo's own Lhotse dataloader with the MagpieTTS dataset."""

import json
import shutil
from collections import Counter

import numpy as np
import pytest
import yaml

from sharflow.core.layout import DatasetFiles
from sharflow.dataset.catalog import merge_catalog
from sharflow.dataset.training import shard_range, shard_ranges, write_input_cfg
from testkit import data_files, magpie_dataset


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
        for path in data_files(src)[:2]:  # each with its index: an indexed set, as the plan says
            shutil.copy(path, shar / field)
            shutil.copy(path + ".idx", shar / field)
    (tmp_path / "plan.json").write_text(json.dumps({"num_shards": 2, "indexed": True}))
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


# ---- mixing by temperature ---------------------------------------------------------------------------

MIX = {  # dataset: (language, domain tag, cuts, seconds a cut from, to): about 5 h, 1.7 h, 0.6 h
    "a": ("en", "books", 6000, (2.0, 4.0)),
    "b": ("en", "talk", 2000, (2.0, 4.0)),
    "c": ("de", "books", 2000, (0.5, 1.5)),
}


def mix_durations(name: str) -> list[float]:
    """The durations of dataset `name`'s cuts (seeded, varied)."""
    _, _, count, (low, high) = MIX[name]
    return np.round(np.random.default_rng(sorted(MIX).index(name)).uniform(low, high, count), 2).tolist()


DRAWS = 2000  # a share's standard deviation at most 0.011: the tolerance 0.05 is 4.5 of them


def mix_sets(tmp_path) -> dict[str, dict]:
    """Three Shar sets of cuts only (what NeMo reads with metadata_only), their plans and catalogs."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from lhotse import CutSet, MonoCut, Recording
    from lhotse.audio import AudioSource

    out = {}
    for name, (language, domain, _, (_, longest)) in MIX.items():
        shar = tmp_path / name / "shar"
        (shar / "cuts").mkdir(parents=True)
        durations = mix_durations(name)
        source = [AudioSource("file", [0], f"{name}.wav")]
        recording = Recording(f"{name}-rec", source, 16000, int(longest * 16000), longest)
        cuts = [MonoCut(f"{name}-{i}", 0.0, d, 0, recording=recording) for i, d in enumerate(durations)]
        CutSet.from_cuts(cuts).to_file(shar / "cuts" / "cuts.000000.jsonl.gz")
        (tmp_path / name / "plan.json").write_text(json.dumps({"num_shards": 1}))
        pq.write_table(pa.table({"duration": durations}), tmp_path / name / "catalog.parquet")
        out[name] = {
            "shar_dir": str(shar),
            "plan": str(tmp_path / name / "plan.json"),
            "catalog": str(tmp_path / name / "catalog.parquet"),
            "weight": None,
            "tags": {"domain": domain},
            "language": language,
        }
    return out


def expected_shares(group_by: str | None, temperatures: list[float]) -> dict[str, float]:
    """Each dataset's share of NeMo's draws, from the hours, worked out here from the formula."""
    hours = {name: round(sum(mix_durations(name)) / 3600, 6) for name in MIX}
    if group_by is None:
        raised = {n: h ** temperatures[0] for n, h in hours.items()}
        return {n: r / sum(raised.values()) for n, r in raised.items()}
    group = {n: MIX[n][0 if group_by == "language" else 1] for n in MIX}
    totals = {g: sum(h for n, h in hours.items() if group[n] == g) for g in set(group.values())}
    outer = {
        g: t ** temperatures[0] / sum(v ** temperatures[0] for v in totals.values())
        for g, t in totals.items()
    }
    out = {}
    for n, h in hours.items():
        members = [m for m in MIX if group[m] == group[n]]
        inner = h ** temperatures[1] / sum(hours[m] ** temperatures[1] for m in members)
        out[n] = outer[group[n]] * inner
    return out


def drawn_shares(config: dict, draws: int = DRAWS, seed="trng") -> dict[str, float]:
    """The share of each dataset among the first `draws` cuts of NeMo's own reader of `config`
    (shard_seed trng: each of NeMo's samplers, one a level, draws from a seed of its own)."""
    from itertools import islice

    from nemo.collections.common.data.lhotse.cutset import read_cutset_from_config
    from omegaconf import OmegaConf

    cuts, _ = read_cutset_from_config(
        OmegaConf.create({**config, "metadata_only": True, "force_finite": True, "shard_seed": seed})
    )
    counts = Counter(cut.dataset for cut in islice(cuts, draws))
    return {name: counts[name] / draws for name in MIX}


@pytest.mark.parametrize(
    "group_by, temperature",
    [
        (None, None),
        (None, 0.0),
        (None, 0.5),
        ("language", [1.0, 0.0]),
        ("language", [0.0, 1.0]),
        ("domain", 0.0),
    ],
)
def test_nemo_samples_the_mix_input_cfg_writes_by_its_groups_and_temperature(tmp_path, group_by, temperature):
    sets = mix_sets(tmp_path)
    config = write_input_cfg(
        sets,
        str(tmp_path / "input_cfg.yaml"),
        codec=None,
        num_buckets=3,
        settings={"shuffle": True, "shard_seed": 0},
        group_by=group_by,
        temperature=temperature,
    )
    assert yaml.safe_load((tmp_path / "input_cfg.yaml").read_text()) == config
    levels = 2 if group_by else 1
    temperatures = (
        [1.0] * levels
        if temperature is None
        else (temperature if isinstance(temperature, list) else [temperature] * levels)
    )
    assert config.get("reweight_temperature") == (None if temperature is None else temperatures)
    if group_by:
        assert [g["type"] for g in config["input_cfg"]] == ["group", "group"]
        values = {
            g["tags"][group_by]: [e["tags"]["dataset"] for e in g["input_cfg"]] for g in config["input_cfg"]
        }
        assert values == (
            {"de": ["c"], "en": ["a", "b"]}
            if group_by == "language"
            else {"books": ["a", "c"], "talk": ["b"]}
        )
        assert all(
            g["weight"] == round(sum(e["weight"] for e in g["input_cfg"]), 6) for g in config["input_cfg"]
        )
    expected = expected_shares(group_by, temperatures)
    assert max(expected.values()) - min(expected.values()) > 0.05 or temperature == 0.0  # the shares differ
    drawn = drawn_shares(config)
    assert all(abs(drawn[n] - expected[n]) <= 0.05 for n in MIX), (drawn, expected)


def test_the_temperature_moves_the_shares_and_the_duration_bins_follow_the_mix(tmp_path):
    """T = 1 draws by hours (a: 0.68), T = 0 alike (a third each): the draws show it, and the bins of
    the mix move down to c's short cuts, which T = 0 draws as often as a's long ones."""
    sets = mix_sets(tmp_path)

    def written(temperature):
        return write_input_cfg(
            sets,
            str(tmp_path / f"{temperature}.yaml"),
            codec=None,
            num_buckets=3,
            settings={"shard_seed": 0},
            temperature=temperature,
        )

    by_hours, alike = written(1.0), written(0.0)
    assert drawn_shares(by_hours)["a"] > 0.6 > drawn_shares(alike)["a"] + 0.2
    assert alike["bucket_duration_bins"][0] < by_hours["bucket_duration_bins"][0] - 0.1
    assert written(None)["bucket_duration_bins"] == by_hours["bucket_duration_bins"]  # T = 1 is by weight


def test_a_group_a_dataset_does_not_have_is_named_with_what_to_set(tmp_path):
    from sharflow.core.errors import SharflowError

    sets = mix_sets(tmp_path)
    sets["c"]["tags"] = {}
    with pytest.raises(SharflowError, match=r"dataset c has no domain \(set datasets.c.tags.domain\)"):
        write_input_cfg(
            sets, str(tmp_path / "x.yaml"), codec=None, num_buckets=2, settings={}, group_by="domain"
        )
