# The workflow's Python is the sharflow.workflow package (unit-tested without Snakemake); this file
# validates the config, makes its Workflow with Snakemake's engine and gives the rules its functions
# by the names they use. Every path comes from sharflow.core.layout.
import re
import sys
from pathlib import Path

from snakemake.logging import logger

from sharflow.core import blocks, layout
from sharflow.core.config import validate_config
from sharflow.core.errors import SharflowError
from sharflow.text.normalizer import normalizer_key
from sharflow.work.ranks import host_shows_gpu
from sharflow.workflow import SnakemakeEngine, mend_group_components, warm_starts

# not as `Workflow`: the Snakefile's globals are snakemake.workflow's own, whose Workflow is Snakemake's
from sharflow.workflow import Workflow as SharflowWorkflow

mend_group_components()  # profiles/slurm's bundles of shard jobs (sharflow.workflow.engine)
ENGINE = SnakemakeEngine(workflow, checkpoints, logger)
warm_starts(ENGINE.target_jobs)  # the jobs' warm starts (sharflow.work.warm)
try:
    validate_config(config, Path(workflow.basedir) / "config" / "schema.yaml")
    W = SharflowWorkflow(
        config,
        ENGINE,
        host_shows_gpu=host_shows_gpu(),
        argv=sys.argv,
        basedir=workflow.basedir,
    )
except SharflowError as e:
    raise WorkflowError(str(e)) from None


# ---- Constants of the run (sharflow.workflow.run) ----------------------------------------------
DATASETS = W.run.datasets
CODECS = W.run.codecs
QUALITY = W.run.quality
ASR = W.run.asr
PUBLISH = W.run.publish
PATH_PREFIX = W.run.path_prefix
TEXT_CACHE = W.run.text_cache
SPLITS = W.run.splits
IDENTITY = W.run.identity
IDENTITY_PARTS = W.run.identity_parts
HELD_OUT_SETS = W.run.held_out_sets
TEST_SETS = W.run.test_sets
PHONEME_DICT_KEY = W.phoneme_dict_key
CALIBRATION_OPTIONS = W.calibration_options
RESOURCES = W.resources
# DS gives a dataset's files as patterns of {dataset}
DS = layout.dataset_files("{dataset}", indexed=config["shar"]["index"])
split_block = W.run.split_block
dataset_of = W.run.dataset_of
split_of = W.run.split_of
held_out_sets = W.run.held_out_sets_of
job_kinds = W.run.job_kinds
get_final_outputs = W.run.final_outputs
get_training_codec = W.run.training_codec


wildcard_constraints:
    dataset="|".join(re.escape(d) for d in DATASETS + HELD_OUT_SETS),
    part=r"\d{4}",
    shard=r"\d{6}",
    language=r"\w+",
    codec="|".join(re.escape(c) for c in CODECS) or "(?!)",
    asr="random|segment",


# ---- Threads and GPUs ---------------------------------------------------------------------------
threads_of = W.run.threads_of
fits_work = W.run.fits_work
gpu_request = W.run.gpu_request
SHAR_THREADS = W.shar_threads
CODES_THREADS = W.codes_threads
CODES_GPUS = W.codes_gpus
CONTEXT_GPUS = W.context_gpus
CONTEXT_DEVICE = W.context_device
QUALITY_GPUS = W.quality_gpus
QUALITY_PART_RULE = W.quality_part_rule
SEGMENT_GPUS = W.segment_gpus


# ---- segment, prepare and text (sharflow.workflow.inputs) -------------------------------------
get_segment_inputs = W.inputs.segment_inputs
get_segment_listing = W.inputs.segment_listing
get_segment_asr_file = W.inputs.segment_asr_file
get_segment_settings = W.inputs.segment_settings
get_segment_work = W.inputs.segment_work
get_segment_parts = W.inputs.segment_parts
get_plan_inputs = W.inputs.plan_inputs
get_calibration_source = W.inputs.calibration_source
get_manifest = W.inputs.manifest
get_manifest_version = W.inputs.manifest_version
get_audio_root = W.inputs.audio_root
get_prepare_settings = W.inputs.prepare_settings
get_recipe_settings = W.inputs.recipe_settings
get_text_settings = W.inputs.text_settings
get_text_normalizers = W.inputs.text_normalizers
get_part_files = W.inputs.part_files


# ---- quality, splits, identity, context (sharflow.workflow.measures) ---------------------------
get_random_asr_config = W.measures.random_asr_config
get_asr_model_file = W.measures.asr_model_file
get_asr_options = W.measures.asr_options
get_last_quality_run = W.measures.last_quality_run
get_speaker_embedding = W.measures.speaker_embedding
get_voice_embedding = W.measures.voice_embedding
get_identity_options = W.measures.identity_options
get_splits_inputs = W.measures.splits_inputs
get_split_dataset = W.measures.split_dataset
get_own_speaker_ids = W.measures.own_speaker_ids
get_empty_split_action = W.measures.empty_split_action
get_identity_part_files = W.measures.identity_part_files
get_identity_checks = W.measures.identity_checks
get_identity_datasets = W.measures.identity_datasets
get_context_records = W.measures.context_records
get_context_records_stats = W.measures.context_records_stats
get_grouping = W.measures.grouping
get_context_part_settings = W.measures.context_part_settings
get_measured_embeddings = W.measures.measured_embeddings
get_embedding_outputs = W.measures.embedding_outputs


def quality_part_outputs():
    """A quality part's files; with identity, the identity part's too, as update() outputs (its last
    run's entries are kept while the job runs, and reused by key)."""
    files, identity = W.measures.quality_part_outputs()
    return files | {name: update(path) for name, path in identity.items()}


# ---- shar and codes jobs (sharflow.workflow.shards; which job makes which shards: work.jobs) ----
get_shar_plan_inputs = W.shards.shar_plan_inputs
get_shar_block_inputs = W.shards.shar_block_inputs
get_encode_settings = W.shards.encode_settings
get_codes_block_inputs = W.shards.codes_block_inputs
get_random_codec_config = W.shards.random_codec_config
get_codec_model_file = W.shards.codec_model_file
get_codec_spec = W.shards.codec_spec
get_job_records = W.shards.job_records_of
get_repairs = W.shards.repairs
get_dataset_file = W.shards.dataset_file


# ---- catalog, training hand-off, card, report, publish (sharflow.workflow.handoff) -------------
get_held_out_plans = W.handoff.held_out_plans
get_held_out_job_records = W.handoff.held_out_job_records
get_codes_stats = W.handoff.codes_stats
get_validation_codes_stats = W.handoff.validation_codes_stats
get_training_codes_stats = W.handoff.training_codes_stats
get_training_datasets = W.handoff.training_datasets
get_validation_sets = W.handoff.validation_sets
get_card_inputs = W.handoff.card_inputs
get_report_datasets = W.handoff.report_datasets
get_report_inputs = W.handoff.report_inputs
get_publish_inputs = W.handoff.publish_inputs


# ---- at the end of a run ------------------------------------------------------------------------
warn_of_dropped_text = W.look.warn_of_dropped_text
