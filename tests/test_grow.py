"""A Shar set that grows (sharflow.shar.plan, shar.grow): records already in shards stay where they
are, new ones go to a new generation of shards, and only the jobs whose records changed run again."""

import json
import logging
import os
from pathlib import Path

import pytest

from sharflow.core.blocks import block_members, block_size, shard_numbers
from sharflow.core.errors import SharflowError
from sharflow.core.layout import DatasetFiles
from sharflow.dataset.tables import identity_section
from sharflow.shar.plan import correction_notes, plan_shards
from sharflow.work.jobs import plan_jobs, planned_jobs
from testkit import planned_lines, write_jsonl


def spans(n: int, start: int = 0, **extra) -> list[dict]:
    return [
        {
            "audio_filepath": f"s{i % 3}/u{i}.wav",
            "offset": 0.0,
            "duration": 1 + i / 10,
            "text": f"t{i}",
            **extra,
        }
        for i in range(start, start + n)
    ]


def plan(tmp_path, records, grow="append", shard_size=5, seed=0, name="ds", **leaks):
    files = DatasetFiles(str(tmp_path / name))
    write_jsonl(tmp_path / "with_context.jsonl", records)
    planned = plan_shards(
        str(tmp_path / "with_context.jsonl"),
        plan=files.shard_plan,
        inputs_dir=files.shar_inputs,
        shard_size=shard_size,
        seed=seed,
        grow=grow,
        **leaks,
    )
    return planned, files


def stamps(files: DatasetFiles) -> dict[str, int]:
    """When each job's inputs file was last written."""
    return {p.name: p.stat().st_mtime_ns for p in Path(files.shar_inputs).glob("*.jsonl")}


def test_new_records_are_a_new_generation_and_planned_ones_stay(tmp_path):
    first, files = plan(tmp_path, spans(52))
    assert first["generations"] == [{"first": 0, "shards": 11, "records": 52}]
    before, placed = stamps(files), dict(planned_lines(files.shar_inputs))
    old = planned_lines(files.shar_inputs)
    # four new records, one of them in the middle of the file: the old ones keep their shards
    grown = spans(52)
    grown[20:20] = spans(1, start=100)
    grown += spans(3, start=101)
    second, _ = plan(tmp_path, grown)
    assert second["generations"] == [first["generations"][0], {"first": 20, "shards": 1, "records": 4}]
    assert shard_numbers(second) == [*range(11), 20] and second["num_shards"] == 12
    assert second["records"] == 56 and second["shards"][:11] == first["shards"]
    after = stamps(files)
    assert {k: after[k] for k in before} == before  # no old job's inputs rewritten: none runs again
    assert planned_lines(files.shar_inputs)[: len(old)] == old and len(placed) == 11
    new = [line for shard, line in planned_lines(files.shar_inputs) if shard == 20]
    assert sorted(json.loads(x)["audio_filepath"] for x in new) == sorted(
        f"s{i % 3}/u{i}.wav" for i in range(100, 104)
    )
    # the jobs of the second generation are its own: the first's never change
    assert planned_jobs(second, 10) == [("00000", 10), ("000010", 1), ("000020", 1)]
    again, _ = plan(tmp_path, grown)
    assert again == second and stamps(files) == after  # nothing new: nothing rewritten


def test_a_removed_record_remakes_only_the_job_that_held_it(tmp_path):
    _, files = plan(tmp_path, spans(40), shard_size=2)  # 20 shards: two jobs of 10
    before = stamps(files)
    lines = planned_lines(files.shar_inputs)
    gone = json.loads(lines[-1][1])  # in shard 19, the second job's
    second, _ = plan(
        tmp_path, [r for r in spans(40) if r["audio_filepath"] != gone["audio_filepath"]], shard_size=2
    )
    after = stamps(files)
    changed = {name for name in before if after[name] != before[name]}
    assert changed == {"shards-000010-000019.jsonl"} and second["removed"] == 1
    assert second["shards"][19]["records"] == 1 and second["records"] == 39
    assert len(planned_lines(files.shar_inputs)) == 39


@pytest.mark.parametrize("leaks", ["report", "rebuild"])
def test_a_record_in_a_shard_found_to_be_held_out_is_reported_and_remade_only_when_asked(
    tmp_path, leaks, caplog
):
    """Two records already in shards are now rejected by the splits job as held-out audio, and one
    other is simply gone: with shar.leaks: report the two stay in their shards (their jobs' inputs
    not rewritten) and are listed with shard and reason; with rebuild they leave like the third."""
    _, files = plan(tmp_path, spans(40), shard_size=2)
    before, lines = stamps(files), planned_lines(files.shar_inputs)
    leaked = [json.loads(lines[i][1]) for i in (0, 3)]  # shards 0 and 1: the first job's
    gone = json.loads(lines[-1][1])  # shard 19: the second job's
    rejects = Path(files.split_rejected)
    write_jsonl(
        rejects / "same_content_held_out.jsonl",
        [{"reason": "same_content_held_out", "detail": "the same as ...", "original": json.dumps(leaked[0])}],
    )
    write_jsonl(
        rejects / "linked_speaker_held_out.jsonl",
        [{"reason": "linked_speaker_held_out", "detail": "...", "original": json.dumps(leaked[1])}],
    )
    out = {r["audio_filepath"] for r in (*leaked, gone)}
    second, _ = plan(
        tmp_path,
        [r for r in spans(40) if r["audio_filepath"] not in out],
        shard_size=2,
        leaks=leaks,
        held_out_rejects=str(rejects),
    )
    changed = {name for name, stamp in stamps(files).items() if stamp != before[name]}
    if leaks == "rebuild":
        assert "leaks" not in second and second["removed"] == 3 and second["records"] == 37
        assert changed == {"shards-000000-000009.jsonl", "shards-000010-000019.jsonl"}
        return
    assert second["removed"] == 1 and second["records"] == 39 and changed == {"shards-000010-000019.jsonl"}
    assert [(x["shard"], x["reason"]) for x in second["leaks"]] == [
        (0, "same_content_held_out"),
        (1, "linked_speaker_held_out"),
    ]
    assert "2 record(s) in shards made before are now found to be held-out audio" in caplog.text
    assert planned_lines(files.shar_inputs)[:4] == lines[:4]
    card = "\n".join(identity_section("ds", {"rejected": {}}, None, second["leaks"]))
    assert "Held-out audio in shards made before: 2 record(s)" in card and "shard 1: `s" in card


def with_contexts(records: list[dict], shift: int = 1, speaker: str = "a") -> list[dict]:
    """Each record with a speaker and the next record's span as its context (and that one's text)."""
    out = []
    for i, r in enumerate(records):
        c = records[(i + shift) % len(records)]
        context = {"audio_filepath": c["audio_filepath"], "offset": 0.0, "duration": c["duration"]}
        out.append(
            {
                **r,
                "speaker": speaker,
                "source_audio": {"sampling_rate": 16000},
                **{f"context_audio_{k}": v for k, v in context.items() if k != "audio_filepath"},
                "context_audio_filepath": context["audio_filepath"],
                "context_audio_text": c["text"],
            }
        )
    return out


def planned_records(files) -> dict[str, dict]:
    return {
        json.loads(line)["audio_filepath"]: json.loads(line) for _, line in planned_lines(files.shar_inputs)
    }


def test_a_corrected_record_takes_its_new_line_in_its_shard_and_only_its_job_runs_again(tmp_path, caplog):
    """Two records' texts are corrected (one in each job of ten shards): each job's inputs file has
    the new line in the old one's place, and nothing else changes; a record whose context choice alone
    moved keeps its old line; one whose speaker changed takes its new context too."""
    caplog.set_level(logging.INFO, logger="sharflow.shar.plan")
    first, files = plan(tmp_path, with_contexts(spans(40)), shard_size=2)  # 20 shards: two jobs of 10
    before, lines = stamps(files), planned_lines(files.shar_inputs)
    assert len({json.loads(line)["context_audio_filepath"] for _, line in lines}) == 40  # contexts vary
    fixed = with_contexts(spans(40))
    fixed[3]["text"] = "t3, corrected"
    fixed[2]["context_audio_text"] = "t3, corrected"  # record 2's context is record 3
    second, _ = plan(tmp_path, fixed, shard_size=2)
    corrected = {c["cut_id"]: c["fields"] for c in second["corrected"]}
    assert corrected == {"s2-u2-0-120000": ["context_audio_text"], "s0-u3-0-130000": ["text"]}
    shard_of = {json.loads(line)["audio_filepath"]: int(shard) for shard, line in lines}
    jobs = {
        f"shards-0000{shard_of[p] // 10}0-0000{shard_of[p] // 10}9.jsonl" for p in ("s0/u3.wav", "s2/u2.wav")
    }
    changed = {name for name, stamp in stamps(files).items() if stamp != before[name]}
    assert changed == jobs
    now = planned_lines(files.shar_inputs)
    assert [shard for shard, _ in now] == [shard for shard, _ in lines]  # every record in its place
    assert planned_records(files)["s0/u3.wav"] == fixed[3]
    assert "2 record(s) in shards made before changed under their cut ids" in caplog.text
    assert second["records"] == first["records"] and second["shards"] == first["shards"]
    notes = correction_notes(second["corrected"], set(range(20)))
    assert len(notes) == len({c["shard"] for c in second["corrected"]}) and all(
        "its audio and codes are kept" in n for n in notes
    )
    assert (
        f"shard {shard_of['s0/u3.wav']} is written again: 1 record(s) changed since it was made "
        in "".join(notes)
    )

    # the context stage chose other clips (the corpus grew, say): made shards keep theirs
    moved = with_contexts(spans(40), shift=2)
    moved[3]["text"] = "t3, corrected"
    moved[1]["context_audio_text"] = "t3, corrected"
    before = stamps(files)
    third, _ = plan(tmp_path, moved, shard_size=2)
    assert "corrected" not in third and stamps(files) == before
    # a speaker changed: the record takes its new context with its new speaker
    relabelled = [dict(r) for r in moved]
    relabelled[5]["speaker"] = "b"
    fourth, _ = plan(tmp_path, relabelled, shard_size=2)
    assert "its audio and codes are made again" in correction_notes(fourth["corrected"], set(range(20)))[0]
    assert fourth["corrected"][0]["fields"] == [
        "speaker",
        "context_audio_filepath",
        "context_audio_duration",
        "context_audio_text",
    ]
    assert planned_records(files)["s2/u5.wav"] == relabelled[5]
    assert planned_records(files)["s0/u6.wav"]["context_audio_filepath"] == "s1/u7.wav"  # kept, not moved


def test_other_audio_under_a_planned_cut_id_stops_the_plan(tmp_path):
    plan(tmp_path, with_contexts(spans(12)))
    changed = with_contexts(spans(12))
    changed[3]["source_audio"] = {"sampling_rate": 48000}
    with pytest.raises(SharflowError, match=r"s0-u3-0-130000 is in a shard already, and its source_audio"):
        plan(tmp_path, changed)
    rebuilt, files = plan(tmp_path, changed, grow="rebuild")  # asked for: every shard planned afresh
    fresh, fresh_files = plan(tmp_path, changed, name="fresh")
    assert rebuilt == fresh and planned_lines(files.shar_inputs) == planned_lines(fresh_files.shar_inputs)


def test_new_settings_plan_afresh(tmp_path):
    plan(tmp_path, spans(30))
    other, files = plan(tmp_path, spans(30) + spans(5, start=30), shard_size=7)
    assert other["generations"] == [{"first": 0, "shards": 5, "records": 35}]
    assert sorted(os.listdir(files.shar_inputs)) == [
        "plan.json",
        "shards-000000-000004.jsonl",
    ]  # old jobs' gone


@pytest.mark.parametrize("per_job", [10, 100])
def test_a_generation_is_made_by_jobs_of_its_own(per_job):
    """Generations start on a multiple of 10; their jobs never reach back into an earlier one's."""
    assert plan_jobs(12, per_job, first=20) == [("00002", 10), ("00003", 2)]
    assert plan_jobs(1, per_job, first=130) == [("000130", 1)]
    grown = {"generations": [{"first": 0, "shards": 123, "records": 0}, {"first": 130, "shards": 215}]}
    jobs = planned_jobs(grown, per_job)
    shards = [int(s) for key, n in jobs for s in block_members(key, block_size(key), n)]
    assert shards == shard_numbers(grown)
    if per_job == 100:
        tens = [(f"000{k}", 10) for k in (13, 14, 15, 16, 17, 18, 19)]
        assert jobs[3:] == [
            ("00012", 3),
            *tens,
            ("0002", 100),
            *[(f"0003{k}", 10) for k in range(4)],
            ("00034", 5),
        ]
    with pytest.raises(ValueError, match="multiple of 10"):
        plan_jobs(3, per_job, first=12)
