"""Warm starts (sharflow.work.warm): a job handed to the server runs as its fork with the job's own
streams, folder, environment and arguments, exits as the job would, dies with the job's process, and
the server ends with its owner. The workflow runs of the suite start their jobs warm; the crash test's
runs start them cold and give the same bytes (test_crash)."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sharflow.work import warm

JOB = """
import os, signal, sys, time
from sharflow.work.warm import hand_over

class Resources:
    gpu = int(os.environ.get("JOB_GPUS", "0"))

class Snakemake:
    resources = Resources()

snakemake = Snakemake()
hand_over(globals(), heavy=os.environ.get("JOB_HEAVY") == "1")
if sys.argv[1] == "sleep":  # before the line the test waits for
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(7))
import numpy  # its BLAS: a warm job's was loaded by the server
from threadpoolctl import threadpool_info

pools = ",".join(str(n) for n in sorted({pool["num_threads"] for pool in threadpool_info()}))
named = warm.ENV in os.environ
print(os.getppid(), os.getcwd(), os.environ["JOB_VALUE"], named, pools, *sys.argv[1:], flush=True)
print("to stderr", file=sys.stderr, flush=True)
if sys.argv[1] == "raise":
    raise ValueError("the job failed")
if sys.argv[1] == "sleep":
    time.sleep(600)
sys.exit(int(sys.argv[1]))
""".replace("hand_over\n", "hand_over\nfrom sharflow.work import warm\n", 1)


@pytest.fixture
def server(tmp_path):
    """(folder, server process, owner process): a server of the folder of a stand-in owner, its preload
    one light module (the workflow's server imports NeMo: the workflow runs use it)."""
    owner = subprocess.Popen(["sleep", "600"])
    folder = tmp_path / "warm" / str(owner.pid)
    folder.mkdir(parents=True, mode=0o700)
    code = f"from sharflow.work import warm; warm.serve({str(folder)!r}, preload=('json', 'numpy'))"
    # the math libraries the server loads size their pools by its environment, not its jobs'
    threads = {"OMP_NUM_THREADS": "3", "OPENBLAS_NUM_THREADS": "3"}
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, **threads})
    deadline = time.monotonic() + 120
    while not (folder / "socket").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield folder, proc, owner
    finally:
        for p in (owner, proc):
            p.kill()
            p.wait()


def run_job(tmp_path, folder, *args, **env) -> subprocess.CompletedProcess:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    (tmp_path / "cwd").mkdir(exist_ok=True)
    threads = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}  # as Snakemake sets a rule's threads
    environ = {**os.environ, warm.ENV: str(folder), "JOB_VALUE": "given", **threads, **env}
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=tmp_path / "cwd",
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_handed_over_job_runs_as_the_servers_fork_as_it_would_run_itself(tmp_path, server):
    folder, proc, _ = server
    done = run_job(tmp_path, folder, "3", "more")
    parent, cwd, value, named, pools, *args = done.stdout.split()
    assert int(parent) == proc.pid  # a fork of the server, not the job's own process
    assert (cwd, value, named, args) == (str(tmp_path / "cwd"), "given", "False", ["3", "more"])
    assert pools == "1"  # the job's threads, not the server's 3
    assert done.returncode == 3 and done.stderr == "to stderr\n"
    failed = run_job(tmp_path, folder, "raise")
    assert failed.returncode == 1 and "ValueError: the job failed" in failed.stderr

    # a client that leaves before its request is whole: the server goes on serving
    for partial in (b"", b"\x00\x00"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(folder / "socket"))
            conn.sendall(partial)
    assert run_job(tmp_path, folder, "0").returncode == 0 and proc.poll() is None

    # cold: warm starts off, a job with GPUs, no server named
    for cold in ({warm.OFF: "0"}, {"JOB_GPUS": "1"}, {warm.ENV: str(tmp_path / "none")}):
        done = run_job(tmp_path, folder, "0", **cold)
        assert done.returncode == 0 and int(done.stdout.split()[0]) == os.getpid(), cold
        assert done.stdout.split()[4] == "1", cold


def test_a_fork_dies_with_its_jobs_process_and_the_server_with_its_owner(tmp_path, server):
    folder, proc, owner = server
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "cwd").mkdir()
    env = {**os.environ, warm.ENV: str(folder), "JOB_VALUE": "given"}
    # SIGKILL ends the job's process (the fork sees it gone); SIGTERM is passed on to the fork, whose
    # handler exits 7, and the job's process exits as it did; SIGINT is a KeyboardInterrupt in the fork
    # (not ignored as the server ignores it): a traceback and status 1, as a job of its own would end
    for signum, ends in ((signal.SIGKILL, -signal.SIGKILL), (signal.SIGTERM, 7), (signal.SIGINT, 1)):
        job = subprocess.Popen(
            [sys.executable, str(tmp_path / "job.py"), "sleep"],
            cwd=tmp_path / "cwd",
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert int(job.stdout.readline().split()[0]) == proc.pid  # the fork runs
        forks = [int(p.name) for p in Path("/proc").glob("[0-9]*") if _parent(p) == proc.pid]
        assert len(forks) == 1
        job.send_signal(signum)
        assert job.wait(timeout=60) == ends
        _wait_gone(forks[0])
        job.stdout.close()
    proc.send_signal(signal.SIGINT)  # Ctrl-C reaches the run's whole process group: not an end here
    assert run_job(tmp_path, folder, "0").returncode == 0 and proc.poll() is None
    owner.kill()
    owner.wait()
    assert proc.wait(timeout=60) == 0 and not (folder / "socket").exists()


def _parent(proc: Path) -> int | None:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        return None


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 60
    while Path(f"/proc/{pid}").exists() and (Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"):
        assert time.monotonic() < deadline, f"fork {pid} outlived its job's process"
        time.sleep(0.05)


def test_the_server_preloads_modules_that_exist():
    """A name that is not there would fail the server's imports, and every job would start cold."""
    import importlib.util

    assert all(importlib.util.find_spec(name) is not None for name in warm.PRELOAD), warm.PRELOAD


def test_each_snakemake_process_names_a_folder_of_its_own_unless_warm_starts_are_off(monkeypatch, tmp_path):
    """...or a shared server is named (the test session's), which a Slurm job's Snakemake leaves alone;
    a process started for one job (a Slurm job step's) names none: its job starts cold."""
    from sharflow.workflow import warm_starts
    from sharflow.workflow.engine import target_jobs

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(warm.ENV, "the calling process's")  # put back as it was after the test
    for name in (warm.OFF, warm.SHARED, "SLURM_JOB_ID"):
        monkeypatch.delenv(name, raising=False)
    own = str(tmp_path / ".snakemake" / "sharflow-warm" / str(os.getpid()))
    warm_starts()  # as rules/common.smk does in every Snakemake process
    assert os.environ[warm.ENV] == own
    monkeypatch.setenv(warm.SHARED, "/the/session/warm/1")
    warm_starts()
    assert os.environ[warm.ENV] == "/the/session/warm/1"
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    warm_starts()
    assert os.environ[warm.ENV] == own
    submission = ["-m", "snakemake", "--target-jobs", "codes_block:dataset=demo,block=00000"]
    assert target_jobs(submission) == 1 and target_jobs(["--cores", "2", "all"]) == 0
    assert target_jobs([*submission, "shar_tail2:dataset=demo,first=00010", "--cores", "8"]) == 2
    warm_starts(target_jobs=2)  # a group's submission (whose jobs Slurm starts a Snakemake each)
    assert os.environ[warm.ENV] == own
    warm_starts(target_jobs=1)
    assert warm.ENV not in os.environ
    monkeypatch.setenv(warm.OFF, "0")
    warm_starts()
    assert warm.ENV not in os.environ
