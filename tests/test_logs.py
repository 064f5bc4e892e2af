import re

import pytest

from sharflow.core.errors import SharflowError
from sharflow.core.logs import job_log


def test_unexpected_errors_keep_their_traceback_in_the_log(tmp_path):
    log = tmp_path / "job.log"
    with pytest.raises(ZeroDivisionError), job_log(str(log)):
        _ = 1 / 0
    assert "Traceback" in log.read_text() and "ZeroDivisionError" in log.read_text()


def test_errors_for_people_end_the_job_with_one_message(tmp_path, capfd):
    log = tmp_path / "job.log"
    with pytest.raises(SystemExit) as e, job_log(str(log)):
        raise SharflowError("datasets.x.audio_root 'nowhere' is not a folder")
    assert e.value.code == 1
    assert "Traceback" not in log.read_text() and "audio_root 'nowhere'" in log.read_text()
    assert "sharflow: error: datasets.x.audio_root" in capfd.readouterr().err


def test_a_finished_job_logs_its_time_and_exact_peak_memory(tmp_path):
    log = tmp_path / "job.log"
    with job_log(str(log)):
        block = bytearray(64 * 1024 * 1024)  # 64 MB touched
        block[::4096] = b"x" * len(block[::4096])
    text = log.read_text()
    peak = int(
        re.search(r"job done in [\d.]+ s: peak RSS (\d+) MB, largest worker process \d+ MB", text).group(1)
    )
    assert peak >= 64


def test_a_job_logs_how_long_its_process_took_to_start(tmp_path):
    import subprocess
    import sys

    log = tmp_path / "job.log"
    code = (
        "import time; time.sleep(0.6)\n"  # stands for the imports before a script enters job_log
        "from sharflow.core.logs import job_log\n"
        f"with job_log({str(log)!r}): pass\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    seconds = float(re.search(r"job started ([\d.]+) s after its process", log.read_text()).group(1))
    assert 0.6 <= seconds < 10
