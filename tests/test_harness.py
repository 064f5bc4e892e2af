"""The suite's own harness (testkit, conftest): a test that waits for a shared workflow run is not
taken for a hung one, and one that hangs after it still is."""

import subprocess
import sys
import textwrap

from testkit import REPO

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
