"""Splits: speaker-disjoint unseen splits, seen held-out utterances, stable as data grows, and the
splits job's cross-dataset rule (sharflow.core.splits, sharflow.splits.stage)."""

import json
import os
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from sharflow.core.errors import SharflowError
from sharflow.core.layout import DatasetFiles
from sharflow.core.splits import HELD_OUT, SPLITS, TRAIN, SplitRules, context_pool, span_key
from sharflow.splits.stage import CONFLICT, DatasetSplits, assign_splits
from testkit import demo_config, read_jsonl, run_snakemake, write_jsonl, write_tone

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


def test_contradicting_split_settings_are_named():
    with pytest.raises(SharflowError, match=r"datasets\.a\.splits: the unseen fractions"):
        SplitRules.from_config(
            {"dev_unseen": {"fraction": 0.5}, "test_unseen": {"fraction": 0.5}}, "datasets.a.splits"
        )
    with pytest.raises(
        SharflowError, match=r"'spk1' is listed under both dev_unseen\.speakers and test_unseen"
    ):
        SplitRules.from_config({"dev_unseen": {"speakers": ["spk1"]}, "test_unseen": {"speakers": ["spk1"]}})


def test_context_pools_keep_held_out_audio_out_of_train():
    assert [context_pool(s) for s in SPLITS] == [TRAIN, TRAIN, "dev_unseen", TRAIN, "test_unseen"]
    assert set(HELD_OUT) == set(SPLITS) - {TRAIN}


def write_dataset(root, manifest, rows):
    """Records as prepare writes them, for files under `root` (tones of distinct lengths)."""
    records = []
    for speaker, rel, seconds in rows:
        if not (root / rel).exists():
            write_tone(root / rel, seconds=seconds)
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
    settings: whatever b's rules say, a span a holds out is rejected from b's train."""
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
        "a": DatasetSplits(str(tmp_path / "a.jsonl"), str(audio), a_rules),
        "b": DatasetSplits(str(tmp_path / "b.jsonl"), str(tmp_path), {}),  # b: everything train
    }
    out = {}
    for name, n in (("a", 48), ("b", 25)):
        files = {k: str(tmp_path / f"{name}.{k}") for k in ("records", "rejected", "stats")}
        stats = assign_splits(
            name,
            datasets,
            records_in=n,
            out_records=files["records"],
            rejected_dir=files["rejected"],
            stats=files["stats"],
        )
        assert (
            stats["records_in"]
            == n
            == sum(v["records"] for v in stats["splits"].values()) + stats["rejected_total"]
        )
        out[name] = (stats, read_jsonl(files["records"]), files["rejected"])
    a_stats, a_records, _ = out["a"]
    assert a_stats["rejected_total"] == 0 and a_stats["splits"]["dev_unseen"]["records"] == 6
    held = {os.path.realpath(audio / r["audio_filepath"]) for r in a_records if r["split"] != TRAIN}
    assert 12 < len(held) < 24  # s1, s2 and some dev_seen utterances
    b_stats, b_records, b_rejected = out["b"]
    in_b = {os.path.realpath(tmp_path / r["audio_filepath"]) for r in b_records}
    assert not in_b & held and {r["split"] for r in b_records} == {TRAIN}
    rejected = read_jsonl(f"{b_rejected}/{CONFLICT}.jsonl")
    shared = {os.path.realpath(audio / rel) for _, rel, _ in rows_a[:24]}
    assert len(rejected) == b_stats["rejected"][CONFLICT] == len(shared & held) >= 12
    assert "is dev_" in rejected[0]["detail"] and "dataset a" in rejected[0]["detail"]
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


def test_splits_in_the_workflow_keep_held_out_audio_out_of_train_and_its_contexts(tmp_path):
    """The demo and degraded datasets through prepare, splits, context and shar with splits on for
    demo (its own block: two unseen speakers by list, seen utterances by fraction) and off for
    degraded (the workflow's block), checked against the split lists."""
    config = demo_config(degraded=True, quality={"enabled": False}, shar={"shard_size": 8})
    config["datasets"]["demo"]["splits"] = {
        "seed": 1,
        "dev_unseen": {"speakers": ["kal"]},
        "test_unseen": {"speakers": ["us_m3"]},
        "dev_seen": {"fraction": 0.15},
        "test_seen": {"fraction": 0.15},
    }
    work = tmp_path / "w"
    run_snakemake(work, config, *(DatasetFiles(f"results/{ds}").shar_stats for ds in ("demo", "degraded")))

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
    degraded = json.loads(Path(DatasetFiles(str(work / "results" / "degraded")).split_stats).read_text())
    held_slt = [p for (ds, p, _), s in split_of.items() if ds == "demo" and "/slt/" in p and s != TRAIN]
    assert degraded["rejected"] == {CONFLICT: len(held_slt)} and held_slt
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
