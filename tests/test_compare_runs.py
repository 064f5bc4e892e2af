"""benchmarks/compare_runs.py: two runs compared file by file, timing fields aside; any other difference
fails it."""

import json
import shutil
import subprocess
import sys

import pytest

from testkit import REPO

SCRIPT = REPO / "benchmarks" / "compare_runs.py"


def make_run(root, seconds: float = 1.0):
    """A tiny results tree: a stats file with a timing field, a shard file, an input_cfg naming the run."""
    ds = root / "results" / "demo"
    (ds / "shar" / "cuts").mkdir(parents=True)
    (ds / "shar" / "cuts" / "cuts.000000.jsonl.gz").write_bytes(b"\x1f\x8b cuts")
    (ds / "prepare").mkdir()
    stats = {
        "records_in": 3,
        "records_out": 2,
        "seconds": seconds,
        "ranks": [{"rank": 0, "seconds": seconds}],
    }
    (ds / "prepare" / "stats.json").write_text(json.dumps(stats))
    results = root / "results"
    (results / "input_cfg.yaml").write_text(f"shar_path: {results.resolve()}/demo/shar\n")
    return results


def compare(a, b) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(a), str(b)], capture_output=True, text=True)


def test_runs_that_differ_only_in_timings_and_their_folder_are_equal(tmp_path):
    done = compare(make_run(tmp_path / "a", 1.0), make_run(tmp_path / "b", 9.5))
    assert done.returncode == 0, done.stdout
    assert "every compared file is equal" in done.stdout


@pytest.mark.parametrize("damage", ["shard byte", "stats count", "missing file", "extra file"])
def test_any_other_difference_fails(tmp_path, damage):
    a, b = make_run(tmp_path / "a"), make_run(tmp_path / "b")
    shard = b / "demo" / "shar" / "cuts" / "cuts.000000.jsonl.gz"
    if damage == "shard byte":
        shard.write_bytes(b"\x1f\x8b cutz")
    elif damage == "stats count":
        stats = json.loads((b / "demo" / "prepare" / "stats.json").read_text())
        (b / "demo" / "prepare" / "stats.json").write_text(json.dumps({**stats, "records_out": 3}))
    elif damage == "missing file":
        shard.unlink()
    else:
        shutil.copy(shard, shard.with_name("cuts.000001.jsonl.gz"))
    done = compare(a, b)
    assert done.returncode == 1, done.stdout
    assert "demo/" in done.stdout.splitlines()[-1]
