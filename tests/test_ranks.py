"""sharflow.core.ranks: which devices a job's ranks use, and the GPU-grant check."""

import logging

import pytest

from sharflow.core.errors import SharflowError
from sharflow.core.ranks import job_devices, rank_devices, run_ranks


def _square(rank, device, x):
    return rank, device, x * x


def test_cpu_ranks_and_results_in_rank_order():
    devices = rank_devices("cpu", 2)
    assert devices == ["cpu", "cpu"]
    assert run_ranks(_square, devices, [(3,), (4,)]) == [(0, "cpu", 9), (1, "cpu", 16)]


def test_job_logs_devices_and_falls_back_to_cpu_outside_slurm(monkeypatch, caplog):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with caplog.at_level(logging.INFO, logger="sharflow.core.ranks"):
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
