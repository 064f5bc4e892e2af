"""The constants of a run, read once from its validated config (the schema has filled every default):
which datasets, codecs and stages it has, which Shar sets, and what every stage's jobs share.

Example::

    run = Run(config, PlainEngine())
    run.held_out_sets          # ["demo/dev_seen", ...] with splits on for demo
    run.final_outputs()        # every file the default target builds
"""

import os

from sharflow.core import layout
from sharflow.core.cache import cache_root
from sharflow.core.splits import HELD_OUT, SplitRules
from sharflow.work import jobs
from sharflow.work.parallel import resolve_workers


class Run:
    """A run's config and engine (sharflow.workflow.engine), and what follows from the config alone."""

    def __init__(self, config: dict, engine, host_shows_gpu: bool = False):
        self.config = config
        self.engine = engine
        self.host_shows_gpu = host_shows_gpu
        self.datasets = sorted(config["datasets"])
        self.codecs = sorted(config["codecs"])
        self.quality = config["quality"]["enabled"]
        self.asr = config["quality"]["asr"]
        self.publish = config["publish"]["url"]
        # where the hand-off files (input_cfg, validation_ds, evaluation sets) say the shards are
        self.path_prefix = config["training"]["path_prefix"] or self.publish
        # the cache of the normalizer's grammars, resolved once here so that every job uses the same one
        self.text_cache = str(cache_root(config["text"]["cache_dir"]))
        # With splits configured for any dataset, every dataset goes through the splits job: a span held
        # out in one dataset is rejected from another's train (sharflow.splits.stage).
        self.splits = any(SplitRules.from_config(self.split_block(ds)).enabled for ds in self.datasets)
        # With splits, the identity stage links train records to held-out ones by content across every
        # dataset (sharflow.identity; docs: splits), unless identity.enabled is false.
        self.identity = self.splits and config["identity"]["enabled"]
        # With quality on, its parts write the identity parts from the decode they measure (one decode
        # per record); without, the identity_part jobs decode in identity.parts parts of their own.
        self.identity_parts = config["quality"]["parts"] if self.quality else config["identity"]["parts"]
        # Each held-out split of a dataset whose own splits are on is a Shar set of its own,
        # "<dataset>/<split>" (results/<dataset>/<split>/): the shar, codes and verify rules make it as
        # they make the dataset's own (train) Shar, from the dataset's context records (docs: splits).
        self.held_out_sets = [
            layout.split_set(ds, split)
            for ds in self.datasets
            if SplitRules.from_config(self.split_block(ds)).enabled
            for split in HELD_OUT
        ]
        self.test_sets = [name for name in self.held_out_sets if layout.set_of(name)[1].startswith("test_")]

    def long_form(self, dataset: str) -> bool:
        """Whether a dataset is long recordings that the segment stage cuts (format long_form)."""
        return self.config["datasets"][dataset]["format"] == "long_form"

    def split_block(self, dataset: str) -> dict:
        """The `splits` block of a dataset: its own, else the workflow's."""
        return self.config["datasets"][dataset]["splits"] or self.config["splits"]

    @staticmethod
    def dataset_of(name: str) -> str:
        """The dataset of a Shar set (itself, or the dataset of a held-out split)."""
        return layout.set_of(name)[0]

    def split_of(self, name: str) -> str | None:
        """The split a Shar set holds: its held-out split, train for a dataset with splits, else None."""
        return layout.set_of(name)[1] or ("train" if self.splits else None)

    def held_out_sets_of(self, dataset: str) -> list[str]:
        return [name for name in self.held_out_sets if self.dataset_of(name) == dataset]

    def job_kinds(self, stage: str) -> list:
        """The kinds of `stage` (shar, codes) job (sharflow.work.jobs.job_kinds), one rule each."""
        return jobs.job_kinds(stage, self.config[stage]["shards_per_job"])

    def measured_records(self, dataset: str) -> tuple[str, str]:
        """(records, stats) of the stage before splits and context: quality's, or text's without it."""
        files = layout.dataset_files(dataset)
        return (
            (files.quality_kept, files.quality_stats)
            if self.quality
            else (files.text_records, files.text_stats)
        )

    def training_codec(self) -> str | None:
        """The codec input_cfg points at: training.codec, else the first codec as listed, else none."""
        return self.config["training"]["codec"] or next(iter(self.config["codecs"]), None)

    def final_outputs(self) -> list[str]:
        """Every file the default target builds, for every dataset (and codec)."""
        files = [layout.dataset_files(ds) for ds in self.datasets]
        held_out = [layout.dataset_files(name) for name in self.held_out_sets]
        return (
            [path for f in files for path in (f.prepare_stats, f.text_stats, f.context_stats, f.shar_stats)]
            + [f.split_stats for f in files if self.splits]
            + ([layout.IDENTITY_STATS] if self.identity else [])
            + [f.quality_stats for f in files if self.quality]
            + [f.codes_stats(codec) for f in files for codec in self.codecs]
            + [path for f in files for path in (f.catalog, f.buckets, f.verify, f.dataset_card)]
            + [layout.INPUT_CFG, f"{layout.REPORT_DIR}/summary.html"]
            + ([layout.VALIDATION_DS] if self.held_out_sets else [])
            + [layout.dataset_files(name).evaluation for name in self.test_sets]
            + ([layout.PUBLISHED] if self.publish else [])
            + [
                path
                for f in held_out
                for path in (f.shar_stats, f.verify, *(f.codes_stats(codec) for codec in self.codecs))
            ]
        )

    # ---- threads and GPUs ----------------------------------------------------------------------
    def threads_of(self, section: str):
        """A rule's threads: config[section].workers (0: every core this process may use), capped at
        --cores (read when the job is planned)."""
        workers = resolve_workers(self.config[section]["workers"])
        return lambda wildcards: min(workers, self.engine.cores)

    def fits_work(self, section: str) -> bool:
        """Whether a model job of `section` fits its CPU ranks to its audio (config[section].workers 0,
        all cores: sharflow.work.ranks.cpu_ranks_for) rather than start one per thread."""
        return self.config[section]["workers"] == 0

    def gpu_request(self, section: str, gpus: int = 1):
        """A GPU rule's `gpu` resource: `gpus`, or 0 for device: cpu or a local run on a machine without
        a GPU.

        Locally, `gpu` only caps how many GPU jobs run at once (profiles/local); with no GPU the jobs
        run CPU ranks on their threads, and the cap would leave the other cores idle. A cluster
        executor keeps the request whatever the submitting host has: the job's node has the GPUs. So
        does a dry run, which shows what a cluster would be asked for (the profiles set no `gpu` of
        their own: a job asks for a GPU exactly when its stage's device is not cpu)."""
        asked = 0 if self.config[section]["device"] == "cpu" else gpus

        def resource(wildcards):
            return asked if self.engine.cluster_or_dryrun or self.host_shows_gpu else 0

        return resource

    def gpu_rules(self) -> tuple[tuple[str, str], ...]:
        """(rule, config section) of the rules whose jobs run on a GPU where their section's device
        allows (the codes jobs aside): what a dry run marks."""
        quality = (
            "quality_part_cpu" if self.config["quality"]["device"] == "cpu" else "quality_part",
            "quality",
        )
        # with quality on, the quality parts embed every record: the context parts only select, on CPU
        return (quality,) + ((("context_part", "context"),) if not self.quality else ())

    def workers(self, section: str) -> int:
        """config[section].workers resolved (0: every core this process may use)."""
        return resolve_workers(self.config[section]["workers"])

    @staticmethod
    def calibration_dirs(basedir: str) -> list[str]:
        """Where a relative profile named on the command line is found: where snakemake was started
        ($PWD: it has moved to --directory by now), else beside the Snakefile, else here."""
        return [d for d in (os.environ.get("PWD"), basedir, os.getcwd()) if d]
