"""Splits: speaker-disjoint unseen splits, seen held-out utterances, stable as data grows, and the
splits job's cross-dataset rule (sharflow.core.splits, sharflow.splits.stage)."""

import json
import os
import zlib
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from sharflow.core.errors import SharflowError
from sharflow.core.layout import DatasetFiles
from sharflow.core.splits import HELD_OUT, SPLITS, TRAIN, SplitRules, context_pool, unit_hash
from sharflow.identity.links import SAME_AUDIO, SAME_CONTENT, SAME_UTTERANCE
from sharflow.io.audio import span_key
from testkit import (
    LONG_RUN,
    demo_config,
    read_jsonl,
    run_identity,
    run_snakemake,
    write_jsonl,
    write_noise,
    write_tone,
)

RULES = {
    "seed": 3,
    "dev_unseen": {"fraction": 0.2},
    "test_unseen": {"fraction": 0.2},
    "dev_seen": {"fraction": 0.1},
    "test_seen": {"fraction": 0.1},
}


def corpus(speakers: int, per_speaker: int, first_speaker: int = 0, first_utt: int = 0):
    """(speaker, audio_filepath, span key) of synthetic utterances (no audio: span keys are strings)."""
    return [
        (
            f"spk{s:02d}",
            f"spk{s:02d}/u{u:03d}.wav",
            f"u{s:02d}_{u:03d}.wav:{1000 + u}:0.000:{1 + u / 100:.3f}",
        )
        for s in range(first_speaker, first_speaker + speakers)
        for u in range(first_utt, first_utt + per_speaker)
    ]


def assigned(rules: SplitRules, utterances) -> dict[str, str]:
    return {path: rules.split(speaker, path, span) for speaker, path, span in utterances}


def test_unseen_speakers_are_never_in_train_and_seen_split_speakers_are():
    rules = SplitRules.from_config(RULES)
    utterances = corpus(16, 30)
    splits = assigned(rules, utterances)
    by_speaker = defaultdict(set)
    for speaker, path, _ in utterances:
        by_speaker[speaker].add(splits[path])
    # informative first: every split occurs, and speakers differ
    assert set(splits.values()) == set(SPLITS)
    unseen = {s for s, got in by_speaker.items() if got & {"dev_unseen", "test_unseen"}}
    assert 2 <= len(unseen) <= 12
    for speaker, got in by_speaker.items():
        if speaker in unseen:  # all of an unseen speaker's utterances in one unseen split
            assert len(got) == 1 and TRAIN not in got, (speaker, got)
        else:
            assert TRAIN in got and not got & {"dev_unseen", "test_unseen"}, (speaker, got)
    seen_held = Counter(v for v in splits.values() if v in ("dev_seen", "test_seen"))
    seen_total = sum(1 for s, _, _ in utterances if s not in unseen)
    assert 0.1 < sum(seen_held.values()) / seen_total < 0.3  # about dev_seen + test_seen = 0.2


def test_adding_utterances_and_speakers_moves_no_earlier_assignment():
    rules = SplitRules.from_config(RULES)
    before = assigned(rules, corpus(10, 30))
    grown = corpus(10, 3, first_utt=30) + corpus(2, 30, first_speaker=10)  # +10 % utterances, +2 speakers
    after = assigned(rules, corpus(10, 30) + grown)
    assert len(after) == len(before) * 1.1 + 60
    assert {path: after[path] for path in before} == before
    # the seed is what decides: another one assigns differently
    other = assigned(SplitRules.from_config({**RULES, "seed": 4}), corpus(10, 30))
    assert other != before


def test_listed_speakers_and_utterances_win_over_the_hash():
    utterances = corpus(8, 10)
    listed = SplitRules.from_config(
        {
            "dev_unseen": {"speakers": ["spk05"]},
            "test_unseen": {"speakers": ["spk03"]},
            "dev_seen": {"utterances": ["spk01/u002.wav", "spk03/u001.wav"]},
            "test_seen": {"utterances": ["spk01/u003.wav"]},
        }
    )
    splits = assigned(listed, utterances)
    assert {splits[p] for s, p, _ in utterances if s == "spk03"} == {"test_unseen"}  # the speaker wins
    assert splits["spk01/u002.wav"] == "dev_seen" and splits["spk01/u003.wav"] == "test_seen"
    assert Counter(splits.values()) == {
        TRAIN: 58,
        "dev_unseen": 10,
        "test_unseen": 10,
        "dev_seen": 1,
        "test_seen": 1,
    }
    assert not SplitRules.from_config({}).enabled and listed.enabled


def test_the_assignment_is_pinned_to_its_values():
    """A split depends on blake2b of (seed, kind, id) only, and that is a contract: a change to the
    hash would move every user's held-out speakers and utterances (into train among them). Pinned."""
    assert unit_hash(0, "speaker", "awb") == 0.15718865986308206
    assert unit_hash(1, "utterance", "a.wav:10:0.000:1.000") == 0.45856404866521605
    rules = SplitRules.from_config(RULES)
    assert [rules.speaker_split(f"spk{s:02d}") for s in range(10)] == [
        *("test_unseen", "test_unseen", None, "test_unseen", None),
        *(None, "dev_unseen", "dev_unseen", None, "dev_unseen"),
    ]
    spk02 = [rules.split("spk02", path, span) for speaker, path, span in corpus(10, 30) if speaker == "spk02"]
    held = {u: s for u, s in enumerate(spk02) if s != TRAIN}
    assert held == {0: "dev_seen", 8: "dev_seen", 10: "dev_seen", 11: "test_seen", 15: "dev_seen"}
    default_seed = SplitRules.from_config({"dev_unseen": {"fraction": 0.5}})
    assert [default_seed.speaker_split(f"spk{s:02d}") for s in range(6)] == [None, *["dev_unseen"] * 5]


def test_contradicting_split_settings_are_named():
    with pytest.raises(SharflowError, match=r"datasets\.a\.splits: the unseen fractions"):
        SplitRules.from_config(
            {"dev_unseen": {"fraction": 0.5}, "test_unseen": {"fraction": 0.5}}, "datasets.a.splits"
        )
    with pytest.raises(SharflowError, match=r"splits\.b: the seen fractions \(dev_seen, test_seen\)"):
        SplitRules.from_config({"dev_seen": {"fraction": 0.5}, "test_seen": {"fraction": 0.5}}, "splits.b")
    with pytest.raises(SharflowError, match=r"^datasets\.x\.splits: 'u\.wav' is listed under both dev_seen"):
        SplitRules.from_config(
            {"dev_seen": {"utterances": ["u.wav"]}, "test_seen": {"utterances": ["u.wav"]}},
            "datasets.x.splits",
        )
    with pytest.raises(
        SharflowError, match=r"^splits: 'spk1' is listed under both dev_unseen\.speakers and test_unseen"
    ):
        SplitRules.from_config({"dev_unseen": {"speakers": ["spk1"]}, "test_unseen": {"speakers": ["spk1"]}})


def test_context_pools_keep_held_out_audio_out_of_train():
    assert [context_pool(s) for s in SPLITS] == [TRAIN, TRAIN, "dev_unseen", TRAIN, "test_unseen"]
    assert set(HELD_OUT) == set(SPLITS) - {TRAIN}


def write_dataset(root, manifest, rows):
    """Records as prepare writes them, for files under `root` (distinct noise signals)."""
    records = []
    for speaker, rel, seconds in rows:
        if not (root / rel).exists():
            write_noise(root / rel, seconds=seconds, seed=zlib.crc32(rel.encode()))
        records.append(
            {
                "audio_filepath": rel,
                "offset": 0.0,
                "duration": seconds,
                "text": "a",
                "speaker": f"| Language:en Dataset:x Speaker:{speaker} |",
            }
        )
    write_jsonl(manifest, records)
    return records


def test_the_same_audio_held_out_in_one_dataset_is_not_trained_on_in_another(tmp_path):
    """Dataset b reuses a's files (under another root and path) with other speaker names, and its own
    settings: whatever b's rules say, a span a holds out is rejected from b's train (the identity
    job's links, read by b's splits job)."""
    audio = tmp_path / "audio"
    rows_a = [(f"s{s}", f"s{s}/u{u}.wav", 1 + (s * 10 + u) / 100) for s in range(8) for u in range(6)]
    write_dataset(audio, tmp_path / "a.jsonl", rows_a)
    rows_b = [("other", f"audio/{rel}", seconds) for _, rel, seconds in rows_a[:24]] + [
        ("own", "audio/b.wav", 0.5)
    ]
    write_dataset(tmp_path, tmp_path / "b.jsonl", rows_b)
    a_rules = {
        "dev_unseen": {"speakers": ["s1"]},
        "test_unseen": {"speakers": ["s2"]},
        "dev_seen": {"fraction": 0.2},
    }
    datasets = {
        "a": (tmp_path / "a.jsonl", audio, 48, a_rules),
        "b": (tmp_path / "b.jsonl", tmp_path, 25, {}),  # b: everything train
    }
    _, out = run_identity(tmp_path / "id", datasets)
    for name, (stats, _, _) in out.items():
        n = datasets[name][2]
        assert (
            stats["records_in"]
            == n
            == sum(v["records"] for v in stats["splits"].values()) + stats["rejected_total"]
        )
    a_stats, a_records, _ = out["a"]
    assert a_stats["rejected_total"] == 0 and a_stats["splits"]["dev_unseen"]["records"] == 6
    held = {os.path.realpath(audio / r["audio_filepath"]) for r in a_records if r["split"] != TRAIN}
    assert 12 < len(held) < 24  # s1, s2 and some dev_seen utterances
    b_stats, b_records, rejected = out["b"]
    in_b = {os.path.realpath(tmp_path / r["audio_filepath"]) for r in b_records}
    assert not in_b & held and {r["split"] for r in b_records} == {TRAIN}
    shared = {os.path.realpath(audio / rel) for _, rel, _ in rows_a[:24]}
    assert len(rejected) == b_stats["rejected"][SAME_AUDIO] == len(shared & held) >= 12
    assert b_stats["rejected"] == {SAME_AUDIO: len(rejected)}  # distinct signals: no content link
    links = read_jsonl(tmp_path / "id" / "identity" / "links.jsonl")
    same = [row["score"] for row in links if row["reason"] == SAME_AUDIO and row["dataset"] == "b"]
    assert same == [1.0] * len(rejected)  # the same span: the same audio
    assert " dev_" in rejected[0]["detail"] and "of dataset a" in rejected[0]["detail"]
    assert json.loads(rejected[0]["original"])["speaker"].endswith("Speaker:other |")


def test_a_span_is_its_file_name_size_offset_and_duration(tmp_path):
    write_tone(tmp_path / "x" / "a.wav", seconds=1.0)
    (tmp_path / "y").mkdir()
    os.link(tmp_path / "x" / "a.wav", tmp_path / "y" / "a.wav")
    write_tone(tmp_path / "z" / "a.wav", seconds=1.5)
    key = span_key(str(tmp_path / "x" / "a.wav"), 0.0, 1.0)
    assert key == span_key(str(tmp_path / "y" / "a.wav"), 0.0, 1.0004)  # same file elsewhere; ms
    assert key != span_key(str(tmp_path / "z" / "a.wav"), 0.0, 1.0)  # another file of the same name
    assert key != span_key(str(tmp_path / "x" / "a.wav"), 0.5, 0.5)


def run_splits(tmp):
    """(work dir, config) of a whole workflow run of the shipped config's demo and degraded datasets,
    with their splits: on for demo (its own block: two unseen speakers by list, seen utterances by
    fraction) and off for degraded (the workflow's block); quality with one filter, the shipped
    dnsmos_bak threshold (it drops degraded's noisy copy and nothing else, so the other damaged copies
    reach the splits job to be linked by content), 8-cut shards, the train records checked for
    held-out content in two identity check parts (conftest's split_run, in the background). It is also
    the run the explorer's tests look at (test_explore)."""
    filters = {"dnsmos_bak": demo_config()["quality"]["filters"]["dnsmos_bak"]}
    config = demo_config(
        degraded=True,
        splits=True,
        quality={"filters": filters},
        shar={"shard_size": 8},
        identity={"check_parts": 2},
    )
    assert config["datasets"]["demo"]["splits"]["dev_unseen"] and "splits" not in config
    work = tmp / "w"
    run_snakemake(work, config, timeout=LONG_RUN)
    return work, config


def test_splits_in_the_workflow_keep_held_out_audio_out_of_train_and_its_contexts(split_run):
    """No held-out audio in train or as a train record's context, checked against the split lists."""
    work, config = split_run

    def real(ds, rel):
        return os.path.realpath(os.path.join(config["datasets"][ds]["audio_root"], rel))

    split_of = {}  # (dataset, real path, offset) -> split: the split lists, as the splits job wrote them
    for ds in ("demo", "degraded"):
        files = DatasetFiles(str(work / "results" / ds))
        stats = json.loads(Path(files.split_stats).read_text())
        assert (
            stats["records_in"]
            == sum(s["records"] for s in stats["splits"].values()) + stats["rejected_total"]
        )
        for r in read_jsonl(files.split_records):
            split_of[ds, real(ds, r["audio_filepath"]), r["offset"]] = r["split"]
    demo = Counter(s for (ds, _, _), s in split_of.items() if ds == "demo")
    assert set(demo) == set(SPLITS) and all(demo.values()), demo  # all five splits non-empty
    unseen = {p for (ds, p, _), s in split_of.items() if s in ("dev_unseen", "test_unseen")}
    assert unseen and {os.path.basename(os.path.dirname(p)) for p in unseen} == {"kal", "us_m3"}
    # the same audio in both datasets has one split
    by_span, datasets_of = defaultdict(set), defaultdict(set)
    for (ds, path, offset), split in split_of.items():
        by_span[path, offset].add(split)
        datasets_of[path, offset].add(ds)
    shared = [span for span, names in datasets_of.items() if len(names) == 2]
    assert len(shared) >= 2 and all(by_span[span] == {TRAIN} for span in shared)
    # degraded is all train by its own rules, so its copies of demo's held-out slt audio are rejected
    # (the identity job: its clean copies by their span, its damaged copies by content or by speaker
    # and text; sharflow.identity.links)
    degraded_files = DatasetFiles(str(work / "results" / "degraded"))
    degraded = json.loads(Path(degraded_files.split_stats).read_text())
    held_slt = {
        Path(p).stem for (ds, p, _), s in split_of.items() if ds == "demo" and "/slt/" in p and s != TRAIN
    }
    sources = [
        Path(r["audio_filepath"]).stem[:7] for r in read_jsonl(config["datasets"]["degraded"]["manifest"])
    ]
    quality = json.loads(Path(degraded_files.quality_stats).read_text())
    dropped = {
        Path(json.loads(r["original"])["audio_filepath"]).stem[:7]
        for p in Path(degraded_files.quality_rejected).glob("*.jsonl")
        for r in read_jsonl(p)
    }
    assert quality["rejected"] == {"quality_dnsmos_bak": 1} and dropped == {"slt_000"}  # the noisy copy
    damaged = [s for s in sources[8:] if s in held_slt]
    assert held_slt and damaged and len(sources) == 15 and not dropped & held_slt
    assert degraded["rejected_total"] == len(held_slt) + len(damaged)
    assert degraded["rejected"][SAME_AUDIO] == len(held_slt)
    assert set(degraded["rejected"]) <= {SAME_AUDIO, SAME_CONTENT, SAME_UTTERANCE}
    reasons = {
        Path(json.loads(r["original"])["audio_filepath"]).stem: r["reason"]
        for p in Path(degraded_files.split_rejected).glob("*.jsonl")
        for r in read_jsonl(p)
    }
    # the same samples under another text are the same content; silence has none but its text
    assert reasons.get("slt_005_wrong_text", SAME_CONTENT) == SAME_CONTENT
    assert reasons.get("slt_006_silence_only", SAME_UTTERANCE) == SAME_UTTERANCE
    assert set(degraded["splits"]) == set(SPLITS) and degraded["splits"]["dev_seen"]["records"] == 0

    for ds in ("demo", "degraded"):
        files = DatasetFiles(str(work / "results" / ds))
        records = read_jsonl(files.with_context)
        held = {(p, o) for (d, p, o), s in split_of.items() if s != TRAIN}  # of either dataset
        for r in records:
            context = (real(ds, r["context_audio_filepath"]), r["context_audio_offset"])
            target = (real(ds, r["audio_filepath"]), r["offset"])
            if r["split"] in ("dev_unseen", "test_unseen"):  # the same speaker, the same split
                assert split_of[ds, *context] == r["split"] and context != target
            else:  # train and the seen splits: train audio only
                assert context not in held and split_of[ds, *context] == TRAIN, r
        shar = json.loads(Path(files.shar_stats).read_text())
        kept = Counter(r["split"] for r in records)
        assert shar["cuts"] + shar["rejected_total"] == kept[TRAIN]
        assert shar["held_out"] == {s: n for s, n in sorted(kept.items()) if s != TRAIN}
        context_stats = json.loads(Path(files.context_stats).read_text())["splits"]
        assert {s: c["records_out"] for s, c in context_stats.items()} == dict(kept)


def test_each_split_is_its_own_verified_shar_in_one_catalog_and_training_sees_train_only(split_run):
    work, _ = split_run
    results = work / "results"
    catalog = pd.read_parquet(results / "demo" / "catalog.parquet")
    context = json.loads((results / "demo" / "context" / "stats.json").read_text())["splits"]
    for split in SPLITS:
        files = (
            DatasetFiles(str(results / "demo" / split))
            if split != TRAIN
            else DatasetFiles(str(results / "demo"))
        )
        verified = json.loads(Path(files.verify).read_text())
        shar = json.loads(Path(files.shar_stats).read_text())
        rows = catalog[catalog.split == split]
        assert verified["ok"] and verified["cuts"] == len(rows) == shar["cuts"] > 0, split
        assert "context_codes[tiny_nemo]" in verified["fields"]
        # the records accounting per split: what context kept = cuts + rejected in that split's Shar
        assert context[split]["records_out"] == shar["cuts"] + shar["rejected_total"]
        # shard and position are within the split's own Shar
        assert rows.shard.max() == shar["shards"] - 1 and (rows.groupby("shard").position.min() == 0).all()
    assert catalog.cut_id.is_unique
    # the identity stage's columns, filled in every row and varied
    assert catalog.fingerprint_hashes.notna().all() and catalog.audio_digest.notna().all()
    assert catalog.fingerprint_hashes.min() > 50 and catalog.audio_digest.nunique() == len(catalog)
    assert "duplicate_of" not in catalog  # identity.train_duplicates: keep marks nothing
    card = (results / "demo" / "DATASET.md").read_text()  # hours and speakers per split
    # voices compared in the run: none linked, the closest pair (two voices of one engine) shown
    identity = json.loads((results / "identity" / "stats.json").read_text())["speakers"]
    assert (identity["speakers"], identity["held_out_unseen"], identity["linked"]) == (8, 2, [])
    assert (
        "rejected): none; the closest pair not linked: gb_f2 ~ demo:us_m3 (test_unseen, not_linked, " in card
    )
    assert "Closest pairs not linked" in (results / "report" / "summary.html").read_text()
    for split, rows in catalog.groupby("split", observed=True):
        hours, speakers = rows.duration.sum() / 3600, rows.speaker.nunique()
        assert f"| {split} | {len(rows):,} | {hours:.3f} | {speakers:,} |" in card
    # training sees train only: input_cfg's demo entry and the bucket bins' cuts
    train = catalog[catalog.split == TRAIN]
    input_cfg = yaml.safe_load((results / "input_cfg.yaml").read_text())
    entry = next(e for e in input_cfg["input_cfg"] if e["tags"]["dataset"] == "demo")
    assert "/demo/shar/cuts/" in entry["shar_path"]["cuts"]
    assert entry["weight"] == pytest.approx(train.duration.sum() / 3600, abs=1e-6)
    buckets = yaml.safe_load((results / "demo" / "buckets.yaml").read_text())
    assert buckets["cuts"] == len(train) < len(catalog)


def test_nemo_reads_every_cut_of_the_dev_splits_through_validation_ds(split_run):
    import torch
    from lhotse import CutSet
    from nemo.collections.common.data.lhotse.dataloader import get_lhotse_dataloader_from_config
    from omegaconf import OmegaConf

    work, _ = split_run
    validation = yaml.safe_load((work / "results" / "validation_ds.yaml").read_text())
    assert [e["tags"]["split"] for e in validation["input_cfg"]] == ["dev_seen", "dev_unseen"]
    assert not validation["use_bucketing"]

    class Ids(torch.utils.data.Dataset):
        def __getitem__(self, batch: CutSet):
            assert all(c.has_custom("target_codes") and c.has_custom("context_audio") for c in batch)
            return [(c.supervisions[0].custom.get("split"), c.id) for c in batch]

    loader_cfg = {**validation, "batch_size": 4, "num_workers": 0, "seed": 0, "force_finite": True}
    loader = get_lhotse_dataloader_from_config(
        OmegaConf.create(loader_cfg), global_rank=0, world_size=1, dataset=Ids()
    )
    seen = [cut_id for batch in loader for _, cut_id in batch]
    catalog = pd.read_parquet(work / "results" / "demo" / "catalog.parquet")
    dev = catalog[catalog.split.isin(["dev_seen", "dev_unseen"])]
    assert sorted(seen) == sorted(dev.cut_id) and len(seen) >= 8


def test_an_evaluation_manifest_per_test_split_in_magpietts_form(split_run):
    import soundfile as sf

    work, _ = split_run
    results = work / "results" / "demo"
    catalog = pd.read_parquet(results / "catalog.parquet").set_index("cut_id")
    records = read_jsonl(DatasetFiles(str(results)).split_records)  # every record, with context or not
    speaker_of = {(r["audio_filepath"], r["offset"]): r["speaker"] for r in records}
    for split in ("test_seen", "test_unseen"):
        folder = Path(DatasetFiles(str(results / split)).evaluation)
        meta = json.loads((folder / "dataset_meta_info.json").read_text())
        (entry,) = meta.values()
        assert list(meta) == [f"demo_{split}"] and Path(entry["audio_dir"]) == folder
        records = read_jsonl(entry["manifest_path"])
        assert len(records) == (catalog.split == split).sum() > 0
        for r in records:
            target, context = folder / r["audio_filepath"], folder / r["context_audio_filepath"]
            assert target.is_file() and context.is_file() and target != context
            assert sf.info(target).duration == pytest.approx(r["duration"], abs=1e-6)
            assert sf.info(context).duration == pytest.approx(r["context_audio_duration"], abs=1e-6)
            row = catalog.loc[r["cut_id"]]
            assert (row.context_file, row.context_offset) != (row.source_file, row.offset)
            assert speaker_of[row.context_file, row.context_offset] == row.speaker == r["speaker"]
            assert abs(r["duration"] - row.duration) < 1e-3
            assert not np.array_equal(sf.read(target)[0], sf.read(context)[0])  # other audio


def test_contexts_of_ten_speakers_never_cross_into_train_nor_out_of_an_unseen_split():
    """The context stage's selection over 10 speakers (one group each), splits from the rules:
    every record's context checked against the split lists, not against the selection's pools."""
    import io

    from sharflow.context.part import _select_and_write, _Tally
    from sharflow.context.selection import SelectionRules

    rules = SplitRules.from_config(RULES)
    rng = np.random.default_rng(0)
    split_of, chosen = {}, []
    for s in range(10):
        speaker = f"spk{s:02d}"
        good, centre = [], rng.normal(size=16)
        for u in range(12):
            path = f"{speaker}/u{u:03d}.wav"
            split_of[path] = rules.split(speaker, path, f"u{s:02d}_{u:03d}.wav:{1000 + u}:0.000:3.000")
            record = {
                "audio_filepath": path,
                "offset": 0.0,
                "duration": 3.0,
                "text": "a",
                "split": split_of[path],
            }
            good.append((u, record))
        embeddings = centre + 0.3 * rng.normal(size=(12, 16))
        out = io.StringIO()
        rejects = _select_and_write(
            speaker, good, embeddings, SelectionRules(0.0, 1.0), "cpu", 4, out, _Tally()
        )
        chosen += [json.loads(line)["record"] for line in out.getvalue().splitlines()]
        for _, _, _, record in rejects:  # only where the pool has no other utterance
            pool = [
                p for p, sp in split_of.items() if p.startswith(speaker) and p != record["audio_filepath"]
            ]
            want = record["split"] if record["split"] in ("dev_unseen", "test_unseen") else TRAIN
            assert not [p for p in pool if split_of[p] == want]
    assert (
        set(split_of.values()) == set(SPLITS) and len(chosen) >= 100
    )  # informative: every split, most chosen
    for r in chosen:
        context = r["context_audio_filepath"]
        assert context != r["audio_filepath"] and context.split("/")[0] == r["audio_filepath"].split("/")[0]
        if r["split"] in ("dev_unseen", "test_unseen"):
            assert split_of[context] == r["split"]
        else:  # train, dev_seen, test_seen: train audio only
            assert split_of[context] == TRAIN


def test_a_fresh_dry_run_bounds_the_shard_jobs_of_every_split(split_run, tmp_path):
    """With splits, a dataset's held-out splits are Shar sets of their own (5 for demo): the fresh dry
    run's most shar and codes jobs still hold for what the run made."""
    from test_workflow import assert_fresh_dry_run_bounds_the_run

    work, config = split_run
    most = assert_fresh_dry_run_bounds_the_run(work, config, tmp_path / "f")
    assert most["demo"][0] == 5 and most["degraded"][0] == 1


def test_the_report_counts_the_train_shar_from_the_train_split(split_run):
    work, _ = split_run
    summary = pd.read_csv(work / "results" / "report" / "summary.tsv", sep="\t")
    context = json.loads((work / "results" / "demo" / "context" / "stats.json").read_text())
    shar = summary[(summary.dataset == "demo") & (summary.stage == "shar")].iloc[0]
    assert shar.hours_in == pytest.approx(context["splits"][TRAIN]["hours_out"])
    assert shar.hours_in < context["hours_out"]
    tables = (work / "results" / "report" / "tables.html").read_text()
    assert "Splits (hours and speakers" in tables and "test_unseen" in tables
