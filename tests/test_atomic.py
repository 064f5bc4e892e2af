import os
import stat

import pytest

from sharflow.atomic import atomic_dir, atomic_file


def test_file_appears_only_when_complete(tmp_path):
    target = tmp_path / "sub" / "out.txt"
    with atomic_file(target) as f:
        f.write("partial")
        assert not target.exists()
    assert target.read_text() == "partial"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o666 & ~_umask()


def test_failed_write_leaves_nothing(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_file(target) as f:
            f.write("new")
            raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_dir_replaces_old_one_on_success_only(tmp_path):
    target = tmp_path / "d"
    with atomic_dir(target) as d:
        (d / "a").write_text("1")
    with pytest.raises(RuntimeError):
        with atomic_dir(target) as d:
            (d / "b").write_text("2")
            raise RuntimeError("boom")
    assert sorted(os.listdir(target)) == ["a"]
    assert sorted(os.listdir(tmp_path)) == ["d"]


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask
