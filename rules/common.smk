import re
from pathlib import Path

from sharflow.config import validate_config
from sharflow.errors import SharflowError
from sharflow.prepare import resolve_workers

try:
    validate_config(config, Path(workflow.basedir) / "config" / "schema.yaml")
except SharflowError as e:
    raise WorkflowError(str(e)) from None

DATASETS = sorted(config["datasets"])


wildcard_constraints:
    dataset="|".join(re.escape(d) for d in DATASETS),


def get_final_outputs():
    """Every file the default target builds, for every dataset."""
    return expand("results/{dataset}/prepare/stats.json", dataset=DATASETS)


def get_manifest(wildcards):
    return config["datasets"][wildcards.dataset]["manifest"]


def get_prepare_settings(wildcards):
    """Keyword arguments of sharflow.prepare.prepare_dataset, from the dataset's config."""
    ds = config["datasets"][wildcards.dataset]
    return {
        "dataset": wildcards.dataset,
        "audio_root": ds["audio_root"],
        "language": ds["language"],
        "require_text": ds["require_text"],
        "duration_tolerance": config["prepare"]["duration_tolerance"],
        "max_rejected_fraction": config["prepare"]["max_rejected_fraction"],
    }


def get_prepare_threads(wildcards):
    return min(resolve_workers(config["prepare"]["workers"]), workflow.cores)
