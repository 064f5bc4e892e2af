"""sharflow.work.jobs and sharflow.work.resume: which job makes which shards, the job record, the
check of a finished job's files, and a killed job's finished shards kept for its rerun."""

import json
import logging
import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sharflow.core import blocks
from sharflow.core.blocks import shard_key
from sharflow.work.jobs import (
    JobKind,
    Listing,
    damage,
    finish_job,
    job_kinds,
    plan_jobs,
    write_job_record,
)
from sharflow.work.resume import ResumableJob, kept_folder


def members(jobs) -> list[str]:
    return [s for key, count in jobs for s in blocks.block_members(key, blocks.block_size(key), count)]


def test_a_plan_is_made_by_blocks_then_smaller_blocks_then_one_job_for_the_rest():
    assert plan_jobs(123, 100) == [("0000", 100), ("00010", 10), ("00011", 10), ("00012", 3)]
    assert plan_jobs(21, 10) == [("00000", 10), ("00001", 10), ("000020", 1)]
    assert plan_jobs(16, 10) == [("00000", 10), ("00001", 6)]
    assert plan_jobs(1011, 1000) == [("000", 1000), ("00100", 10), ("001010", 1)]
    assert plan_jobs(3, 1) == [("000000", 1), ("000001", 1), ("000002", 1)]
    assert plan_jobs(2, 1, first=10) == [("000010", 1), ("000011", 1)]  # a later generation's
    assert plan_jobs(12, 10, first=20) == [("00002", 10), ("00003", 2)]
    assert plan_jobs(9, 10) == [("00000", 9)] and plan_jobs(0, 10) == []
    for n, per_job in ((1, 10), (2, 10), (10, 10), (99, 100), (1234, 1000), (12, 1)):
        jobs = plan_jobs(n, per_job)  # every shard in exactly one job, in order
        assert members(jobs) == [shard_key(s) for s in range(n)]
        assert all(count <= per_job for _, count in jobs)


@pytest.mark.parametrize("per_job", [10, 100])
def test_the_plan_at_its_edges(per_job):
    """An exact multiple of the block size, one shard more, one less, a single shard."""
    digits = len(str(per_job)) - 1
    exact = plan_jobs(2 * per_job, per_job)
    assert exact == [(shard_key(0)[:-digits], per_job), (shard_key(per_job)[:-digits], per_job)]
    more = plan_jobs(2 * per_job + 1, per_job)
    assert more[:2] == exact and more[2:] == [(shard_key(2 * per_job), 1)]
    less = plan_jobs(2 * per_job - 1, per_job)
    assert less[0] == exact[0] and members(less[1:]) == [
        shard_key(s) for s in range(per_job, 2 * per_job - 1)
    ]
    assert less[-1] == (shard_key(2 * per_job - 10)[:-1], 9)  # the last 9 in one job
    assert plan_jobs(1, per_job) == [("000000", 1)]
    assert plan_jobs(11, per_job)[-1] == ("000010", 1) and plan_jobs(12, per_job)[-1] == ("00001", 2)


def test_each_kind_of_job_is_a_rule_tried_from_the_largest():
    kinds = job_kinds("codes", 100)
    assert [k.name for k in kinds] == [
        "codes_block",
        "codes_block10",
        *(f"codes_tail{n}" for n in range(9, 1, -1)),
        "codes_shard",
    ]
    assert kinds[0] == JobKind("codes_block", 100, 100) and kinds[1] == JobKind("codes_block10", 10, 10)
    assert kinds[2] == JobKind("codes_tail9", 10, 9) and kinds[-1] == JobKind("codes_shard", 1, 1)
    assert [k.name for k in job_kinds("shar", 1)] == ["shar_shard"]
    for n, per_job in ((123, 100), (21, 10), (1011, 1000), (7, 10)):  # every job of a plan has its rule
        kinds = {(k.size, k.count) for k in job_kinds("shar", per_job)}
        assert {(blocks.block_size(key), count) for key, count in plan_jobs(n, per_job)} <= kinds


def finished_job(tmp_path: Path, sizes=(10, 20)) -> tuple[str, list[str]]:
    """A job that wrote two files under tmp_path/shar/ and its record under tmp_path/jobs/."""
    files = []
    for i, size in enumerate(sizes):
        path = tmp_path / "shar" / f"f{i}.tar"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * size)
        files.append(str(path))
    record = tmp_path / "jobs" / "shards-000000-000001.json"
    record.parent.mkdir(exist_ok=True)
    finish_job({"f0": files[0], "f1": files[1], "job": str(record)}, ["000000", "000001"])
    return str(record), files


def test_a_record_names_every_file_with_its_size_and_a_damaged_job_is_found(tmp_path):
    record, files = finished_job(tmp_path)
    written = json.loads(Path(record).read_text())
    assert written["shards"] == ["000000", "000001"]
    finished = datetime.fromisoformat(written["finished"])  # in UTC, whatever the node's zone
    assert finished.utcoffset() == timedelta(0) and abs(datetime.now(UTC) - finished) < timedelta(minutes=5)
    assert written["files"] == {"../shar/f0.tar": 10, "../shar/f1.tar": 20}  # relative: a tree can move
    assert damage(record, Listing()) == []
    Path(files[1]).write_bytes(b"x" * 19)  # truncated
    assert damage(record, Listing()) == [f"{files[1]} is 19 bytes, its job wrote 20"]
    Path(files[0]).unlink()
    assert damage(record, Listing()) == [
        f"{files[0]} is missing",
        f"{files[1]} is 19 bytes, its job wrote 20",
    ]
    assert os.path.exists(record)  # looking removes nothing: the run forces the job (rules/common.smk)
    os.remove(record)
    assert damage(record, Listing()) == []  # no record: the job has not run
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"shards": ["000000"], "finished": "then"}))
    assert damage(str(old), Listing()) == []  # a record from before sizes were kept: not checked


def test_a_listing_reads_a_folder_once_until_it_changes(tmp_path, monkeypatch):
    for i in range(3):
        (tmp_path / f"{i}.tar").write_bytes(b"x" * i)
    listing, scans = Listing(), []
    real = os.scandir
    # only this test's folder counts: a workflow run in a background thread of the session lists others

    def scandir(path):
        if str(path).startswith(str(tmp_path)):
            scans.append(path)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert [listing.size(str(tmp_path / f"{i}.tar")) for i in range(3)] == [0, 1, 2]
    assert listing.size(str(tmp_path / "nope.tar")) is None and len(scans) == 1
    (tmp_path / "3.tar").write_bytes(b"xyz")
    os.utime(tmp_path, ns=(1, os.stat(tmp_path).st_mtime_ns + 1))  # a changed folder is listed again
    assert listing.size(str(tmp_path / "3.tar")) == 3 and len(scans) == 2
    assert listing.size(str(tmp_path / "missing" / "x.tar")) is None
    monkeypatch.chdir(tmp_path)  # a bare name is in the working folder
    assert Listing().size("2.tar") == 2 and Listing().size("nope.tar") is None


def test_a_killed_job_resumes_with_the_shards_it_finished(tmp_path):
    record = str(tmp_path / "jobs" / "shards-000000-000002.json")
    outs = {s: [str(tmp_path / f / f"x.{s}") for f in ("cuts", "audio")] for s in ("000000", "000001")}
    made = []

    def run(keys, kill_after=None):
        with ResumableJob(record, list(outs)) as resume:
            for shard, files in outs.items():
                if resume.restore(shard, files, keys[shard]):
                    continue
                for i, path in enumerate(files):
                    Path(path).parent.mkdir(parents=True, exist_ok=True)
                    Path(path).unlink(missing_ok=True)
                    Path(path).write_text(f"{shard}-{i}-{keys[shard]}")
                made.append(shard)
                resume.keep(shard, files, keys[shard])
                if shard == kill_after:
                    raise KeyboardInterrupt  # the kill: the block ends without its record
            write_job_record(record, list(outs), [f for fs in outs.values() for f in fs])

    def snakemake_deletes_outputs():  # before it runs a job again
        for files in outs.values():
            for f in files:
                Path(f).unlink(missing_ok=True)

    k1 = {"000000": "a", "000001": "b"}
    with pytest.raises(KeyboardInterrupt):
        run(k1, kill_after="000000")
    inode = os.stat(outs["000000"][0]).st_ino
    snakemake_deletes_outputs()
    run(k1)
    assert made == ["000000", "000001"]  # shard 000000 was not made again
    assert os.stat(outs["000000"][0]).st_ino == inode and Path(outs["000000"][1]).read_text() == "000000-1-a"
    kept = kept_folder(record)
    assert sorted(p.name for p in kept.iterdir()) == ["000000", "000000.json", "000001", "000001.json"]
    # the job runs again for its second shard's new records: the first is put back, the same inode
    snakemake_deletes_outputs()
    run({"000000": "a", "000001": "c"})
    assert made == ["000000", "000001", "000001"]
    assert os.stat(outs["000000"][0]).st_ino == inode and Path(outs["000001"][0]).read_text() == "000001-0-c"
    assert [p.stat().st_nlink for p in sorted((kept / "000001").iterdir())] == [2, 2]  # the old ones let go
    # a key not known (None) never puts a shard back
    snakemake_deletes_outputs()
    run({"000000": None, "000001": "c"})
    assert made == ["000000", "000001", "000001", "000000"]


def test_a_kept_file_damaged_in_place_is_never_put_back(tmp_path):
    """Both names are one inode: a file damaged in place under its final name (the same size, other
    bytes: a bad disk block) is damaged in the kept folder too. Its digest is not the one it was kept
    with, so no file of the shard is put back."""
    record = str(tmp_path / "jobs" / "shards-000000-000001.json")
    files = [str(tmp_path / "out" / "x.tar"), str(tmp_path / "out" / "x.json")]
    Path(files[0]).parent.mkdir(parents=True)
    for f in files:
        Path(f).write_text("made whole")
    with ResumableJob(record, ["000000"]) as job:
        job.keep("000000", files, "k", audio="a")
    with open(files[0], "r+") as f:
        f.write("damaged!")  # the same size, other bytes
    for f in files:
        Path(f).unlink()
    with ResumableJob(record, ["000000"]) as job:
        assert not job.restore("000000", files, "k") and not job.restore_part(
            "000000", files, [1], "audio", "a"
        )
        assert not Path(files[1]).exists()


def test_a_resumed_job_says_what_it_kept_and_what_it_threw_away(tmp_path, caplog):
    """The log of a resumed job (what a user reads after a kill), a shard restored into a folder that
    is gone, a shard kept twice (a kill between its links and its mark), a part put back."""
    record = str(tmp_path / "jobs" / "shards-000000-000002.json")
    shards = ("000000", "000001", "000002")
    files = {s: [str(tmp_path / "out" / f / f"x.{s}.tar") for f in ("cuts", "audio")] for s in shards}
    for shard in ("000000", "000001"):
        for f in files[shard]:
            Path(f).parent.mkdir(parents=True, exist_ok=True)
            Path(f).write_text(f"made {shard}")
    with pytest.raises(KeyboardInterrupt), ResumableJob(record, shards) as job:
        job.keep("000000", files["000000"], "k0", audio="a0")
        job.keep("000000", files["000000"], "k0", audio="a0")  # again: the same links, no error
        job.keep("000001", files["000001"], "k1", audio="a1")
        raise KeyboardInterrupt
    shutil.rmtree(tmp_path / "out")  # restored into folders that no longer exist
    with caplog.at_level(logging.INFO, logger="sharflow.work.resume"), ResumableJob(record, shards) as job:
        assert job.restore("000000", files["000000"], "k0")
        assert Path(files["000000"][0]).read_text() == "made 000000"
        assert not job.restore("000001", files["000001"], "k1 corrected")
        assert job.restore_part("000001", files["000001"], [1], "audio", "a1")
        assert Path(files["000001"][1]).read_text() == "made 000001" and not Path(files["000001"][0]).exists()
        Path(files["000001"][0]).write_text("written again 000001")
        job.keep("000001", files["000001"], "k1 corrected", audio="a1")
        assert not job.restore("000002", files["000002"], "k2")
    assert caplog.messages == [
        "kept: 1 shard(s) made before were put back: 000000",
        "kept: 1 shard(s) kept their audio and were written again: 000001",
    ]
