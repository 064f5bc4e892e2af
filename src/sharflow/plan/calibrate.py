"""The calibration run: the whole workflow, through the same profile, on each dataset's sample.

It runs in a working folder of its own (results/plan/calibration: its own results/, logs/ and
.snakemake/) with the run's config, each dataset's manifest replaced by its sample (a NeMo
manifest of prepared records, sharflow.plan.sample; a long_form dataset's, a listing of some of its
recordings, which the calibration segments) and its relative paths made absolute. The
part rules run one part per dataset (a sample is small; the plan counts the real parts' start-up
per job), and nothing is published. The nested `snakemake` is started without a shell, with the
options of the run that asked for the plan that say where jobs go (profiles, executor, jobs,
cores): GPU stages run where the real run will put them. Its jobs start as the real run's will
(sharflow.work.warm): on a cluster each cold, in a job step of its own; in a local run as forks of
a warm server, so that a local plan counts a local job's start-up, not a fresh interpreter's NeMo
import in each (about 10 CPU-s a job).
"""

import copy
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from sharflow.core.atomic import atomic_file, write_json
from sharflow.core.errors import SharflowError
from sharflow.io import storage

PATH_KEYS = {"manifest", "recordings", "audio_root", "model", "random_from_config", "weights", "cache_dir"}
PART_SECTIONS = ("segment", "text", "quality", "context", "identity")
# Options of the calling snakemake that decide where and how many jobs run (each takes one value)
PASSED = ("--profile", "--workflow-profile", "--executor", "-e", "--jobs", "-j", "--cores", "-c")
PATH_OPTIONS = {"--profile", "--workflow-profile"}


def _absolute(value, *cwds: Path):
    """A relative local path that exists under one of `cwds` (the first), made absolute; anything
    else as it is."""
    if isinstance(value, str) and value and not storage.is_url(value) and not os.path.isabs(value):
        for cwd in cwds:
            candidate = Path(cwd) / value
            if candidate.exists():
                return str(candidate.resolve())
    return value


def _absolutize(node, cwd: Path):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in PATH_KEYS:
                node[key] = _absolute(value, cwd)
            else:
                _absolutize(value, cwd)
    elif isinstance(node, list):
        for item in node:
            _absolutize(item, cwd)


def calibration_config(config: dict, samples: dict[str, str], cwd: str | Path) -> dict:
    """The calibration run's config: the run's, each dataset read from its sample."""
    cwd = Path(cwd)
    out = copy.deepcopy(config)
    _absolutize(out, cwd)
    for name, spec in out["datasets"].items():
        manifest = str(Path(samples[name]).resolve())
        if spec.get("format") == "long_form":  # a listing of the sampled recordings: the segment stage runs
            spec.update(manifest=manifest)
            continue
        spec.update(manifest=manifest, format="nemo", recipe=None, recipe_options={}, recordings=None)
    for section in PART_SECTIONS:
        for key in ("parts", "check_parts"):
            if key in out.get(section, {}):
                out[section][key] = 1
    out["publish"]["url"] = None
    out["training"]["path_prefix"] = None
    return out


def passed_options(argv: list[str], *cwds: str | Path) -> list[str]:
    """The options of `argv` (the calling snakemake's) that the calibration run takes over: PASSED,
    as `--opt value` or `--opt=value`, profile folders made absolute (found under the first of `cwds`
    that holds them: the folder snakemake was started in, which it has left for --directory by the
    time it reads the Snakefile, then the workflow's own)."""
    out: list[str] = []
    args = iter(argv)
    for arg in args:
        name, eq, value = arg.partition("=")
        if name not in PASSED:
            continue
        if not eq:
            value = next(args, None)
            if value is None:
                break
        if name in PATH_OPTIONS:
            value = _absolute(value, *cwds)
        out += [name, value]
    return out


RUNS = ("sample", "small")  # the calibration's two runs, each in a folder of its own under its folder


def run_calibration(
    *,
    config: dict,
    samples: dict[str, str],
    smalls: dict[str, str],
    folder: str,
    snakefile: str,
    options: list[str],
    cwd: str,
    done: str,
) -> dict:
    """Run the workflow on the samples, then on the small samples, each in its folder under `folder`
    (RUNS; what an earlier calibration left there removed first, so that every cost record is this
    calibration's); write and return its record (`done`)."""
    record: dict = {"runs": {}}
    models = None
    for run, manifests in zip(RUNS, (samples, smalls), strict=True):
        out = Path(folder) / run
        record["runs"][run] = _run_once(config, manifests, out, snakefile, options, cwd, models)
        # the models the first run built (a random codec, the ASR check's): one-offs, the same for
        # both runs (the same config), built once
        models = Path(folder).resolve() / run / "results" / "models"
    record["wall_s"] = round(sum(r["wall_s"] for r in record["runs"].values()), 1)
    write_json(done, record)
    return record


def _run_once(config, manifests, folder: Path, snakefile, options, cwd, models: Path | None) -> dict:
    folder = folder.resolve()
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    if models is not None and models.is_dir():
        (folder / "results").mkdir()
        (folder / "results" / "models").symlink_to(models, target_is_directory=True)
    configfile = folder / "config.yaml"
    with atomic_file(configfile) as f:
        yaml.safe_dump(calibration_config(config, manifests, cwd), f, sort_keys=False)
    if not any(o in ("--cores", "-c", "--jobs", "-j") for o in options):
        options = [*options, "--cores", "all"]
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(Path(snakefile).resolve()),
        "--directory",
        str(folder),
        "--configfile",
        str(configfile),
        *options,
    ]
    start = time.perf_counter()
    # the jobs start as the real run's do (sharflow.workflow.engine.warm_starts): warm in a local run
    # (a fork's peak memory counts the pages it shares with its server, above a cold job's: a merge's
    # 557 MB against 177 here), cold in a job step of their own on a cluster or with
    # SHARFLOW_WARM_STARTS=0
    proc = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr, check=False)
    if proc.returncode != 0:
        raise SharflowError(
            f"the calibration run in {folder} failed (exit status {proc.returncode}); its log is above and "
            f"its jobs' logs are under {folder / 'logs'}. Command: {json.dumps(cmd)}"
        )
    return {"command": cmd, "wall_s": round(time.perf_counter() - start, 1)}
