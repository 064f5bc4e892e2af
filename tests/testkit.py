"""Helpers shared by the tests: test audio, JSON lines, and real snakemake runs."""

import glob
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml
from lhotse import CutSet

from sharflow.codes import CodecSpec, encode_shard
from sharflow.context import PartSettings, merge_context, plan_context, run_context_part
from sharflow.prepare import prepare_dataset
from sharflow.shar import plan_shards, write_shard
from sharflow.shar_audio import EncodeSettings

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "demo"


def write_tone(path: Path, seconds: float, rate: int = 16000, fmt: str | None = None) -> Path:
    """A short deterministic test signal at `path` (format from the suffix unless given)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(round(seconds * rate))) / rate
    sf.write(path, 0.3 * np.sin(2 * np.pi * 220 * t), rate, format=fmt, subtype="PCM_16")
    return path


def write_jsonl(path: Path, lines: list) -> Path:
    """Lines may be dicts (dumped as JSON) or raw strings (written as they are)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def demo_config(**overrides) -> dict:
    """The shipped config with absolute demo paths, for runs in a temp working directory."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for ds in config["datasets"].values():
        ds["manifest"] = str(REPO / ds["manifest"])
        ds["audio_root"] = str(REPO / ds["audio_root"])
    for codec in config.get("codecs", {}).values():
        if codec.get("random_from_config"):
            codec["random_from_config"] = str(REPO / codec["random_from_config"])
    for section, values in overrides.items():
        config.setdefault(section, {}).update(values)
    return config


def snakemake_cmd(workdir: Path, config: dict, *args: str, profile: str = "local") -> list[str]:
    """The real snakemake CLI on the repo's Snakefile in `workdir`, config written there."""
    workdir.mkdir(parents=True, exist_ok=True)
    configfile = workdir / "config.yaml"
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    return [
        sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--configfile", str(configfile), "--profile", str(REPO / "profiles" / profile), *args,
    ]


def run_snakemake(workdir: Path, config: dict, *args: str, check: bool = True, profile: str = "local",
                  timeout: int = 900) -> subprocess.CompletedProcess:
    """Run snakemake (snakemake_cmd) to the end; SIGKILL after `timeout` s (a hung run cannot stop the suite)."""
    cmd = ["timeout", "-s", "KILL", str(timeout), *snakemake_cmd(workdir, config, *args, profile=profile)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 60)
    if check and proc.returncode != 0:
        pytest.fail(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
    return proc


# ---- running stages directly (package functions, no snakemake) ---------------------------------

def prepare_demo(tmp, manifest=DEMO / "manifest.json", root=DEMO / "audio"):
    out = tmp / "prepare"
    prepare_dataset(str(manifest), str(out / "prepared.jsonl"), str(out / "rejected"), str(out / "stats.json"),
                    dataset="demo", audio_root=str(root), workers=1)
    return out


def run_stage(tmp, prep, root=DEMO / "audio", parts=1, workers=1, save_embeddings=False, **rules):
    ctx = tmp / f"context-{parts}-{workers}"
    plan_context(str(prep / "prepared.jsonl"), str(ctx / "plan.json"), parts=parts,
                 grouping={"preset": "speaker"}, cost_per_audio_second=1e6)
    settings = PartSettings(audio_root=str(root), top_k=2, embed_batch=5, save_embeddings=save_embeddings, **rules)
    files = {k: [] for k in ("records", "rejected", "stats")}
    for p in range(parts):
        paths = [str(ctx / "parts" / f"part-{p:04d}.{s}") for s in ("jsonl", "rejected.jsonl", "stats.json")]
        run_context_part(str(prep / "prepared.jsonl"), str(ctx / "plan.json"), p, *paths,
                         settings=settings, device="cpu", workers=workers,
                         out_embeddings=str(ctx / "parts" / f"part-{p:04d}.embeddings.npy"),
                         out_embedding_ids=str(ctx / "parts" / f"part-{p:04d}.embedding_ids.jsonl"))
        for k, path in zip(files, paths):
            files[k].append(path)
    stats = merge_context(files["records"], files["rejected"], files["stats"], str(prep / "stats.json"),
                          str(ctx / "with_context.jsonl"), str(ctx / "rejected"), str(ctx / "stats.json"),
                          dataset="demo")
    return ctx, stats


FIELDS = ("cuts", "target_audio", "context_audio")


def write_all(out, with_context, shard_size=16, workers=1, root=DEMO / "audio", **settings):
    plan = plan_shards(str(with_context), str(out / "plan.json"), str(out / "index.npy"), shard_size=shard_size, seed=7)
    stats, rejected = [], []
    for s in range(plan["num_shards"]):
        paths = {
            "cuts": out / "shar" / "cuts" / f"cuts.{s:06d}.jsonl.gz",
            "target": out / "shar" / "target_audio" / f"recording.{s:06d}.tar",
            "context": out / "shar" / "context_audio" / f"recording.{s:06d}.tar",
            "stats": out / "jobs" / f"shard-{s:06d}.stats.json",
            "rejected": out / "jobs" / f"shard-{s:06d}.rejected.jsonl",
        }
        write_shard(str(with_context), str(out / "index.npy"), str(out / "plan.json"), s,
                    *(str(p) for p in paths.values()),
                    settings=EncodeSettings(audio_root=str(root), **settings), workers=workers)
        stats.append(str(paths["stats"]))
        rejected.append(str(paths["rejected"]))
    return plan, stats, rejected


def read_back(out):
    return CutSet.from_shar(fields={f: sorted(glob.glob(str(out / "shar" / f / "*"))) for f in FIELDS})


def run_codes(shards_dir, out, codec_path, shards=(0, 1), workers=1, name="tiny"):
    spec = CodecSpec(name=name, backend="nemo", model=str(codec_path))
    stats = []
    for s in shards:
        stats.append(encode_shard(
            str(shards_dir / "shar" / "target_audio" / f"recording.{s:06d}.tar"),
            str(shards_dir / "shar" / "context_audio" / f"recording.{s:06d}.tar"), s,
            str(out / "shar" / f"codes_{name}" / "target_codes" / f"codes.{s:06d}.tar"),
            str(out / "shar" / f"codes_{name}" / "context_codes" / f"codes.{s:06d}.tar"),
            str(out / "jobs" / f"{s}.json"), codec=spec, batch_seconds=8.0, device="cpu", workers=workers))
    return stats


def codes_in_tars(paths) -> list[np.ndarray]:
    """Every codes array (.npy member) of the given code tars, in order."""
    arrays = []
    for path in paths:
        with tarfile.open(path) as tar:
            arrays += [np.load(io.BytesIO(tar.extractfile(m).read())) for m in tar.getmembers() if m.name.endswith(".npy")]
    return arrays


def assert_informative_codes(arrays, *, reversed_arrays=None, distinct_arrays: bool = True, min_distinct: int = 64):
    """Fail unless codes carry information, so that a test comparing them can fail at all.

    `arrays`: (C, T) codes of different utterances (different audio when `distinct_arrays`).
    Checks: every codebook takes >= `min_distinct` distinct values over all arrays; no array is the
    same frame repeated; no two arrays are equal; and each `reversed_arrays[i]` (codes of the same
    audio played backwards) differs from `arrays[i]`. Call it before comparing codes.
    """
    arrays = [np.asarray(a) for a in arrays]
    assert arrays and all(a.ndim == 2 for a in arrays), "codes must be a list of (C, T) arrays"
    stacked = np.concatenate(arrays, axis=1)
    distinct = [len(np.unique(row)) for row in stacked]
    assert min(distinct) >= min_distinct, f"codebooks take only {distinct} distinct values (floor {min_distinct})"
    for i, a in enumerate(arrays):
        assert a.shape[1] < 2 or (a[:, 1:] != a[:, :-1]).any(), f"codes {i}: every frame is the same"
    if distinct_arrays:
        assert len({(a.shape, a.tobytes()) for a in arrays}) == len(arrays), "two different utterances got equal codes"
    for i, (a, r) in enumerate(zip(arrays, reversed_arrays or [])):
        assert a.shape != r.shape or (a != r).any(), f"codes {i}: the same audio played backwards gets the same codes"


def assert_informative_embeddings(embeddings, *, min_spread: float = 0.05, max_similarity: float = 0.999):
    """Fail unless L2-normalised embeddings of different utterances differ clearly from one another.

    The off-diagonal cosine similarities must spread (standard deviation >= `min_spread`) and none may
    reach `max_similarity`: a random model whose outputs are all one vector passes any comparison.
    """
    e = np.asarray(embeddings, dtype=np.float64)
    sims = (e @ e.T)[np.triu_indices(len(e), 1)]
    assert sims.std() >= min_spread, f"cosine similarities hardly vary (std {sims.std():.4f}): embeddings are degenerate"
    assert sims.max() < max_similarity, f"two different utterances embed alike (cosine {sims.max():.5f})"


def system_tool(binary: str, packages: list[str]) -> str:
    """Path of `binary`; apt-installs `packages` first where it is missing and we are root, else skips.

    CI runs the test command alone on a fresh Debian machine, so tests that need a system tool
    (Chromium, Slurm) install it here rather than in a separate CI step.
    """
    if path := shutil.which(binary):
        return path
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip(f"{binary} is not installed and this is not a root Debian machine (apt-get install {' '.join(packages)})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            pytest.skip(f"could not install {packages}: {done.stderr[-500:]}")
    return shutil.which(binary) or pytest.skip(f"{binary} not found after installing {packages}")
