"""The suite's own harness (testkit, conftest): a test that waits for a shared workflow run is not
taken for a hung one, and one that hangs after it still is."""

import subprocess
import sys
import textwrap

from testkit import REPO

# A stand-in for a test: the hang guard armed at 2 s (conftest.hang_guard), then a 4 s wait for a
# shared run, then work of its own that outlasts the guard armed again.
_WAITS_THEN_HANGS = """
import faulthandler, os, sys, time
sys.path.insert(0, {tests!r})
os.environ["SHARFLOW_TEST_TIMEOUT"] = "2"
from testkit import Background, hang_timeout

faulthandler.dump_traceback_later(hang_timeout(), exit=True)
run = Background(time.sleep, 4)
print("waited", run.result() is None, flush=True)
time.sleep(6)
print("not stopped", flush=True)
"""


def test_waiting_for_a_shared_run_is_not_a_hang_and_the_guard_starts_again_after():
    script = _WAITS_THEN_HANGS.format(tests=str(REPO / "tests"))
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=300
    )
    # the 4 s wait outlasted the 2 s guard without ending the process; the 6 s after it did not
    assert done.stdout.splitlines() == ["waited True"], done.stdout + done.stderr[-2000:]
    assert done.returncode != 0 and "Timeout (0:00:02)!" in done.stderr, done.stderr[-2000:]
