import functools
import json
import os
import re
from pathlib import Path

from sharflow.config import validate_config
from sharflow.errors import SharflowError
from sharflow.parallel import resolve_workers

try:
    validate_config(config, Path(workflow.basedir) / "config" / "schema.yaml")
except SharflowError as e:
    raise WorkflowError(str(e)) from None

DATASETS = sorted(config["datasets"])


wildcard_constraints:
    dataset="|".join(re.escape(d) for d in DATASETS),
    part=r"\d{4}",
    shard=r"\d{6}",
    codec="|".join(re.escape(c) for c in sorted(config["codecs"])) or "(?!)",


def get_final_outputs():
    """Every file the default target builds, for every dataset (and codec)."""
    return expand(
        [
            "results/{dataset}/prepare/stats.json",
            "results/{dataset}/context/stats.json",
            "results/{dataset}/shar_stats.json",
        ],
        dataset=DATASETS,
    ) + expand("results/{dataset}/codes_stats/{codec}.json", dataset=DATASETS, codec=sorted(config["codecs"])) + expand(
        ["results/{dataset}/buckets.yaml", "results/{dataset}/verify.json"], dataset=DATASETS
    ) + ["results/input_cfg.yaml", "results/report/summary.html"]


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


def get_grouping(wildcards):
    """Arguments of sharflow.grouping.group_key_function for the dataset."""
    ds = config["datasets"][wildcards.dataset]
    return {
        "preset": ds["speaker_preset"],
        "regex": ds["speaker_regex"],
        "field": ds["speaker_regex_field"],
    }


def get_context_part_settings(wildcards):
    """Fields of sharflow.context.PartSettings for the dataset."""
    ctx = config["context"]
    keys = ["embedder", "embedder_options", "min_similarity", "min_context_duration",
            "max_context_duration", "top_k", "block_rows", "embed_batch", "save_embeddings"]
    return {"audio_root": config["datasets"][wildcards.dataset]["audio_root"], **{k: ctx[k] for k in keys}}


def get_context_threads(wildcards):
    return min(resolve_workers(config["context"]["workers"]), workflow.cores)


def get_context_gpus(wildcards):
    """One GPU per context job unless the config pins the stage to the CPU."""
    return 0 if config["context"]["device"] == "cpu" else 1


def get_embedding_outputs():
    """Extra outputs of context_part when context.save_embeddings is on."""
    if not config["context"]["save_embeddings"]:
        return {}
    prefix = "results/{dataset}/context/parts/part-{part}"
    return {"embeddings": f"{prefix}.embeddings.npy", "embedding_ids": f"{prefix}.embedding_ids.jsonl"}


def get_context_parts(suffix):
    """Input function: the files of every context part of a dataset, ending in `suffix`."""

    def parts(wildcards):
        return [
            f"results/{wildcards.dataset}/context/parts/part-{p:04d}.{suffix}"
            for p in range(config["context"]["parts"])
        ]

    return parts


def get_encode_settings(wildcards):
    """Fields of sharflow.shar_audio.EncodeSettings for the dataset."""
    return {
        "audio_root": config["datasets"][wildcards.dataset]["audio_root"],
        "audio_format": config["shar"]["audio_format"],
        "sample_rate": config["shar"]["sample_rate"],
    }


# Per-shard rules take static values where they can: a callable costs Snakemake ~0.5 ms per job,
# which adds up with tens of thousands of shard jobs (benchmarks/bench_dag.py). Snakemake caps a
# job's threads at --cores; the Slurm profile sets them per rule.
SHAR_THREADS = resolve_workers(config["shar"]["workers"])
CODES_THREADS = resolve_workers(config["codes"]["workers"])
CODES_GPUS = 0 if config["codes"]["device"] == "cpu" else config["codes"]["gpus_per_job"]


def get_verify_threads(wildcards):
    return min(resolve_workers(config["verify"]["workers"]), workflow.cores)


@functools.lru_cache(maxsize=None)
def _num_shards(plan_path, mtime):
    with open(plan_path) as f:
        return json.load(f)["num_shards"]


def num_shards(dataset):
    """Shard count from the dataset's shar plan (a checkpoint), read once per plan file version."""
    plan = checkpoints.shar_plan.get(dataset=dataset).output.plan
    return _num_shards(plan, os.path.getmtime(plan))


def get_shard_files(pattern):
    """Input function: `pattern`, with the job's wildcards, for every shard index of the dataset."""

    def files(wildcards):
        values = dict(wildcards.items())
        return [pattern.format(**values, shard=f"{s:06d}") for s in range(num_shards(wildcards.dataset))]

    return files


def get_random_codec_config(wildcards):
    path = config["codecs"][wildcards.codec]["random_from_config"]
    if path is None:
        raise WorkflowError(f"codec {wildcards.codec} has a model; nothing to build")
    return path


def _codec_model_path(codec):
    """Where the codec's model is, and whether the workflow builds it."""
    spec = config["codecs"][codec]
    if spec["random_from_config"]:
        return f"results/models/{codec}.nemo", True
    return spec["model"], False


def get_codec_model_file(wildcards):
    """The codec's model file as an input (so a new model reruns the codes), if it is a local file."""
    path, built = _codec_model_path(wildcards.codec)
    return [path] if built or os.path.exists(path) else []


def get_codec_spec(wildcards):
    """Fields of sharflow.codes.CodecSpec."""
    spec = config["codecs"][wildcards.codec]
    path, _ = _codec_model_path(wildcards.codec)
    return {"name": wildcards.codec, "backend": spec["backend"], "model": path, "precision": spec["precision"]}


def get_training_codec():
    """The codec input_cfg points at: training.codec, else the first codec as listed, else none."""
    return config["training"]["codec"] or next(iter(config["codecs"]), None)


def get_training_codes_stats(wildcards):
    codec = get_training_codec()
    return expand("results/{dataset}/codes_stats/{codec}.json", dataset=DATASETS, codec=[codec] if codec else [])


def get_codes_stats(wildcards):
    """{codec: codes stats file} of the dataset."""
    return {codec: f"results/{wildcards.dataset}/codes_stats/{codec}.json" for codec in sorted(config["codecs"])}


def get_report_datasets(wildcards):
    """Arguments of sharflow.report.write_report: every stats file of every dataset."""
    return {
        ds: {
            "prepare": f"results/{ds}/prepare/stats.json",
            "context": f"results/{ds}/context/stats.json",
            "shar": f"results/{ds}/shar_stats.json",
            "codes": {codec: f"results/{ds}/codes_stats/{codec}.json" for codec in sorted(config["codecs"])},
            "buckets": f"results/{ds}/buckets.yaml",
            "verify": f"results/{ds}/verify.json",
            "plan": f"results/{ds}/shard_plan.json",
            "shar_dir": f"results/{ds}/shar",
        }
        for ds in DATASETS
    }


def get_report_inputs(wildcards):
    """The files of get_report_datasets, as named inputs."""
    datasets = get_report_datasets(wildcards).values()
    names = ("prepare", "context", "shar", "buckets", "verify", "plan")
    inputs = {name: [d[name] for d in datasets] for name in names}
    inputs["codes"] = [path for d in datasets for path in d["codes"].values()]
    return inputs


def get_training_datasets(wildcards):
    """Arguments of sharflow.training.write_input_cfg for every dataset."""
    return {
        ds: {
            "shar_dir": f"results/{ds}/shar",
            "plan": f"results/{ds}/shard_plan.json",
            "weight": config["datasets"][ds]["weight"],
            "tags": config["datasets"][ds]["tags"],
        }
        for ds in DATASETS
    }
