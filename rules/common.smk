import functools
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

from snakemake.logging import logger

from sharflow.core import jobs, layout, storage
from sharflow.core.atomic import read_json
from sharflow.core.cache import cache_root
from sharflow.core.config import validate_config
from sharflow.core.containers import expand_shards
from sharflow.core.errors import SharflowError
from sharflow.core.parallel import resolve_workers
from sharflow.core.ranks import host_shows_gpu
from sharflow.core.splits import HELD_OUT, SplitRules
from sharflow.models.phoneme_dict import dictionary_key
from sharflow.plan.calibrate import passed_options
from sharflow.plan.key import key_now
from sharflow.plan.resources import PlannedResources
from sharflow.prepare.readers import Source, container_suffix, open_reader
from sharflow.shar.plan import correction_notes
from sharflow.text.normalizer import normalizer_key

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
PUBLISH = config["publish"]["url"]
# Where the hand-off files (input_cfg, validation_ds, evaluation sets) say the shards are.
PATH_PREFIX = config["training"]["path_prefix"] or PUBLISH
# The cache of the normalizer's grammars, resolved once here so that every job uses the same one.
TEXT_CACHE = str(cache_root(config["text"]["cache_dir"]))
# The key of the English IPA dictionary the default english_phoneme tokenizer reads (without
# training.tokenizer): a param of the text jobs, so that another dictionary measures again
PHONEME_DICT_KEY = None if config["training"]["tokenizer"] else dictionary_key()[0]
# What the calibration run (rules/plan.smk) takes over from this snakemake's command line: profiles,
# executor, jobs and cores (read here, in the process that plans the jobs). A relative profile is
# found where snakemake was started ($PWD: it has moved to --directory by now), else beside the Snakefile.
CALIBRATION_OPTIONS = passed_options(
    sys.argv, *[d for d in (os.environ.get("PWD"), workflow.basedir, os.getcwd()) if d]
)


def split_block(dataset):
    """The `splits` block of a dataset: its own, else the workflow's."""
    return config["datasets"][dataset]["splits"] or config["splits"]


# With splits configured for any dataset, every dataset goes through the splits job: a span held
# out in one dataset is rejected from another's train (sharflow.splits.stage).
SPLITS = any(SplitRules.from_config(split_block(ds)).enabled for ds in DATASETS)
# Each held-out split of a dataset whose own splits are on is a Shar set of its own,
# "<dataset>/<split>" (results/<dataset>/<split>/): the shar, codes and verify rules make it as
# they make the dataset's own (train) Shar, from the dataset's context records (docs: splits).
# With splits, the identity stage links train records to held-out ones by content across every
# dataset (sharflow.identity; docs: splits), unless identity.enabled is false.
IDENTITY = SPLITS and config["identity"]["enabled"]
# With quality on, its parts write the identity parts from the decode they measure (one decode per
# record); without, the identity_part jobs decode in identity.parts parts of their own.
IDENTITY_PARTS = config["quality"]["parts"] if QUALITY else config["identity"]["parts"]
HELD_OUT_SETS = [
    layout.split_set(ds, split)
    for ds in DATASETS
    if SplitRules.from_config(split_block(ds)).enabled
    for split in HELD_OUT
]


TEST_SETS = [name for name in HELD_OUT_SETS if layout.set_of(name)[1].startswith("test_")]


def dataset_of(name):
    """The dataset of a Shar set (itself, or the dataset of a held-out split)."""
    return layout.set_of(name)[0]


def split_of(name):
    """The split a Shar set holds: its held-out split, train for a dataset with splits, else None."""
    return layout.set_of(name)[1] or ("train" if SPLITS else None)


def held_out_sets(dataset):
    return [name for name in HELD_OUT_SETS if dataset_of(name) == dataset]


# Shar and codes jobs work on blocks of shards: which job makes which shards, what it writes and how
# a lost or partial job is found is sharflow.core.jobs (rules/shar.smk, rules/codes.smk; docs: long runs).
def job_kinds(stage):
    """The kinds of `stage` job (jobs.job_kinds), one rule each."""
    return jobs.job_kinds(stage, config[stage]["shards_per_job"])


wildcard_constraints:
    dataset="|".join(re.escape(d) for d in DATASETS + HELD_OUT_SETS),
    part=r"\d{4}",
    shard=r"\d{6}",
    language=r"\w+",
    codec="|".join(re.escape(c) for c in CODECS) or "(?!)",


def get_final_outputs():
    """Every file the default target builds, for every dataset (and codec)."""
    files = [layout.dataset_files(ds) for ds in DATASETS]
    return (
        [path for f in files for path in (f.prepare_stats, f.text_stats, f.context_stats, f.shar_stats)]
        + [f.split_stats for f in files if SPLITS]
        + ([layout.IDENTITY_STATS] if IDENTITY else [])
        + [f.quality_stats for f in files if QUALITY]
        + [f.codes_stats(codec) for f in files for codec in CODECS]
        + [path for f in files for path in (f.catalog, f.buckets, f.verify, f.dataset_card)]
        + [layout.INPUT_CFG, f"{layout.REPORT_DIR}/summary.html"]
        + ([layout.VALIDATION_DS] if HELD_OUT_SETS else [])
        + [layout.dataset_files(name).evaluation for name in TEST_SETS]
        + ([layout.PUBLISHED] if PUBLISH else [])
        + [
            path
            for f in map(layout.dataset_files, HELD_OUT_SETS)
            for path in (f.shar_stats, f.verify, *(f.codes_stats(codec) for codec in CODECS))
        ]
    )


# ---- Threads and GPUs -------------------------------------------------------------------------
def threads_of(section):
    """A rule's threads: config[section].workers (0: every core this process may use), capped at --cores."""
    return lambda wildcards: min(resolve_workers(config[section]["workers"]), workflow.cores)


def gpu_request(section, gpus=1):
    """A GPU rule's `gpu` resource: `gpus`, or 0 for device: cpu or a local run on a machine without a GPU.

    Locally, `gpu` only caps how many GPU jobs run at once (profiles/local); with no GPU the jobs
    run CPU ranks on their threads, and the cap would leave the other cores idle. A cluster
    executor keeps the request whatever the submitting host has: the job's node has the GPUs. So does
    a dry run, which shows what a cluster would be asked for (the profiles set no `gpu` of their own:
    a job asks for a GPU exactly when its stage's device is not cpu).
    """
    asked = 0 if config[section]["device"] == "cpu" else gpus

    def resource(wildcards):
        return asked if workflow.non_local_exec_or_dryrun or HOST_SHOWS_GPU else 0

    return resource


# Per-shard rules take static values where they can: a callable costs Snakemake ~0.5 ms per job,
# which adds up with tens of thousands of shard jobs (benchmarks/bench_dag.py). Snakemake caps a
# job's threads at --cores; the Slurm profile sets them per rule. The `gpu` resource is the one
# callable: whether a job holds the local GPU cap depends on the executor, known once the run starts.
SHAR_THREADS = resolve_workers(config["shar"]["workers"])
CODES_THREADS = resolve_workers(config["codes"]["workers"])
CODES_GPUS = gpu_request("codes", config["codes"]["gpus_per_job"])
# With quality on, the quality parts embed every record (one decode): the context parts only read
# the embeddings and select, on CPU, asking for no GPU.
CONTEXT_GPUS = gpu_request("context") if not QUALITY else (lambda wildcards: 0)
CONTEXT_DEVICE = config["context"]["device"] if not QUALITY else "cpu"
QUALITY_GPUS = gpu_request("quality")
QUALITY_PART_RULE = "quality_part_cpu" if config["quality"]["device"] == "cpu" else "quality_part"
# The rules whose jobs run on a GPU where their section's device allows (and the codes jobs), with
# that section: what a dry run marks
GPU_RULES = ((QUALITY_PART_RULE, "quality"),) + ((("context_part", "context"),) if not QUALITY else ())


# ---- prepare ----------------------------------------------------------------------------------
def dataset_inputs(dataset):
    """{manifest, recordings} that prepare reads: the config's, or a recipe's own manifests."""
    ds = config["datasets"][dataset]
    if ds["recipe"] is not None:
        files = layout.dataset_files(dataset)
        return {"manifest": files.recipe_supervisions, "recordings": files.recipe_recordings}
    return {"manifest": ds["manifest"], "recordings": ds["recordings"]}


@functools.lru_cache(maxsize=None)
def corpus_files(dataset):
    """The files prepare reads the dataset from, as paths or URLs: its containers (a folder or a
    bucket listed once per parse), else its manifest and recordings (a recipe's own manifests)."""
    ds = config["datasets"][dataset]
    if container_suffix(ds["format"]):
        return expand_shards(ds["manifest"], ds["audio_root"], container_suffix(ds["format"]))
    return [p for p in dataset_inputs(dataset).values() if p is not None]


def get_manifest(wildcards):
    """The prepare job's inputs: local manifests or tars (Snakemake watches their times: a new tar or
    Parquet file is a grown corpus, and prepare runs again); none for a URL. (In a dry run, the first
    call also logs the stages the shard plan hides: summarize_dry_run.)"""
    summarize_dry_run()
    return [f for f in corpus_files(wildcards.dataset) if not storage.is_url(f)]


# Every rule's mem_mb and runtime: the cost plan's where one was made (snakemake plan) for this
# config, corpus and code (sharflow.plan.key), else defaults; a plan made for something else is said
# once, here, where every look (a dry run too) shows it. A job's own start on a cluster node asks
# nothing of it (its resources are held already): no stamp of the corpus there.
RESOURCES = PlannedResources(
    layout.PLAN_RESOURCES,
    layout.PLAN,
    key_now=(
        None
        if workflow.remote_exec
        else lambda: key_now(
            config,
            {ds: corpus_files(ds) for ds in DATASETS},
            {ds: layout.dataset_files(ds).prepare_stats for ds in DATASETS},
        )
    ),
)
if RESOURCES.message():
    logger.warning(f"sharflow: {RESOURCES.message()}")


def get_manifest_version(wildcards):
    """A URL manifest's ETag (one HEAD request): a param, so that a replaced object reruns prepare."""
    files = corpus_files(wildcards.dataset)
    if container_suffix(config["datasets"][wildcards.dataset]["format"]):  # each object's ETag
        return [storage.head(f).etag for f in files if storage.is_url(f)] or None
    versions = [storage.head(p).etag if storage.is_url(p) else None for p in files]
    return versions[0] if len(versions) == 1 else versions


def get_audio_root(wildcards):
    return config["datasets"][wildcards.dataset]["audio_root"]


def get_prepare_settings(wildcards):
    """Keyword arguments of sharflow.prepare.prepare_dataset, from the dataset's config."""
    ds = config["datasets"][wildcards.dataset]
    inputs = dataset_inputs(wildcards.dataset)
    lhotse = {
        "form": "lhotse" if ds["recipe"] is not None else ds["format"],
        "recordings": inputs["recordings"],
        "default_speaker": ds["default_speaker"],
        "fields": ds["fields"] if container_suffix(ds["format"]) else None,
        "extra_fields": ds["extra_fields"],
    }
    return {
        "dataset": wildcards.dataset,
        "manifest": inputs["manifest"],
        **{k: ds[k] for k in ("audio_root", "language", "require_text")},
        **{
            k: config["prepare"][k]
            for k in ("duration_tolerance", "duration_from_file", "max_rejected_fraction")
        },
        # only when set: a NeMo-manifest dataset's params stay as they were (no rerun after an upgrade)
        **{k: v for k, v in lhotse.items() if v not in (None, "nemo")},
    }


def get_recipe_settings(wildcards):
    """Keyword arguments of sharflow.prepare.recipe.run_recipe, from the dataset's config."""
    ds = config["datasets"][wildcards.dataset]
    return {
        "dataset": wildcards.dataset,
        "name": ds["recipe"],
        "corpus_dir": ds["audio_root"],
        "options": ds["recipe_options"],
    }


# ---- text -------------------------------------------------------------------------------------
TEXT_SETTINGS = (
    "require_text",
    "normalized_text",
    "unnormalizable",
    "tokenizer_names",
    "context_text",
    "ipa",
)


def get_text_settings(wildcards):
    """Fields of sharflow.text.fields.TextSettings for the dataset."""
    return {k: config["datasets"][wildcards.dataset][k] for k in TEXT_SETTINGS}


def get_text_normalizers(wildcards):
    """The text_normalizer job of the dataset's language, when its records may need the normalizer
    (records in other languages load theirs in the text job, from the same cache)."""
    ds = config["datasets"][wildcards.dataset]
    if ds["normalized_text"] in ("check_manifest", "keep_manifest", "normalizer"):
        return [layout.text_normalizer(ds["language"])]
    return []


# ---- parts of the text, quality and context stages -------------------------------------------
def get_part_files(stage, kind):
    """Input function: file `kind` (records, rejected, metrics, stats) of every part of `stage` (text,
    quality, context)."""

    def parts(wildcards):
        files = layout.dataset_files(wildcards.dataset)
        part_files = {"text": files.text_part, "quality": files.quality_part, "context": files.context_part}[
            stage
        ]
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


# ---- splits -----------------------------------------------------------------------------------
def measured_records(dataset):
    """(records, stats) of the stage before splits and context: quality's, or text's without it."""
    files = layout.dataset_files(dataset)
    return (files.quality_kept, files.quality_stats) if QUALITY else (files.text_records, files.text_stats)


def get_splits_inputs(wildcards):
    """The dataset's records and their stats; with identity, the identity job's links (of every
    dataset) and the dataset's own identity parts (each record's identity fields)."""
    records, stats = measured_records(wildcards.dataset)
    if not IDENTITY:
        return {"records": records, "records_stats": stats}
    files = layout.dataset_files(wildcards.dataset)
    parts = [files.identity_part(p).records for p in range(IDENTITY_PARTS)]
    return {"records": records, "records_stats": stats, "links": layout.IDENTITY_LINKS, "identity": parts}


def get_split_dataset(wildcards):
    """Fields of sharflow.splits.stage.DatasetSplits for the dataset."""
    ds = wildcards.dataset
    return {
        "records": measured_records(ds)[0],
        "audio_root": config["datasets"][ds]["audio_root"],
        "rules": split_block(ds),
        "own_speaker_ids": config["datasets"][ds]["speaker_ids"] == "own",
    }


def get_own_speaker_ids(wildcards):
    """Whether the dataset's speaker ids are its own (datasets.<name>.speaker_ids: own)."""
    return config["datasets"][wildcards.dataset]["speaker_ids"] == "own"


def get_empty_split_action(wildcards):
    """splits.empty of the dataset's block: warn (the default) or error."""
    return split_block(wildcards.dataset).get("empty", "warn")


# ---- identity ---------------------------------------------------------------------------------
def get_identity_part_files(kind):
    """Input function: file `kind` (records, hashes) of every identity part of every dataset."""

    def parts(wildcards):
        return [
            getattr(layout.dataset_files(ds).identity_part(p), kind)
            for ds in DATASETS
            for p in range(IDENTITY_PARTS)
        ]

    return parts


def get_identity_checks(kind):
    """Input function: file `kind` (links, stats) of every identity check part."""
    return lambda wildcards: [
        getattr(layout.identity_check(p), kind) for p in range(config["identity"]["check_parts"])
    ]


def get_identity_datasets(wildcards, voices=None):
    """Fields of sharflow.identity.links.DatasetIdentity for every dataset (the parts' voices with
    identity.voices, unless `voices` is False: the check parts read none)."""
    voices = config["identity"]["voices"]["enabled"] if voices is None else voices
    return {
        ds: {
            "parts": [
                [f.records, f.hashes, *([f.voices] if voices else [])]
                for f in map(layout.dataset_files(ds).identity_part, range(IDENTITY_PARTS))
            ],
            "rules": split_block(ds),
        }
        for ds in DATASETS
    }


def get_identity_options(wildcards):
    """With identity, fields of sharflow.identity.part.IdentityOptions for a quality part (which
    writes the dataset's identity parts), else None."""
    if not IDENTITY:
        return None
    return {"own_speaker_ids": get_own_speaker_ids(wildcards), "voices": get_voice_embedding(wildcards)}


def quality_part_outputs():
    """A quality part's files; with identity, the identity part's too (update(): its last run's
    entries are kept while the job runs, and reused by key)."""
    files = DS.quality_part("{part}").named()
    if IDENTITY and QUALITY:
        identity = DS.identity_part("{part}").named()
        files |= {f"identity_{name}": update(path) for name, path in identity.items()}
    return files


def get_last_quality_run(wildcards):
    """run_quality_part's `previous` and `previous_embeddings`: the dataset's merged metrics and
    embedding rows of the last run (the merge's outputs, still on disk while the parts run)."""
    files = layout.dataset_files(wildcards.dataset)
    return {"previous": files.quality_metrics, "previous_embeddings": files.quality_embeddings}


def get_speaker_embedding(wildcards):
    """Fields of sharflow.quality.rank.SpeakerEmbedding: the context stage's embedder, which the
    quality parts run."""
    options = config["context"]["embedder_options"]
    return {"name": config["context"]["embedder"], "options": tuple(sorted(options.items()))}


def get_voice_embedding(wildcards):
    """Fields of sharflow.identity.part.VoiceEmbedding (identity.voices), or None without voices."""
    voices = config["identity"]["voices"]
    if not voices["enabled"]:
        return None
    return {"embedder": voices["embedder"], "options": tuple(sorted(voices["embedder_options"].items()))}


# ---- context ----------------------------------------------------------------------------------
def get_context_records(wildcards):
    """The records the context stage reads: the splits job's (with splits configured), else
    quality's kept.jsonl, or prepared.jsonl without quality."""
    if SPLITS:
        return layout.dataset_files(wildcards.dataset).split_records
    return measured_records(wildcards.dataset)[0]


def get_context_records_stats(wildcards):
    """The stats (records_out) of the stage before context."""
    if SPLITS:
        return layout.dataset_files(wildcards.dataset).split_stats
    return measured_records(wildcards.dataset)[1]


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


def get_measured_embeddings(wildcards):
    """With quality on, the quality stage's embeddings of every record and the records they are rows
    of (sharflow.context.part.MeasuredEmbeddings), which the context parts read; else none."""
    if not QUALITY:
        return {}
    files = layout.dataset_files(wildcards.dataset)
    return {"measured_records": files.text_records, "embeddings": files.quality_embeddings}


def get_embedding_outputs():
    """Extra outputs of context_part when context.save_embeddings is on."""
    return DS.context_embeddings("{part}") if config["context"]["save_embeddings"] else {}


# ---- shar -------------------------------------------------------------------------------------
def get_encode_settings(wildcards):
    """Fields of sharflow.shar.audio.EncodeSettings for the Shar set's dataset."""
    audio_root = config["datasets"][dataset_of(wildcards.dataset)]["audio_root"]
    return {
        "audio_root": audio_root,
        **{k: config["shar"][k] for k in ("audio_format", "sample_rate", "copy_through")},
    }


@functools.lru_cache(maxsize=None)
def _plan_jobs(plan_path, mtime, shards_per_job):
    plan = read_json(plan_path)
    planned = jobs.planned_jobs(plan, shards_per_job)
    of_shard = {
        int(shard): job
        for job in planned
        for shard in layout.block_members(job[0], layout.block_size(job[0]), job[1])
    }
    return SimpleNamespace(
        jobs=planned, set=frozenset(planned), of_shard=of_shard, corrected=plan.get("corrected", [])
    )


def plan_jobs(dataset, stage):
    """The jobs of `stage` (shar or codes) from the dataset's shar plan (a checkpoint), read once per
    plan file version: `jobs` [(block key, shards)] in order, as a `set`, and the job `of_shard`
    ({shard number: job})."""
    plan = checkpoints.shar_plan.get(dataset=dataset).output.plan
    return _plan_jobs(plan, os.path.getmtime(plan), config[stage]["shards_per_job"])


def planned_on_disk(dataset, stage):
    """plan_jobs from the plan file as it is on disk (None before the first plan), without asking the
    checkpoint: Snakemake answers the checkpoint only after choosing a rule for a file named on the
    command line, and never goes back on that choice."""
    plan = layout.dataset_files(dataset).shard_plan
    if not os.path.exists(plan):
        return None
    return _plan_jobs(plan, os.path.getmtime(plan), config[stage]["shards_per_job"])


def get_block_inputs(shards, stage, inputs):
    """Input function of the `stage` jobs of `shards` shards: inputs(wildcards, files, block); for a
    block that is not one of the plan's jobs of that many shards, a file no rule makes. A shard's
    file named on the command line matches a rule of every kind; Snakemake passes over a candidate
    whose input cannot be made, so the job the plan has makes it (sharflow.core.jobs)."""

    def block_inputs(wildcards):
        files = layout.dataset_files(wildcards.dataset)
        job = (wildcards.block, shards)
        on_disk = planned_on_disk(wildcards.dataset, stage)
        if on_disk is not None and job not in on_disk.set:  # decided before the checkpoint pass
            return {"beyond_the_plan": files.beyond_the_plan(stage, wildcards.block)}
        if job not in plan_jobs(wildcards.dataset, stage).set:
            return {"beyond_the_plan": files.beyond_the_plan(stage, wildcards.block)}
        rerun_if_damaged(block_record(files, stage, wildcards.get("codec"), *job))
        return inputs(wildcards, files, wildcards.block)

    return block_inputs


def block_record(files, stage, codec, block, shards):
    """The completion record of the `stage` job (shar, or codes of `codec`) of `shards` shards from `block`."""
    if stage == "shar":
        return files.shar_job(block, layout.block_size(block), shards)
    return files.codes_job(codec, block, layout.block_size(block), shards)


def get_shar_block_inputs(shards):
    """Input function of the shar jobs of `shards` shards: the records and the plan (get_block_inputs)."""

    def inputs(wildcards, files, block):
        found = files.shar_input(block, layout.block_size(block), shards)
        say_corrections(wildcards.dataset, files, block, shards, found)
        return {"inputs": found}

    return get_block_inputs(shards, "shar", inputs)


def say_corrections(dataset, files, block, shards, inputs):
    """Log once which of a shar job's shards are written again for records corrected since the job ran
    (the plan's `corrected`), and what of them is kept: a look names what the run will remake."""
    record = files.shar_job(block, layout.block_size(block), shards)
    if not (os.path.exists(record) and os.path.exists(inputs)):
        return
    if os.path.getmtime(record) >= os.path.getmtime(inputs):
        return
    members = {int(m) for m in layout.block_members(block, layout.block_size(block), shards)}
    for note in correction_notes(plan_jobs(dataset, "shar").corrected, members):
        if note not in _SAID:
            _SAID.add(note)
            logger.warning(f"sharflow: {dataset}: {note}")


def job_records(name, stage, codec=None):
    """The completion record of every `stage` job (shar, or codes of `codec`) of a Shar set's plan."""
    files = layout.dataset_files(name)
    return [block_record(files, stage, codec, *job) for job in plan_jobs(name, stage).jobs]


LISTING = jobs.Listing()
_SAID = set()


def rerun_if_damaged(record):
    """Run a finished shar or codes job again when its files are no longer what its record says
    (jobs.damage: one missing, or of another size): its record is forced, as `--forcerun <record>`
    would (Snakemake's DAG reads its forced files after every input function has run), and the log
    names what is wrong and the job. Nothing is removed or written here: input functions run on
    every look (-n, --dag, --summary, a Slurm job's own parse), and looking changes nothing. The
    job's run replaces the record with its files (docs: long runs)."""
    wrong = jobs.damage(record, LISTING)
    if wrong and workflow.dag is not None:
        workflow.dag.forcefiles.add(record)
    for why in wrong:
        if why not in _SAID:
            _SAID.add(why)
            logger.warning(f"sharflow: {why}: its job ({record}) runs again")


def get_repairs(name):
    """Input function: the record of every shar and codes job of the Shar set `name` that is missing
    (a job not run yet, or its record deleted): asking for those makes Snakemake run the jobs. The
    default target asks for them, a function per set (one whose plan is not made yet waits for it
    alone), not the jobs that list the records: Snakemake does not look again at what those ask for
    after the plan's checkpoint. (A job whose files are damaged is forced from its own input
    function: rerun_if_damaged.)"""

    def repairs(wildcards):
        records = job_records(name, "shar") + [r for c in CODECS for r in job_records(name, "codes", c)]
        return [record for record in records if not os.path.exists(record)]

    return repairs


def get_job_records(stage):
    """Input function: job_records of the Shar set. Jobs after the shar and codes jobs list these
    instead of every shard's files (a 10,000-shard DAG lists ~1,000 files per stage, not 10,000 or
    more), and find the shards' files from the plan (layout.DatasetFiles.planned)."""
    return lambda wildcards: job_records(wildcards.dataset, stage, wildcards.get("codec"))


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


def get_codes_block_inputs(shards):
    """Input function of the codes jobs of `shards` shards: the completion record of every shar job
    that made one of its shards, and the codec (get_block_inputs)."""

    def inputs(wildcards, files, block):
        of_shard = plan_jobs(wildcards.dataset, "shar").of_shard
        members = layout.block_members(block, layout.block_size(block), shards)
        shar_jobs = sorted({of_shard[int(m)] for m in members})
        return {
            "codec": layout.codec_spec(wildcards.codec),
            "shar_jobs": [files.shar_job(key, layout.block_size(key), count) for key, count in shar_jobs],
        }

    return get_block_inputs(shards, "codes", inputs)


def get_dataset_file(kind):
    """Input function: the dataset's file `kind` (with_context, context_stats, catalog) for a Shar set."""
    return lambda wildcards: getattr(layout.dataset_files(dataset_of(wildcards.dataset)), kind)


def get_shar_plan_inputs(wildcards):
    """The Shar set's records; for a dataset's train set with identity, its splits rejects too (the
    plan keeps in their shards the records now found to be held-out audio: shar.leaks)."""
    out = {"with_context": get_dataset_file("with_context")(wildcards)}
    if IDENTITY and split_of(wildcards.dataset) == "train":
        out["held_out_rejects"] = layout.dataset_files(wildcards.dataset).split_rejected
    return out


def get_held_out_plans(wildcards):
    """[(split, shard plan)] of the dataset's held-out Shar sets (None without splits): the catalog's
    rows after the dataset's own."""
    if not held_out_sets(wildcards.dataset):
        return None
    return [
        [split_of(name), layout.dataset_files(name).shard_plan] for name in held_out_sets(wildcards.dataset)
    ]


def get_held_out_job_records(wildcards):
    """The shar job records of the dataset's held-out Shar sets (their catalog fragments are done)."""
    return [path for name in held_out_sets(wildcards.dataset) for path in job_records(name, "shar")]


def get_codes_stats(wildcards):
    """{codec: codes stats file} of the dataset."""
    return {codec: layout.dataset_files(wildcards.dataset).codes_stats(codec) for codec in CODECS}


# ---- training hand-off and report -------------------------------------------------------------
def get_training_codec():
    """The codec input_cfg points at: training.codec, else the first codec as listed, else none."""
    return config["training"]["codec"] or next(iter(config["codecs"]), None)


def get_validation_codes_stats(wildcards):
    codec = get_training_codec()
    return (
        [layout.dataset_files(name).codes_stats(codec) for name in get_validation_sets(wildcards)]
        if codec
        else []
    )


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


def get_validation_sets(wildcards):
    """Arguments of sharflow.dataset.training.write_input_cfg for every dev split's Shar set."""
    out = {}
    for name in HELD_OUT_SETS:
        dataset, split = layout.set_of(name)
        if split.startswith("dev_"):
            files = layout.dataset_files(name)
            out[name] = {
                "shar_dir": files.shar_dir,
                "plan": files.shard_plan,
                "catalog": layout.dataset_files(dataset).catalog,
                "split": split,
                "weight": None,
                "tags": {"dataset": dataset, **config["datasets"][dataset]["tags"], "split": split},
            }
    return out


def get_card_inputs(wildcards):
    """The dataset card's files: catalog, buckets, verify, the text stats; with splits its splits
    stats, and the identity job's stats."""
    files = layout.dataset_files(wildcards.dataset)
    out = {
        "catalog": files.catalog,
        "buckets": files.buckets,
        "verify": files.verify,
        "text": files.text_stats,
    }
    if SPLITS:
        out["splits"] = files.split_stats
    if IDENTITY:
        out["identity"] = layout.IDENTITY_STATS
        out["plan"] = files.shard_plan
    return out


def get_report_datasets(wildcards):
    """Arguments of sharflow.report.report.write_report: every stats file of every dataset."""
    out = {}
    for ds in DATASETS:
        files = layout.dataset_files(ds)
        out[ds] = {
            "prepare": files.prepare_stats,
            "text": files.text_stats,
            "context": files.context_stats,
            "shar": files.shar_stats,
            "codes": {codec: files.codes_stats(codec) for codec in CODECS},
            "buckets": files.buckets,
            "verify": files.verify,
            "catalog": files.catalog,
        }
        if QUALITY:
            out[ds].update(
                quality=files.quality_stats, records=files.text_records, quality_metrics=files.quality_metrics
            )
        if SPLITS:
            out[ds]["splits"] = files.split_stats
        if IDENTITY:
            out[ds]["identity"] = layout.IDENTITY_STATS
    return out


def get_report_inputs(wildcards):
    """Every file of get_report_datasets."""
    inputs = []
    for files in get_report_datasets(wildcards).values():
        inputs += [path for key, path in files.items() if key != "codes"]
        inputs += files["codes"].values()
    return inputs


# ---- publish ----------------------------------------------------------------------------------
def get_publish_inputs(wildcards):
    """What the publish job uploads, finished and verified: every Shar set's verification, catalog,
    bucket bins and card, the evaluation sets, input_cfg and validation_ds."""
    files = [layout.dataset_files(name) for name in DATASETS]
    return {
        "verify": [layout.dataset_files(name).verify for name in DATASETS + HELD_OUT_SETS],
        "datasets": [path for f in files for path in (f.catalog, f.buckets, f.dataset_card)],
        "evaluation": [layout.dataset_files(name).evaluation for name in TEST_SETS],
        "handoff": [layout.INPUT_CFG] + ([layout.VALIDATION_DS] if HELD_OUT_SETS else []),
    }


# ---- a dry run's summary ------------------------------------------------------------------------
_SUMMARIZED = []  # the dry run's summary is logged once (the input function runs per DAG pass)


def summarize_dry_run():
    """In a dry run, log once what Snakemake's job counts cannot show: the cost plan's stages (every
    job, the shard jobs after the checkpoint included) where a plan made for this run is there, else
    the most shar and codes jobs of every dataset not planned into shards yet, from what costs almost
    nothing to read (most_records). Called from prepare's input function, which every DAG evaluates
    first: the Snakefile is read before Snakemake knows it is a dry run, the DAG is built after (and
    an input function on `all` would make Snakemake build the DAG below it again after the checkpoint)."""
    from sharflow.plan.page import plan_summary, shard_jobs_summary

    if not workflow.dryrun or _SUMMARIZED:
        return
    _SUMMARIZED.append(True)
    if os.path.exists(layout.PLAN) and RESOURCES.planned:
        logger.info(plan_summary(read_json(layout.PLAN)))
        return
    waiting = [ds for ds in DATASETS if not os.path.exists(layout.dataset_files(ds).shard_plan)]
    if waiting:
        rows = [{"dataset": ds, **most_records(ds), "sets": 1 + len(held_out_sets(ds))} for ds in waiting]
        per_job = {stage: config[stage]["shards_per_job"] for stage in ("shar", "codes")}
        gpu = [f"{rule} (device: {config[section]['device']})" for rule, section in GPU_RULES]
        gpu_line = f"GPU rules in the counts below: {', '.join(gpu)}; and the codes jobs above"
        logger.info(shard_jobs_summary(rows, config["shar"]["shard_size"], per_job, CODECS, gpu_line))


def most_records(dataset):
    """{records, source}: the most records the dataset can give, and where that comes from: its
    reader's cheap count (a line count, Parquet footers, tar headers; sharflow.prepare.readers), else
    what prepare counted last; records None where neither can be had without reading the corpus."""
    ds = config["datasets"][dataset]
    # containers on object storage are not fetched to count (nor listed again: corpus_files did)
    objects = container_suffix(ds["format"]) and any(storage.is_url(f) for f in corpus_files(dataset))
    if ds["recipe"] is None and not objects:
        inputs = dataset_inputs(dataset)
        source = Source(inputs["manifest"], ds["audio_root"], inputs["recordings"], fetch=False)
        try:
            reader = open_reader(ds["format"], source)
            found = reader.most_records()
        except (OSError, SharflowError) as e:  # prepare's job names it, with what to do
            return {"records": None, "source": f"its corpus cannot be read ({e})"}
        if found is not None:
            return {"records": found, "source": f"{reader.unit}s ({ds['format']})"}
    stats = layout.dataset_files(dataset).prepare_stats
    if os.path.exists(stats):
        return {"records": read_json(stats)["records_out"], "source": "prepared records"}
    return {"records": None, "source": "not known before prepare has read the corpus"}


# ---- at the end of a run ------------------------------------------------------------------------


def warn_of_dropped_text():
    """One warning line at the end of a run whose train cuts hand the model text its tokenizers skip
    in part (sharflow.dataset.tables.dropped_text_warning); silent otherwise."""
    from sharflow.dataset.tables import dropped_text_warning

    catalogs = {ds: layout.dataset_files(ds).catalog for ds in DATASETS}
    line = dropped_text_warning({ds: path for ds, path in catalogs.items() if os.path.exists(path)})
    if line:
        logger.warning(f"sharflow: {line}")
