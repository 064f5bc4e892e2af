"""Helpers shared by the tests: test audio, JSON lines, and real snakemake runs."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

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


def run_snakemake(workdir: Path, config: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the real snakemake CLI on the repo's Snakefile in `workdir` with the local profile."""
    workdir.mkdir(parents=True, exist_ok=True)
    configfile = workdir / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    cmd = [
        sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--configfile", str(configfile), "--profile", str(REPO / "profiles" / "local"), *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        pytest.fail(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
    return proc
