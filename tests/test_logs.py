import pytest

from sharflow.errors import SharflowError
from sharflow.logs import job_log


def test_unexpected_errors_keep_their_traceback_in_the_log(tmp_path):
    log = tmp_path / "job.log"
    with pytest.raises(ZeroDivisionError):
        with job_log(str(log)):
            1 / 0
    assert "Traceback" in log.read_text() and "ZeroDivisionError" in log.read_text()


def test_errors_for_people_end_the_job_with_one_message(tmp_path, capfd):
    log = tmp_path / "job.log"
    with pytest.raises(SystemExit) as e:
        with job_log(str(log)):
            raise SharflowError("datasets.x.audio_root 'nowhere' is not a folder")
    assert e.value.code == 1
    assert "Traceback" not in log.read_text() and "audio_root 'nowhere'" in log.read_text()
    assert "sharflow: error: datasets.x.audio_root" in capfd.readouterr().err
