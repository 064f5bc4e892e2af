"""Indexed Shar as lhotse 2 reads it (issue 76): lhotse 2.0.0a7, installed apart from the project's
lhotse 1.33, reads finished runs' Shar sets with `CutSet.from_shar(..., indexed=True)` by the
indexes sharflow wrote, and gets the same cuts and bytes as lhotse 1.33 reading the same files;
each index is byte for byte the one lhotse's own writer makes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sharflow.core import blocks
from sharflow.core.layout import DatasetFiles
from sharflow.core.shar_fields import fields, shard_files
from testkit import run_environment

READER = Path(__file__).with_name("read_shar_sets.py")


def shar_sets(results: Path, names: list[str], codec: str) -> dict[str, dict[str, list[str]]]:
    """{set: {field: shard files}} of Shar sets (results/<name>) with one codec's codes, as NeMo's
    input_cfg lists them (sharflow.dataset.training)."""
    out = {}
    for name in names:
        files = DatasetFiles(str(results / name)).as_planned()
        assert files.indexed, name  # the default
        shards = blocks.planned_shards(files.shard_plan)
        if shards:
            out[name] = {f.field: shard_files(files.shar_dir, f, shards) for f in fields([codec])}
    return out


def read(sets: dict, indexed: bool, tmp: Path, pythonpath: Path | None = None) -> dict:
    spec = tmp / f"spec-{indexed}.json"
    spec.write_text(json.dumps({"sets": sets, "indexed": indexed}))
    env = run_environment()  # (the session's, in a test marked ahead: conftest._ahead)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, str(READER), str(spec)], capture_output=True, text=True, env=env, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def index_snapshot(sets: dict) -> dict[str, bytes]:
    return {p: Path(p + ".idx").read_bytes() for s in sets.values() for paths in s.values() for p in paths}


def check_sets(sets: dict, lhotse2: Path, tmp: Path) -> dict:
    """lhotse 2 (indexed) against lhotse 1.33 (streaming) over `sets`; lhotse 2's reading."""
    before = index_snapshot(sets)
    new = read(sets, True, tmp, lhotse2)
    old = read(sets, False, tmp)
    assert new["version"] == "2.0.0a7" and old["version"] == "1.33.0"
    assert index_snapshot(sets) == before  # lhotse 2 read by sharflow's indexes: it made none of its own
    for name, got in new["sets"].items():
        assert got["reader"] == "LazyIndexedSharIterator", name
        cuts = old["sets"][name]["cuts"]
        # the digests carry each cut's own audio and codes: the equality below can fail
        assert len(cuts) > 1 and len({d for _, d in cuts}) == len(cuts), name
        assert got["cuts"] == cuts, name
        assert got["last"][:2] == cuts[-1], name  # random access by index to the last cut
        assert got["own_indexes"] and all(got["own_indexes"].values()), name
    return new


@pytest.mark.ahead
def test_lhotse_2_reads_the_demo_runs_indexed_set_as_lhotse_1_does(two_datasets, lhotse2, tmp_path):
    results = two_datasets[0] / "results"
    sets = shar_sets(results, ["demo", "dirty"], "tiny_nemo")
    assert len(sets["demo"]["cuts"]) == 12
    new = check_sets(sets, lhotse2, tmp_path)
    assert (
        len(new["sets"]["demo"]["cuts"]) == json.loads((results / "demo" / "verify.json").read_text())["cuts"]
    )


@pytest.mark.ahead
def test_lhotse_2_reads_a_runs_held_out_sets_too(split_run, lhotse2, tmp_path):
    work, config = split_run
    held = sorted(f"demo/{p.parent.name}" for p in (work / "results" / "demo").glob("*/shard_plan.json"))
    sets = shar_sets(work / "results", ["demo", *held], next(iter(config["codecs"])))
    assert len(sets) >= 3  # train and at least two held-out sets with cuts
    check_sets(sets, lhotse2, tmp_path)


def test_every_index_is_the_one_lhotse_2_writes_also_where_the_end_marker_straddles_a_record(
    lhotse2, tmp_path
):
    """sharflow.core.shar_index against lhotse 2's create_tar_index / create_jsonl_index over tars of
    random members (long names take PAX headers, empty tars, ends in every position of a record) and
    a cuts file: the same bytes, including the tars whose sentinel is not their size."""
    import random

    from sharflow.core.shar_index import index_path, write_index
    from sharflow.shar.format import TarMemberWriter

    rng = random.Random(0)
    paths = []
    for t in range(80):
        path = tmp_path / f"t{t:02d}.tar"
        with TarMemberWriter(str(path)) as tar:
            for i in range(rng.randint(0, 9)):
                name = "x" * rng.choice([3, 99, 150]) + str(i)
                tar.write(f"{name}.flac", rng.randbytes(rng.randint(0, 25_000)))
                tar.write(f"{name}.json", b"{}\n")
        paths.append(path)
    cuts = tmp_path / "cuts.000000.jsonl"
    cuts.write_text("".join(json.dumps({"id": "é" * i}) + "\n" for i in range(7)), encoding="utf-8")
    paths.append(cuts)
    for path in paths:
        write_index(str(path))
    script = (
        "import sys\nfrom lhotse.indexing import create_jsonl_index, create_tar_index\n"
        "for p in sys.argv[1:]:\n"
        "    (create_tar_index if p.endswith('.tar') else create_jsonl_index)(p, output_path=p + '.lhotse')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(lhotse2)}
    subprocess.run([sys.executable, "-c", script, *map(str, paths)], check=True, env=env, timeout=300)
    short = 0
    for path in paths:
        ours = Path(index_path(str(path))).read_bytes()
        assert ours == Path(f"{path}.lhotse").read_bytes(), path.name
        short += int.from_bytes(ours[-8:], "little") != path.stat().st_size
    assert short > 0  # the straddling ends were among them: the sentinel's rule was tested, not assumed
