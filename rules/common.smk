import functools
import os
import re
from pathlib import Path

from sharflow.core import layout
from sharflow.core.config import validate_config
from sharflow.core.errors import SharflowError
from sharflow.core.parallel import resolve_workers
from sharflow.core.ranks import host_shows_gpu

try:
    validate_config(config, Path(workflow.basedir) / "config" / "schema.yaml")
except SharflowError as e:
    raise WorkflowError(str(e)) from None


# ---- Constants of the run (the schema has filled every default) --------------------------------
DATASETS = sorted(config["datasets"])
CODECS = sorted(config["codecs"])
QUALITY = config["quality"]["enabled"]
ASR = config["quality"]["asr"]
# Every path comes from sharflow.core.layout; DS gives a dataset's files as patterns of {dataset}.
DS = layout.dataset_files("{dataset}")
HOST_SHOWS_GPU = host_shows_gpu()


# Shar and codes jobs work on blocks of <stage>.shards_per_job shards (a power of ten, the schema's
# enum), then blocks a tenth the size down to 10 where the plan ends inside a block, and single
# shards for the rest (rules/shar.smk, rules/codes.smk; docs: codes).
def block_sizes(per_job):
    return [10**k for k in range(layout.block_digits(per_job), 0, -1)]


SHAR_BLOCK_SIZES = block_sizes(config["shar"]["shards_per_job"])
CODES_BLOCK_SIZES = block_sizes(config["codes"]["shards_per_job"])


def block_rule(stage, size):
    """<stage>_block for blocks of <stage>.shards_per_job shards, <stage>_block<size> for smaller ones."""
    return f"{stage}_block" if size == config[stage]["shards_per_job"] else f"{stage}_block{size}"


wildcard_constraints:
    dataset="|".join(re.escape(d) for d in DATASETS),
    part=r"\d{4}",
    shard=r"\d{6}",
    codec="|".join(re.escape(c) for c in CODECS) or "(?!)",


def get_final_outputs():
    """Every file the default target builds, for every dataset (and codec)."""
    files = [layout.dataset_files(ds) for ds in DATASETS]
    return (
        [path for f in files for path in (f.prepare_stats, f.context_stats, f.shar_stats)]
        + [f.quality_stats for f in files if QUALITY]
        + [f.codes_stats(codec) for f in files for codec in CODECS]
        + [path for f in files for path in (f.catalog, f.buckets, f.verify, f.dataset_card)]
        + [layout.INPUT_CFG, f"{layout.REPORT_DIR}/summary.html"]
    )


# ---- Threads and GPUs -------------------------------------------------------------------------
def threads_of(section):
    """A rule's threads: config[section].workers (0: every core this process may use), capped at --cores."""
    return lambda wildcards: min(resolve_workers(config[section]["workers"]), workflow.cores)


def gpu_request(section, gpus=1):
    """A GPU rule's `gpu` resource: `gpus`, or 0 for device: cpu or a local run on a machine without a GPU.

    Locally, `gpu` only caps how many GPU jobs run at once (profiles/local); with no GPU the jobs
    run CPU ranks on their threads, and the cap would leave the other cores idle. A cluster
    executor keeps the request whatever the submitting host has: the job's node has the GPUs.
    """
    asked = 0 if config[section]["device"] == "cpu" else gpus

    def resource(wildcards):
        return asked if workflow.non_local_exec or HOST_SHOWS_GPU else 0

    return resource


# Per-shard rules take static values where they can: a callable costs Snakemake ~0.5 ms per job,
# which adds up with tens of thousands of shard jobs (benchmarks/bench_dag.py). Snakemake caps a
# job's threads at --cores; the Slurm profile sets them per rule. The `gpu` resource is the one
# callable: whether a job holds the local GPU cap depends on the executor, known once the run starts.
SHAR_THREADS = resolve_workers(config["shar"]["workers"])
CODES_THREADS = resolve_workers(config["codes"]["workers"])
CODES_GPUS = gpu_request("codes", config["codes"]["gpus_per_job"])
CONTEXT_GPUS = gpu_request("context")
QUALITY_GPUS = gpu_request("quality")


# ---- prepare ----------------------------------------------------------------------------------
def get_manifest(wildcards):
    return config["datasets"][wildcards.dataset]["manifest"]


def get_audio_root(wildcards):
    return config["datasets"][wildcards.dataset]["audio_root"]


def get_prepare_settings(wildcards):
    """Keyword arguments of sharflow.prepare.prepare_dataset, from the dataset's config."""
    ds = config["datasets"][wildcards.dataset]
    return {
        "dataset": wildcards.dataset,
        **{k: ds[k] for k in ("audio_root", "language", "require_text")},
        **{
            k: config["prepare"][k]
            for k in ("duration_tolerance", "duration_from_file", "max_rejected_fraction")
        },
    }


# ---- parts of the quality and context stages -------------------------------------------------
def get_part_files(stage, kind):
    """Input function: file `kind` (records, rejected, metrics, stats) of every part of `stage`."""

    def parts(wildcards):
        files = layout.dataset_files(wildcards.dataset)
        part_files = {"quality": files.quality_part, "context": files.context_part}[stage]
        return [getattr(part_files(p), kind) for p in range(config[stage]["parts"])]

    return parts


# ---- quality ----------------------------------------------------------------------------------
def get_random_asr_config(wildcards):
    if ASR["random_from_config"] is None:
        raise WorkflowError("quality.asr has no random_from_config; nothing to build")
    return ASR["random_from_config"]


def _asr_model_path():
    """Where the ASR model is (None: no ASR check), and whether the workflow builds it."""
    if ASR["random_from_config"]:
        return layout.ASR_MODEL, True
    return ASR["model"], False


def get_asr_model_file(wildcards):
    """The ASR model file as an input (so a new model remeasures), if it is a local file."""
    path, built = _asr_model_path()
    return [path] if path and (built or os.path.exists(path)) else []


def get_asr_options(wildcards):
    """Fields of sharflow.quality.part.AsrOptions, or None without the ASR check."""
    path, built = _asr_model_path()
    if path is None:
        return None
    return {"model": path, "batch_seconds": ASR["batch_seconds"], "random": built}


# ---- context ----------------------------------------------------------------------------------
def get_context_records(wildcards):
    """The records the context stage reads: quality's kept.jsonl, or prepared.jsonl without quality."""
    files = layout.dataset_files(wildcards.dataset)
    return files.quality_kept if QUALITY else files.prepared


def get_context_records_stats(wildcards):
    """The stats (records_out) of the stage before context."""
    files = layout.dataset_files(wildcards.dataset)
    return files.quality_stats if QUALITY else files.prepare_stats


def get_grouping(wildcards):
    """Arguments of sharflow.context.grouping.group_key_function for the dataset."""
    ds = config["datasets"][wildcards.dataset]
    return {"preset": ds["speaker_preset"], "regex": ds["speaker_regex"], "field": ds["speaker_regex_field"]}


PART_SETTINGS = (
    "embedder",
    "embedder_options",
    "min_similarity",
    "min_context_duration",
    "max_context_duration",
    "top_k",
    "block_rows",
    "embed_batch",
    "save_embeddings",
)


def get_context_part_settings(wildcards):
    """Fields of sharflow.context.part.PartSettings for the dataset."""
    audio_root = config["datasets"][wildcards.dataset]["audio_root"]
    return {"audio_root": audio_root, **{k: config["context"][k] for k in PART_SETTINGS}}


def get_embedding_outputs():
    """Extra outputs of context_part when context.save_embeddings is on."""
    return DS.context_embeddings("{part}") if config["context"]["save_embeddings"] else {}


# ---- shar -------------------------------------------------------------------------------------
def get_encode_settings(wildcards):
    """Fields of sharflow.shar.audio.EncodeSettings for the dataset."""
    audio_root = config["datasets"][wildcards.dataset]["audio_root"]
    return {
        "audio_root": audio_root,
        **{k: config["shar"][k] for k in ("audio_format", "sample_rate", "copy_through")},
    }


@functools.lru_cache(maxsize=None)
def _num_shards(plan_path, mtime):
    return layout.planned_shards(plan_path)


def num_shards(dataset):
    """Shard count from the dataset's shar plan (a checkpoint), read once per plan file version."""
    plan = checkpoints.shar_plan.get(dataset=dataset).output.plan
    return _num_shards(plan, os.path.getmtime(plan))


def get_block_inputs(size, stage, inputs):
    """Input function of a block job of `size` shards: inputs(wildcards, files, member keys); for a
    block reaching past the plan's last shard, a file no rule makes, so that Snakemake gives its
    shards to the rule of the next size down (a candidate rule whose input cannot be made is
    passed over for the next in ruleorder)."""

    def block_inputs(wildcards):
        files = layout.dataset_files(wildcards.dataset)
        members = layout.block_members(wildcards.block, size)
        if int(members[-1]) >= num_shards(wildcards.dataset):
            return {"beyond_the_plan": files.beyond_the_plan(stage(wildcards), wildcards.block)}
        return inputs(wildcards, files, members)

    return block_inputs


def get_shar_block_inputs(size):
    """Input function of the shar jobs of `size` shards: the records and the plan (get_block_inputs)."""

    def inputs(wildcards, files, members):
        return {"with_context": files.with_context, "plan": files.shard_plan, "index": files.shar_index}

    return get_block_inputs(size, lambda wildcards: "shar", inputs)


def get_shard_files(kind, codec=None):
    """Input function: file `kind` (stats, ...) of every shard's shar files (or, with `codec`, codes
    files) of the dataset, in shard order, whichever job (a block, or one shard) makes them."""

    def per_shard(wildcards):
        files = layout.dataset_files(wildcards.dataset)
        job = (lambda s: files.codes(wildcards.codec, s)) if codec else files.shard
        return [getattr(job(s), kind) for s in range(num_shards(wildcards.dataset))]

    return per_shard


# ---- codes ------------------------------------------------------------------------------------
def get_random_codec_config(wildcards):
    path = config["codecs"][wildcards.codec]["random_from_config"]
    if path is None:
        raise WorkflowError(f"codec {wildcards.codec} has a model; nothing to build")
    return path


def _codec_model_path(codec):
    """Where the codec's model is, and whether the workflow builds it."""
    spec = config["codecs"][codec]
    if spec["random_from_config"]:
        return layout.codec_model(codec), True
    return spec["model"], False


def get_codec_model_file(wildcards):
    """The codec's model file as an input (so a new model reruns the codes), if it is a local file."""
    path, built = _codec_model_path(wildcards.codec)
    return [path] if built or os.path.exists(path) else []


def get_codec_spec(wildcards):
    """Fields of sharflow.codes.spec.CodecSpec."""
    spec = config["codecs"][wildcards.codec]
    path, _ = _codec_model_path(wildcards.codec)
    return {
        "name": wildcards.codec,
        "backend": spec["backend"],
        "model": path,
        "precision": spec["precision"],
    }


def get_codes_block_inputs(size):
    """Input function of the codes jobs of `size` shards: target_<m> and context_<m> of each member
    shard, and the codec (get_block_inputs)."""

    def inputs(wildcards, files, members):
        out = {"codec": layout.codec_spec(wildcards.codec)}
        for m, shard in enumerate(members):
            out.update({f"target_{m}": files.shard(shard).target, f"context_{m}": files.shard(shard).context})
        return out

    return get_block_inputs(size, lambda wildcards: f"codes_{wildcards.codec}", inputs)


def get_codes_stats(wildcards):
    """{codec: codes stats file} of the dataset."""
    return {codec: layout.dataset_files(wildcards.dataset).codes_stats(codec) for codec in CODECS}


# ---- training hand-off and report -------------------------------------------------------------
def get_training_codec():
    """The codec input_cfg points at: training.codec, else the first codec as listed, else none."""
    return config["training"]["codec"] or next(iter(config["codecs"]), None)


def get_training_codes_stats(wildcards):
    codec = get_training_codec()
    return [layout.dataset_files(ds).codes_stats(codec) for ds in DATASETS] if codec else []


def get_training_datasets(wildcards):
    """Arguments of sharflow.dataset.training.write_input_cfg for every dataset."""
    out = {}
    for ds in DATASETS:
        files = layout.dataset_files(ds)
        out[ds] = {"shar_dir": files.shar_dir, "plan": files.shard_plan, "catalog": files.catalog}
        out[ds].update({k: config["datasets"][ds][k] for k in ("weight", "tags")})
    return out


def get_report_datasets(wildcards):
    """Arguments of sharflow.report.report.write_report: every stats file of every dataset."""
    out = {}
    for ds in DATASETS:
        files = layout.dataset_files(ds)
        out[ds] = {
            "prepare": files.prepare_stats,
            "context": files.context_stats,
            "shar": files.shar_stats,
            "codes": {codec: files.codes_stats(codec) for codec in CODECS},
            "buckets": files.buckets,
            "verify": files.verify,
            "catalog": files.catalog,
        }
        if QUALITY:
            out[ds].update(
                quality=files.quality_stats, prepared=files.prepared, quality_metrics=files.quality_metrics
            )
    return out


def get_report_inputs(wildcards):
    """Every file of get_report_datasets."""
    inputs = []
    for files in get_report_datasets(wildcards).values():
        inputs += [path for key, path in files.items() if key != "codes"]
        inputs += files["codes"].values()
    return inputs
