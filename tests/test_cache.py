"""sharflow.core.cache: one build per key across processes, no half entry under its final name."""

import fcntl
import json
import logging
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sharflow.core.cache import DONE, cache_key, cache_root, cached_build, file_identity, package_versions
from sharflow.text.normalizer import normalizer_key


def slow_build(log: str, folder: Path) -> None:
    """A build that takes a while and says each time it runs (in the file `log`)."""
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\n")
    time.sleep(1.0)
    (folder / "grammar.far").write_text("built")


def build_in_process(root: str, log: str) -> str:
    from functools import partial

    return str(cached_build(Path(root), "kind", "k-1", partial(slow_build, log)))


def test_two_processes_wanting_one_entry_build_it_once(tmp_path):
    log = tmp_path / "builds.log"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        folders = pool.starmap(build_in_process, [(str(tmp_path / "cache"), str(log))] * 3)
    assert len(set(folders)) == 1 and len(log.read_text().splitlines()) == 1
    folder = Path(folders[0])
    assert (folder / "grammar.far").read_text() == "built"
    assert json.loads((folder / DONE).read_text())["key"] == "k-1"
    assert sorted(p.name for p in folder.parent.iterdir()) == ["k-1", "k-1.lock"]  # no temp folder left
    assert build_in_process(str(tmp_path / "cache"), str(log)) == folders[0]  # found, not built again
    assert len(log.read_text().splitlines()) == 1


def test_a_failed_or_killed_build_leaves_no_entry(tmp_path):
    def failing(folder: Path) -> None:
        (folder / "half.far").write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        cached_build(tmp_path, "kind", "k", failing)
    assert sorted(p.name for p in (tmp_path / "kind").iterdir()) == ["k.lock"]

    code = (
        "import sys, time\nfrom pathlib import Path\nfrom sharflow.core.cache import cached_build\n"
        "def build(folder):\n    (folder / 'half.far').write_text('half')\n"
        "    print('building', flush=True)\n    time.sleep(60)\n"
        "cached_build(Path(sys.argv[1]), 'kind', 'killed', build)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "building\n"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "kind" / "killed").exists()  # the half build is under a temp name only
    assert any(p.name.startswith(".killed.") for p in (tmp_path / "kind").iterdir())
    folder = cached_build(tmp_path, "kind", "killed", lambda f: (f / "whole.far").write_text("whole"))
    assert sorted(p.name for p in folder.iterdir()) == [DONE, "whole.far"]
    assert not any(p.name.startswith(".killed.") for p in (tmp_path / "kind").iterdir())  # cleared


def test_the_key_names_what_the_entry_depends_on(monkeypatch, tmp_path):
    a = cache_key("en", versions={"pynini": "2.1.6"}, options={"input_case": "cased"})
    assert a.startswith("en-") and a == cache_key(
        "en", options={"input_case": "cased"}, versions={"pynini": "2.1.6"}
    )
    assert a != cache_key("en", versions={"pynini": "2.1.7"}, options={"input_case": "cased"})
    assert a != cache_key("en", versions={"pynini": "2.1.6"}, options={"input_case": "lower_cased"})
    assert a != cache_key("de", versions={"pynini": "2.1.6"}, options={"input_case": "cased"})
    key, describe = normalizer_key("en")
    assert describe["versions"] == package_versions("nemo_text_processing", "pynini")
    assert "absent" not in describe["versions"].values() and describe["options"]["input_case"] == "cased"
    assert key != normalizer_key("de")[0]


def test_the_cache_root_is_the_config_else_the_environment_else_the_users(monkeypatch, tmp_path):
    monkeypatch.setenv("SHARFLOW_CACHE_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root(str(tmp_path / "conf")) == tmp_path / "conf"
    assert cache_root(None) == tmp_path / "env"
    monkeypatch.delenv("SHARFLOW_CACHE_DIR")
    assert cache_root(None) == tmp_path / "xdg" / "sharflow"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root(None) == tmp_path / "home" / ".cache" / "sharflow"


def test_an_entry_built_in_process_says_what_it_is_and_is_found_after(tmp_path, monkeypatch, caplog):
    """In process (the tests above build in other processes): the entry's record, the log lines, a
    folder a killed build of an older sharflow left without its record, and an entry another job
    finished while this one waited on the lock."""
    builds = []

    def build(folder: Path) -> None:
        builds.append(folder)
        (folder / "grammar.far").write_text("built")

    (tmp_path / "kind" / "k-2").mkdir(parents=True)  # no record: not an entry
    (tmp_path / "kind" / "k-2" / "half.far").write_text("half")
    (tmp_path / "kind" / ".k-2.abc.tmp").mkdir()  # a killed build's temp folder
    (tmp_path / "kind" / ".k-20.abc.tmp").mkdir()  # another key's: left alone
    with caplog.at_level(logging.INFO, logger="sharflow.core.cache"):
        folder = cached_build(tmp_path, "kind", "k-2", build, {"language": "en"})
    assert folder == tmp_path / "kind" / "k-2" and len(builds) == 1 and builds[0] != folder
    # built beside the entry under a name the next build clears (a rename never crosses file systems)
    assert builds[0].parent == folder.parent and re.fullmatch(r"\.k-2\.\w+\.tmp", builds[0].name)
    assert sorted(p.name for p in folder.iterdir()) == [DONE, "grammar.far"]
    record = json.loads((folder / DONE).read_text())
    assert record == {"key": "k-2", "language": "en", "build_seconds": record["build_seconds"]}
    assert 0 <= record["build_seconds"] < 60 and round(record["build_seconds"], 1) == record["build_seconds"]
    assert sorted(p.name for p in (tmp_path / "kind").iterdir()) == [".k-20.abc.tmp", "k-2", "k-2.lock"]
    assert re.fullmatch(
        rf"cache kind/k-2: built in \d+\.\d s at {re.escape(str(folder))}", caplog.messages[0]
    )
    assert cached_build(tmp_path, "kind", "k-2", build) == folder and len(builds) == 1
    monkeypatch.setattr("sharflow.core.cache._since", lambda start: 12.3456)  # the record keeps a tenth
    assert (
        json.loads((cached_build(tmp_path, "timed", "k", build) / DONE).read_text())["build_seconds"] == 12.3
    )
    assert json.loads((cached_build(tmp_path, "other", "k", build) / DONE).read_text()) == {
        "key": "k",
        "build_seconds": json.loads((tmp_path / "other" / "k" / DONE).read_text())["build_seconds"],
    }
    real_flock = fcntl.flock

    def flock_after_another_job(fd, op):  # the lock comes free when another job has built the entry
        (tmp_path / "kind" / "k-3").mkdir()
        (tmp_path / "kind" / "k-3" / DONE).write_text("{}")
        return real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock_after_another_job)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="sharflow.core.cache"):
        assert cached_build(tmp_path, "kind", "k-3", build) == tmp_path / "kind" / "k-3"
    assert len(builds) == 3  # not built here (the third was the timed entry)
    assert re.fullmatch(
        r"cache kind/k-3: built by another job meanwhile \(waited \d+\.\d s\)", caplog.messages[0]
    )


def test_keys_are_short_safe_folder_names_and_files_are_keyed_by_size_and_time(tmp_path):
    key = cache_key("en/US x", versions={"a": "1"})
    assert re.fullmatch(r"en_US_x-[0-9a-f]{12}", key)
    assert cache_key("en", when=tmp_path) == cache_key("en", when=str(tmp_path))  # any value, as text
    assert package_versions("pytest", "no-such-package-sharflow") == {
        "pytest": pytest.__version__,
        "no-such-package-sharflow": "absent",
    }
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"123")
    st = weights.stat()
    assert file_identity(str(weights)) == [str(weights), 3, st.st_mtime_ns]
    assert file_identity(str(tmp_path)) == str(tmp_path)  # a folder: as it is
    assert file_identity("ge2e") == "ge2e" and file_identity(3) == 3 and file_identity(None) is None
