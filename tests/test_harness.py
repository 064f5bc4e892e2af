"""The suite's own harness (testkit, conftest): a test that waits for a shared workflow run is not
taken for a hung one, and one that hangs after it still is."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import snakemake_server

from testkit import REPO, Background, process_group, run_command, run_environment

# A stand-in for a test: the hang guard armed at 3 s (conftest.hang_guard), 2 s of the test's own
# work, a 4 s wait for a shared run, then 2 s more work: the guard is paused for the wait only, so
# the 2 + 2 s of work outlast it (armed again with the whole 3 s, the run would reach its end).
_WAITS_THEN_HANGS = """
import os, sys, time
sys.path.insert(0, {tests!r})
os.environ["SHARFLOW_TEST_TIMEOUT"] = "3"
from testkit import Background, arm_hang_guard

arm_hang_guard()
time.sleep(2)
run = Background(time.sleep, 4)
print("waited", run.result() is None, flush=True)
time.sleep(2)
print("not stopped", flush=True)
"""


def test_waiting_for_a_shared_run_is_not_a_hang_and_the_guard_counts_the_rest():
    script = _WAITS_THEN_HANGS.format(tests=str(REPO / "tests"))
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=300
    )
    # the 4 s wait outlasted the 3 s guard without ending the process; the work around it did not
    assert done.stdout.splitlines() == ["waited True"], done.stdout + done.stderr[-2000:]
    assert done.returncode != 0 and "Timeout (" in done.stderr, done.stderr[-2000:]


_SNAKEFILE = """
import os, time
rule all:
    input: "told.txt", "slept.txt"
rule told:
    output: "told.txt"
    run:
        with open(output[0], "w") as f:
            f.write(f"{os.environ['SHARFLOW_HARNESS']} {os.getpgid(0)} {os.getsid(0)}")
rule slept:
    output: "slept.txt"
    params: seconds=lambda wildcards: float(os.environ["SHARFLOW_HARNESS_SLEEP"])
    shell: "touch started; sleep {params.seconds}; touch {output}"
"""


def test_a_snakemake_run_forked_by_the_suites_server_is_a_run_of_its_own(tmp_path):
    """process_group runs a Snakemake command as a fork of the suite's server (snakemake_server): with
    the environment it is given, in its own session, failing as Snakemake fails, and killed with every
    job it started when its group is killed."""
    (tmp_path / "Snakefile").write_text(_SNAKEFILE)
    cmd = [sys.executable, "-m", "snakemake", "-s", str(tmp_path / "Snakefile"), "--directory", str(tmp_path)]
    env = {**os.environ, "SHARFLOW_HARNESS": "forked", "SHARFLOW_HARNESS_SLEEP": "0"}
    with process_group([*cmd, "--cores", "1"], tmp_path / "out", env=env) as proc:
        assert isinstance(proc, snakemake_server.ForkedRun)
        assert proc.wait(300) == 0, (tmp_path / "out").read_text()[-3000:]
    assert (tmp_path / "told.txt").read_text() == f"forked {proc.pid} {proc.pid}"

    failed = run_command([*cmd, "--cores", "1", "no_such_rule"], check=False, env=env, timeout=300)
    assert failed.returncode == 1 and "no_such_rule" in failed.stderr, failed.stderr[-3000:]
    # a failed command fails the test naming it: Snakemake by its arguments, another by its command line
    with pytest.raises(pytest.fail.Exception, match=r"^snakemake -s \S+ .* no_such_rule failed \(1\)"):
        run_command([*cmd, "--cores", "1", "no_such_rule"], env=env, timeout=300)
    with pytest.raises(pytest.fail.Exception, match=r"-c raise SystemExit\(3\) failed \(3\)"):
        run_command([sys.executable, "-c", "raise SystemExit(3)"], timeout=300)

    for name in ("told.txt", "slept.txt", "started"):
        (tmp_path / name).unlink(missing_ok=True)
    env["SHARFLOW_HARNESS_SLEEP"] = "600"
    with process_group([*cmd, "--cores", "1", "slept.txt"], tmp_path / "killed", env=env) as proc:
        deadline = time.monotonic() + 300
        while not (tmp_path / "started").exists():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "killed").read_text()
            time.sleep(0.05)
        members = set(_alive_in_group(proc.pid))  # Snakemake, its job's shell and its `sleep` at least
        assert proc.pid in members and len(members) >= 3, members
        os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL  # the block ended once the job's `sleep` was gone too
    assert not list(_alive_in_group(proc.pid))


def _alive_in_group(pgid: int):
    """The pids of the live (not zombie) processes of group `pgid`."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if int(group) == pgid and state != "Z":
            yield int(stat.parent.name)


def test_a_background_runs_commands_with_the_environment_the_session_had_when_it_started_it(
    monkeypatch, tmp_path
):
    """A test that sets a variable or Python's temporary folder for a while (monkeypatch) does not reach
    the commands that a run in the background starts meanwhile (testkit.run_environment, run_command's
    folder); the test's own commands see them."""
    import tempfile
    import threading

    monkeypatch.setenv("SHARFLOW_HARNESS_VALUE", "the session's")
    asked, answered = threading.Event(), threading.Event()

    def later():
        asked.wait(60)
        try:
            said = run_command(
                [sys.executable, "-c", "import os; print(os.environ['SHARFLOW_HARNESS_VALUE'])"]
            )
            return run_environment()["SHARFLOW_HARNESS_VALUE"], said.stdout.strip()
        finally:
            answered.set()

    run = Background(later)
    monkeypatch.setenv("SHARFLOW_HARNESS_VALUE", "a test's, for a while")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-folder"))  # as test_storage's
    asked.set()
    assert answered.wait(60)
    assert run.result() == ("the session's", "the session's")
    assert run_environment()["SHARFLOW_HARNESS_VALUE"] == "a test's, for a while"
    with pytest.raises(FileNotFoundError):
        run_command([sys.executable, "-c", "pass"])


_AHEAD_TESTS = """
import threading
import pytest

@pytest.mark.ahead
def test_its_body_runs_beside_the_main_thread(tmp_path):
    assert threading.current_thread() is not threading.main_thread()
    assert tmp_path.is_dir() and not any(tmp_path.iterdir())

@pytest.mark.ahead
def test_its_failure_is_the_tests(tmp_path):
    assert 1 + 1 == 3, "the body's own message"

def test_an_unmarked_test_runs_in_the_main_thread():
    assert threading.current_thread() is threading.main_thread()
"""


AHEAD_DEMO = "test_ahead_demo.py"


def test_an_ahead_tests_body_runs_in_the_background_and_the_test_reports_what_it_did(tmp_path):
    """conftest's `ahead` marker, in a pytest session of its own with the suite's conftest as a plugin:
    the marked bodies run in background threads, and a body's failure is its test's, with its message."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / AHEAD_DEMO).write_text(_AHEAD_TESTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO / "src")])}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "conftest",
            "-p",
            "no:cacheprovider",
            "-q",
            AHEAD_DEMO,
            "--basetemp",
            str(tmp_path / "base"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "1 failed, 2 passed" in out, out[-3000:]
    assert "FAILED test_ahead_demo.py::test_its_failure_is_the_tests" in out
    assert "the body's own message" in out
    assert "assert 1 + 1 == 3" in out  # the body's own line, as an unmarked test's failure shows it
