import os
import stat

import numpy as np
import pytest

from sharflow.core.atomic import atomic_dir, atomic_file, atomic_path, read_json, write_json


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
    with pytest.raises(RuntimeError), atomic_file(target) as f:
        f.write("new")
        raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_dir_replaces_old_one_on_success_only(tmp_path):
    target = tmp_path / "d"
    with atomic_dir(target) as d:
        (d / "a").write_text("1")
    with pytest.raises(RuntimeError), atomic_dir(target) as d:
        (d / "b").write_text("2")
        raise RuntimeError("boom")
    assert sorted(os.listdir(target)) == ["a"]
    assert sorted(os.listdir(tmp_path)) == ["d"]


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_atomic_path_for_writers_that_want_a_name(tmp_path):
    target = tmp_path / "rows.npy"
    with atomic_path(target) as tmp:
        rows = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(3, 2))
        rows[:] = 1.5
        rows.flush()
        del rows
        assert not target.exists()
    assert np.load(target).tolist() == [[1.5, 1.5]] * 3
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("boom")
    assert np.load(target).shape == (3, 2) and os.listdir(tmp_path) == ["rows.npy"]


def test_json_files_have_one_format(tmp_path):
    write_json(tmp_path / "a.json", {"b": [1, 2], "a": "é"})
    text = (tmp_path / "a.json").read_text(encoding="utf-8")
    assert text == '{\n "b": [\n  1,\n  2\n ],\n "a": "\\u00e9"\n}\n'  # indent 1, ASCII, final newline
    write_json(tmp_path / "s.json", {"b": 1, "a": 2}, sort_keys=True)
    assert list(read_json(tmp_path / "s.json")) == ["a", "b"]
    assert read_json(tmp_path / "a.json") == {"b": [1, 2], "a": "é"}
