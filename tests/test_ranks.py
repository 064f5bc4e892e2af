"""sharflow.work.ranks: which devices a job's ranks use, the GPU-grant check, and the rank-job runner."""

import logging
import os
from pathlib import Path

import pytest

from sharflow.core.errors import SharflowError
from sharflow.work.ranks import (
    CPU_RANK_SECONDS,
    Rank,
    cpu_ranks_for,
    job_devices,
    rank_devices,
    rank_job,
    run_ranks,
)


def _square(rank, x):
    return rank.index, rank.device, x * x


def _squares(rank, units):
    return rank.index, rank.device, [u * u for u in units]


def _write_units(rank, units, suffix):
    """A rank function as the jobs have them: its units to its own scratch file, its pid back."""
    Path(rank.file(suffix)).write_text(" ".join(map(str, units)))
    return os.getpid()


def test_cpu_ranks_and_results_in_rank_order():
    devices = rank_devices("cpu", 2)
    assert devices == ["cpu", "cpu"]
    ranks = [Rank(i, d) for i, d in enumerate(devices)]
    assert run_ranks(_square, ranks, [(3,), (4,)]) == [(0, "cpu", 9), (1, "cpu", 16)]


def test_rank_job_bin_packs_units_runs_every_rank_and_cleans_its_scratch(tmp_path):
    costs = {"a": 5.0, "b": 4.0, "c": 3.0, "d": 3.0, "e": 1.0}
    out = tmp_path / "part" / "out.jsonl"
    with rank_job("test job", device="cpu", workers=2, scratch_beside=str(out)) as job:
        results = job.run(_write_units, costs, unit=str.upper, args=(".txt",))
        written = [Path(r.rank.file(".txt")).read_text() for r in results]
        scratch = Path(results[0].rank.scratch)
        assert scratch.parent == out.parent and scratch.is_dir()
    assert job.devices == ["cpu", "cpu"]
    # LPT by cost: a(5) -> 0, b(4) -> 1, c(3) -> 1, d(3) -> 0, e(1) -> 1; each rank's units in key order
    assert [r.units for r in results] == [["a", "d"], ["b", "c", "e"]]
    assert [r.planned_cost for r in results] == [8.0, 8.0]
    assert written == ["A D", "B C E"]  # `unit` mapped every key before the rank saw it
    assert results[0].value == os.getpid() != results[1].value  # rank 0 here, rank 1 spawned
    assert not scratch.exists()


def test_a_rank_job_without_scratch_has_no_files(tmp_path):
    with rank_job("test job", device="cpu", workers=1) as job:
        (result,) = job.run(_squares, {"x": 1.0}, unit=lambda k: 7)
        assert result.rank.scratch is None
        with pytest.raises(ValueError, match="no scratch folder"):
            result.rank.file(".jsonl")
    assert result.value == (0, "cpu", [49]) and result.units == ["x"]


def test_a_job_fitted_to_its_audio_starts_no_more_cpu_ranks_than_it_pays_for(monkeypatch):
    """Given its audio seconds, a job starts a CPU rank per CPU_RANK_SECONDS of it, one at least and
    `workers` at most (0: every core); without, one per worker whatever the audio."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)))
    step = CPU_RANK_SECONDS
    assert [cpu_ranks_for(0, s) for s in (0.0, step / 2, step, step + 1, 3 * step, 10 * step)] == [
        1, 1, 1, 2, 3, 4,
    ]  # fmt: skip
    assert cpu_ranks_for(2, 10 * step) == 2 and cpu_ranks_for(3, step / 2) == 1
    assert cpu_ranks_for(0, None) == 4 and cpu_ranks_for(3, None) == 3
    assert cpu_ranks_for(0, 600.0, per_rank=600.0) == 1 and cpu_ranks_for(0, 601.0, per_rank=600.0) == 2
    with rank_job("small job", device="cpu", workers=0, seconds=step / 2) as job:
        assert job.devices == ["cpu"]
    with rank_job("large job", device="cpu", workers=0, seconds=3 * step) as job:
        assert job.devices == ["cpu"] * 3
    with rank_job("unfitted job", device="cpu", workers=2) as job:
        assert job.devices == ["cpu"] * 2


def test_job_logs_devices_and_falls_back_to_cpu_outside_slurm(monkeypatch, caplog):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with caplog.at_level(logging.INFO, logger="sharflow.work.ranks"):
        assert job_devices("auto", 3, gpus=1, what="codes x, shard 2") == ["cpu"] * 3
    assert "codes x, shard 2: device auto, asked for 1 GPU(s), sees no GPU" in caplog.text
    assert "no GPU visible: running on 3 CPU process(es)" in caplog.text


def test_slurm_job_granted_fewer_gpus_than_asked_fails_fast(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(SharflowError, match=r"context part 0 asked for 2 GPU\(s\) but sees 0"):
        job_devices("auto", 1, gpus=2, what="context part 0")
    assert job_devices("cpu", 2, gpus=0) == ["cpu", "cpu"]  # a CPU job under Slurm is fine


def test_cuda_without_a_gpu_is_an_error():
    with pytest.raises(SharflowError, match="device: cuda was asked for"):
        rank_devices("cuda", 1)
