"""kill -9 in the middle of the context, shar and codes stages, then rerun: the result is the same.

One local run of the demo and the dirty dataset (the session's two_datasets config) on one core,
started from the session run's prepare, text and quality outputs (copied with Snakemake's records of them,
so those jobs are complete: the kill points are in the later stages, and the quality stage's own
worker-count check is tests/test_quality.py's), is killed three times (SIGKILL to snakemake and
every job process): while a context part runs, while shard files are being written, and while codec
codes are being computed (in the job that encodes a block of ten shards). After each kill the run
is resumed as the README says (`--unlock`, then the same command). A watcher records every file
seen under a final Shar name during the killed runs: each must already have its final size, i.e.
no partial file is ever visible. The final outputs must equal an uninterrupted run's (the session's
two_datasets run, on two cores) byte for byte: this is also the suite's check that outputs do not
depend on the worker count (1 vs 2 per job), nor on how jobs start (the killed runs' jobs and the
reference run's are forks of a warm server, sharflow.work.warm: the session's shared one, the killed runs'
each its own; the resumed run's start cold).
"""

import contextlib
import hashlib
import os
import shutil
import signal
import threading
import time
from collections import defaultdict
from pathlib import Path

import yaml

from sharflow.core import layout
from sharflow.work import warm
from testkit import (
    assert_informative_codes,
    assert_same_outputs,
    codes_in_tars,
    process_group,
    run_environment,
    run_snakemake,
    snakemake_cmd,
)


class Watcher(threading.Thread):
    """Sizes of every file under `root` seen while it runs (polled every few milliseconds)."""

    def __init__(self, root: Path):
        super().__init__(daemon=True)
        self.root = root
        self.seen: dict[str, set[int]] = defaultdict(set)
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            for dirpath, _, files in os.walk(self.root):
                for name in files:
                    path = os.path.join(dirpath, name)
                    with contextlib.suppress(FileNotFoundError):
                        self.seen[path].add(os.stat(path).st_size)
            time.sleep(0.003)


def run_and_kill(
    work: Path, config: dict, when, what: str, timeout: float = 600, passed=None, again=None
) -> str:
    """Start the workflow (1 core) and SIGKILL its whole process group once when(work) is true.

    A point that is a fraction of a second wide can pass unseen on a busy machine: once `passed(work)`
    is true (or the run ended) it was missed, the run is killed there and, with `again`, which makes
    the run do that part over (a repair the workflow itself plans), started again, up to three times
    in all. A point seen but passed by the time the kill lands (the job finished in between: under
    load the check and the kill can be far apart) is missed too."""
    work.mkdir(parents=True, exist_ok=True)
    log = work / f"killed-{what}.log"
    cmd = snakemake_cmd(work, config, "--cores", "1")
    # the run's jobs are forks of its own warm server, not the session's shared one: they are in the
    # run's process group, and the kill of the group ends them with it
    own_server = {**run_environment(), warm.SHARED: ""}
    for attempt in range(3):
        with process_group(cmd, log, env=own_server) as proc:
            deadline = time.monotonic() + timeout
            hit = False
            try:
                while not (hit := when(work)):
                    if proc.poll() is not None or (passed is not None and passed(work)):
                        break
                    assert time.monotonic() < deadline, f"no {what} point within {timeout} s"
                    time.sleep(0.002)
            finally:
                with contextlib.suppress(ProcessLookupError):  # a run that ended has no group left
                    os.killpg(proc.pid, signal.SIGKILL)
        if hit and (passed is None or not passed(work)):
            return log.read_text()
        assert again is not None and attempt < 2, (
            f"the run ended before the {what} point:\n{log.read_text()[-3000:]}"
        )
        run_snakemake(work, config, "--unlock")  # a run killed past the point left its lock
        again(work)
    raise AssertionError("unreachable")


SHAR_BLOCK = "results/demo/shar_jobs/shards-000000-000009.json"
CODES_BLOCK = "results/demo/codes_jobs/tiny_nemo/shards-000000-000009.json"


def shar_block_again(work: Path) -> None:
    """Withdraw the shar block's record and the shards it kept: the next run makes that block again
    (a kept shard would be put back, not made, and the point never come)."""
    (work / SHAR_BLOCK).unlink(missing_ok=True)
    shutil.rmtree(work / "results/demo/shar_jobs/.shards-000000-000009.kept", ignore_errors=True)


def codes_block_again(work: Path) -> None:
    """Withdraw the finished codes block's record and the shards it kept: the next run encodes that
    block again (a kept shard would be put back, not encoded, and the point never come)."""
    (work / CODES_BLOCK).unlink(missing_ok=True)
    shutil.rmtree(work / "results/demo/codes_jobs/tiny_nemo/.shards-000000-000009.kept", ignore_errors=True)


def count(work: Path, pattern: str) -> int:
    return len(list(work.glob(pattern)))


def mid_context(work: Path) -> bool:
    """One part done, the other started (1 core: parts run one after the other, in either order)."""
    done = count(work, "results/demo/context/parts/part-*.stats.json")
    return done == 1 and count(work, "logs/context_part/demo/part-*.log") == 2


def mid_shar(work: Path) -> bool:
    """The block of shards 0-9 has finished some of its shards, not all (its ten shards of five cuts
    take ~0.3 s: a narrower point could be missed on a busy machine)."""
    done = count(work, "results/demo/shar_jobs/.shards-000000-000009.kept/*.json")
    return 0 < done < 10 and not (work / SHAR_BLOCK).exists()


def block_done(record: str):
    """Whether the block job whose record is `record` (under the run's folder) has finished."""
    return lambda work: (work / record).exists()


def mid_codes(work: Path) -> bool:
    """The demo's codes block (shards 0-9) encoding: its ranks' scratch folder there, some of its
    shards written and kept for a rerun, not all."""
    done = count(work, "results/demo/codes_jobs/tiny_nemo/.shards-000000-000009.kept/*.json")
    return count(work, "results/demo/codes_jobs/tiny_nemo/.ranks.*") > 0 and 0 < done < 10


def kept(work: Path, folder: str) -> set[tuple[int, str]]:
    """(inode, sha256) of every file of the shards a killed job finished and kept (its .kept folder
    holds a hard link to each, and the shard's mark, written last: a shard killed while its files were
    being linked has no mark, is not put back, and is not counted)."""
    marked = [d for d in (work / folder).iterdir() if d.is_dir() and (d.parent / f"{d.name}.json").exists()]
    return {(p.stat().st_ino, sha256(p)) for d in marked for p in d.iterdir() if p.is_file()}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def leftovers(work: Path) -> list[str]:
    """Temp and scratch files and folders under results/ that no finished run should leave."""
    marks = (".shard-", ".ranks.", ".codes.", ".finished", ".tmp")
    return sorted(str(p) for p in (work / "results").rglob(".*") if any(m in p.name for m in marks))


def seed(
    reference_work: Path, work: Path, datasets=("demo", "dirty"), stages=("prepare", "text", "quality")
) -> None:
    """The reference run's outputs of `stages` (mtimes kept, the text normalizer's record with them)
    and Snakemake's metadata, into `work`."""
    for ds in datasets:
        for stage in stages:
            shutil.copytree(reference_work / "results" / ds / stage, work / "results" / ds / stage)
    normalizers = Path(layout.text_normalizer("en")).parent
    shutil.copytree(reference_work / normalizers, work / normalizers)
    shutil.copytree(reference_work / ".snakemake" / "metadata", work / ".snakemake" / "metadata")


def crash_run(reference_work: Path, tmp: Path) -> dict:
    """The killed and resumed runs (the module docstring), started from the reference run's prepare
    and quality outputs; what the test checks, gathered. Runs in the background (conftest.early_runs)
    as soon as the reference run is done, on one core, beside the other tests."""
    work = tmp / "work"
    seed(reference_work, work)
    config = yaml.safe_load((reference_work / "config.yaml").read_text())
    seen = {"work": work}
    watcher = Watcher(work / "results" / "demo" / "shar")
    watcher.start()
    try:
        seen["context_log"] = run_and_kill(work, config, mid_context, "context")
        seen["finished"] = [
            p for p in ("0000", "0001") if (work / f"results/demo/context/parts/part-{p}.jsonl").exists()
        ]
        run_snakemake(work, config, "--unlock")
        dry = run_snakemake(work, config, "-n")
        seen["planned"] = dry.stdout + dry.stderr

        run_and_kill(work, config, mid_shar, "shar", passed=block_done(SHAR_BLOCK), again=shar_block_again)
        seen["shar_cuts_after_kill"] = count(work, "results/demo/shar/cuts/*")
        seen["shar_kept"] = kept(work, "results/demo/shar_jobs/.shards-000000-000009.kept")
        run_snakemake(work, config, "--unlock")
        dry = run_snakemake(work, config, "-n")
        seen["planned_after_shar_kill"] = dry.stdout + dry.stderr

        run_and_kill(
            work, config, mid_codes, "codes", passed=block_done(CODES_BLOCK), again=codes_block_again
        )
        seen["codes_kept"] = kept(work, "results/demo/codes_jobs/tiny_nemo/.shards-000000-000009.kept")
        run_snakemake(work, config, "--unlock")
        dry = run_snakemake(work, config, "-n")
        seen["planned_after_codes_kill"] = dry.stdout + dry.stderr
    finally:
        watcher.stop.set()
        watcher.join()
    # the killed runs' jobs start warm (forks of the run's warm server, killed with the run's process
    # group); this one's cold, and its outputs are byte-identical to the warm reference run's
    cold = {**run_environment(), warm.OFF: "0"}
    seen["resumed"] = run_snakemake(work, config, "--cores", "1", env=cold).stderr
    seen["watched"] = {p: sizes for p, sizes in watcher.seen.items() if "/." not in p}
    seen["final"] = {
        (p.stat().st_ino, sha256(p)) for p in (work / "results" / "demo").rglob("*") if p.is_file()
    }
    seen["leftovers"] = leftovers(work)
    return seen


def planned_job(dry_run: str, marker: str) -> str:
    """The block of a dry run's output (lines between blank lines) that names `marker`: the job's
    rule, files and Snakemake's reason for planning it."""
    blocks = [b for b in dry_run.split("\n\n") if marker in b]
    return "\n\n".join(blocks) or dry_run[-3000:]


def test_kill_9_mid_stage_then_rerun_is_byte_identical(two_datasets, crash):
    reference = two_datasets[0] / "results"
    assert "rule quality_part" not in crash["context_log"] and "rule prepare" not in crash["context_log"]
    assert len(crash["finished"]) == 1  # the seeded jobs are done; one context part of two finished
    interrupted = ({"0000", "0001"} - set(crash["finished"])).pop()
    # resuming reruns only the interrupted context part, not the finished one
    assert f"dataset=demo, part={interrupted}" in crash["planned"]
    finished = f"dataset=demo, part={crash['finished'][0]}"
    assert finished not in crash["planned"], (  # seen once under load: say why Snakemake planned it
        "the finished part was planned again:\n"
        + planned_job(crash["planned"], finished)
        + "\nthe killed run's log about it:\n"
        + "\n".join(x for x in crash["context_log"].splitlines() if "context_part" in x or "part=" in x)
    )
    assert crash["shar_cuts_after_kill"] < 12

    assert_informative_codes(
        codes_in_tars(sorted((reference / "demo" / "shar").glob("codes_*/target_codes/*.tar")))
    )
    assert (
        len([p for p in (reference / "demo" / "shar").rglob("*") if p.is_file()]) == 12 * 5 * 2
    )  # + indexes
    assert_same_outputs(
        reference, crash["work"] / "results", ["demo", "dirty"], "2 cores uninterrupted vs 1 core killed"
    )

    # a killed shar or codes job resumes: what it finished is kept (same inode, same bytes), not made again
    for stage in ("shar", "codes"):
        assert f"rule {stage}_block:" in crash[f"planned_after_{stage}_kill"]  # not "Nothing to be done"
        assert crash[f"{stage}_kept"] and crash[f"{stage}_kept"] <= crash["final"], stage
    assert (
        "kept: " in (crash["work"] / "logs" / "codes_block" / "demo" / "tiny_nemo" / "00000.log").read_text()
    )
    assert crash["leftovers"] == []  # no temp or scratch folder is left (the .kept folders stay: resume.py)

    # every file ever seen under a final name already had its final size
    watched = crash["watched"]
    assert len(watched) >= 8  # the killed runs did write some shards and codes
    for path, sizes in watched.items():
        assert sizes == {Path(path).stat().st_size}, (path, sizes)
