"""Where every file of the workflow lives: one place, asked by the rules, the scripts and the tests.

results/<dataset>/
    recipe/{recordings.jsonl.gz, supervisions.jsonl.gz, stats.json}   a dataset given by a lhotse recipe
    segment/{plan.json, parts/part-NNNN.stats.json, work/<settings>/, manifest.jsonl, stats.json}
                                             a long_form dataset's recordings cut into segments
    prepare/{prepared.jsonl, rejected/, stats.json}
    text/{records.jsonl, rejected/, stats.json}
    quality/{parts/part-NNNN.*, metrics.jsonl, kept.jsonl, rejected/, stats.json}
    splits/{records.jsonl, rejected/, stats.json}     with splits configured (docs: splits)
    context/{plan.json, parts/part-NNNN.*, with_context.jsonl, rejected/, stats.json}
    shard_plan.json  shar_inputs/shards-NNNNNN-NNNNNN.jsonl   the shar_plan checkpoint: the plan, and
                                             each shar job's records
    shar/
        cuts/cuts.NNNNNN.jsonl (.jsonl.gz with shar.index: false)
        target_audio/recording.NNNNNN.tar      context_audio/recording.NNNNNN.tar
        codes_<codec>/target_codes/codes.NNNNNN.tar    codes_<codec>/context_codes/codes.NNNNNN.tar
        each with its index beside it, <file>.idx (not with shar.index: false)
    shar_jobs/shard-NNNNNN.{stats.json, rejected.jsonl, catalog.parquet}
    shar_jobs/shards-NNNNNN-NNNNNN.json      one per shar job: its completion record
    shar_stats.json  shar_rejected/
    codes_jobs/<codec>/shard-NNNNNN.stats.json   codes_jobs/<codec>/shards-NNNNNN-NNNNNN.json
    codes_stats/<codec>.json
    catalog.parquet  buckets.yaml  verify.json  DATASET.md
    <split>/...       with splits: each held-out split's Shar set, as above from shard_plan.json
                      to verify.json; a test split's evaluation/ too
results/models/<codec>.{nemo, json}   results/input_cfg.yaml   results/report/
results/published.json   with publish.url: what was published where (sharflow.publish)
results/text_normalizers/<language>.json   the normalizer's grammars for a language (in the cache)
results/plan/{plan.json, plan.md, plan.dot, resources.yaml}   `snakemake plan` (sharflow.plan), made
    by a calibration run in results/plan/calibration/; actual.{json,md}: the plan against the run
logs/<rule>/.../<key>.{log, benchmark.tsv, cost.json}   each job's log, Snakemake's benchmark and its
    cost record (sharflow.core.logs.job_cost)

`DatasetFiles("results/{dataset}")` gives the rules their patterns ("{shard}" stays a wildcard);
`DatasetFiles("results/demo")` and an int shard give one job's files. Jobs after the shard jobs
(buckets, verify, report, input_cfg) find the shard files from the plan here instead of listing
them as Snakemake inputs: only the merge jobs depend on the shar_plan checkpoint, and they, and the
codes jobs after the shar jobs, list one completion record per job, not every shard's files, which
keeps a 10,000-shard DAG quick to build (benchmarks/bench_dag.py). Which job makes which shards, and
how a lost or partial job is found: sharflow.work.jobs.
"""

from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from sharflow.core.atomic import read_json
from sharflow.core.blocks import (
    block_outputs,
    job_file_name,
    part_key,
    planned_shards,
    require_made,
    shard_key,
)
from sharflow.core.shar_fields import AUDIO_FIELDS, codes_fields, cuts_field, shard_files
from sharflow.core.shar_index import index_path

RESULTS = "results"
STATS_SUFFIX = ".stats.json"
REJECTED_SUFFIX = ".rejected.jsonl"
CATALOG_SUFFIX = ".catalog.parquet"


def cut_files(shar_dir: str, plan_path: str) -> list[str]:
    """The cuts file of every shard the plan promises."""
    return shard_files(shar_dir, cuts_field(plan_indexed(plan_path)), planned_shards(plan_path))


def plan_indexed(plan_path: str) -> bool:
    """Whether the shard plan's set is indexed (shar.index); a plan made before indexes were is not."""
    return bool(read_json(plan_path).get("indexed", False))


def shar_dir_of_plan(plan_path: str) -> str:
    """The shar folder of the dataset whose shard plan is `plan_path`."""
    return DatasetFiles(str(Path(plan_path).parent)).shar_dir


def rejected_beside(stats_path: str) -> str:
    """A shard job's rejects file, beside its stats (shard-N.stats.json -> shard-N.rejected.jsonl)."""
    if not stats_path.endswith(STATS_SUFFIX):
        raise ValueError(f"not a shard stats file: {stats_path}")
    return stats_path[: -len(STATS_SUFFIX)] + REJECTED_SUFFIX


@dataclass(frozen=True)
class Outputs:
    """Named files of one job; `named()` gives them as a rule's `output:` (or `input:`) mapping."""

    def named(self) -> dict[str, str]:
        """The files by name; an optional file the job does not make (None: an index) is left out."""
        return {name: path for name, path in asdict(self).items() if path is not None}

    @classmethod
    def of(cls, named, prefix: str = ""):
        """The files from a mapping with (at least) these names, each after `prefix`: a Snakemake
        job's `output`; an optional file the mapping lacks is None."""
        keys = set(named.keys())
        return cls(**{f.name: named[prefix + f.name] for f in fields(cls) if prefix + f.name in keys})

    @classmethod
    def of_optional(cls, named, prefix: str = ""):
        """As `of`, or None when the mapping has none of these names (an output a config leaves out)."""
        if not any(prefix + name in named.keys() for name in cls.__dataclass_fields__):  # noqa: SIM118
            return None
        return cls.of(named, prefix)

    @classmethod
    def of_member(cls, named, m: int):
        """Member m's files from a block job's outputs (<name>_<m>, as block_outputs names them)."""
        keys = set(named.keys())
        return cls(**{f.name: named[f"{f.name}_{m}"] for f in fields(cls) if f"{f.name}_{m}" in keys})


@dataclass(frozen=True)
class ContextPartFiles(Outputs):
    records: str
    rejected: str
    stats: str


@dataclass(frozen=True)
class TextPartFiles(Outputs):
    """A text part's files: its kept records (.jsonl), its rejects (a folder) and stats."""

    records: str
    rejected: str
    stats: str


@dataclass(frozen=True)
class QualityPartFiles(Outputs):
    """A quality part's files: its records' metrics (.jsonl), their speaker embeddings for the
    context stage (.embeddings.npy, a row per line) and stats."""

    metrics: str
    embeddings: str
    stats: str


@dataclass(frozen=True)
class IdentityPartFiles(Outputs):
    """An identity part's files: per-record keys (.jsonl), fingerprints (.npy), speaker embeddings
    (.voices.npy) and stats."""

    records: str
    hashes: str
    voices: str
    stats: str


@dataclass(frozen=True)
class IdentityIndexFiles(Outputs):
    """The identity index job's files: the held-out fingerprints sorted by hash (.npz), the held-out
    records (.jsonl), each train record's first copy (.npy) and the rest of what the check parts
    need and the merge counts (index.json)."""

    index: str
    held_out: str
    firsts: str
    summary: str

    @classmethod
    def under(cls, folder) -> "IdentityIndexFiles":
        """The index job's files in `folder`."""
        return cls(*(f"{folder}/{name}" for name in ("held.npz", "held.jsonl", "firsts.npy", "index.json")))


@dataclass(frozen=True)
class IdentityCheckFiles(Outputs):
    """An identity check part's links (its train records', in order) and stats."""

    links: str
    stats: str


@dataclass(frozen=True)
class ShardFiles(Outputs):
    """A shar_shard job's files: its cuts, target_audio and context_audio files, stats, rejects and
    catalog fragment; in an indexed set (shar.index), the three Shar files' indexes."""

    cuts: str
    target: str
    context: str
    stats: str
    rejected: str
    catalog: str
    cuts_index: str | None = None
    target_index: str | None = None
    context_index: str | None = None


@dataclass(frozen=True)
class CodesFiles(Outputs):
    """A codes_shard job's files: target and context codes of one shard and one codec, and stats; in
    an indexed set, the two codes files' indexes."""

    target: str
    context: str
    stats: str
    target_index: str | None = None
    context_index: str | None = None


@dataclass(frozen=True)
class DatasetFiles:
    """Every file of one dataset under `root`: results/<dataset>, or the pattern results/{dataset};
    `indexed`: its Shar set has indexes (shar.index; as_planned: what its shard plan says)."""

    root: str
    indexed: bool = True

    def as_planned(self) -> "DatasetFiles":
        """These files as the dataset's shard plan lays them out (indexed or not)."""
        return replace(self, indexed=plan_indexed(self.shard_plan))

    def _path(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    @property
    def recipe_recordings(self) -> str:
        return self._path("recipe", "recordings.jsonl.gz")

    @property
    def recipe_supervisions(self) -> str:
        return self._path("recipe", "supervisions.jsonl.gz")

    @property
    def recipe_stats(self) -> str:
        return self._path("recipe", "stats.json")

    @property
    def segment_plan(self) -> str:
        """A long_form dataset's recordings, their lengths and versions, and the parts."""
        return self._path("segment", "plan.json")

    def segment_part(self, part: int | str) -> str:
        """A segment part's stats (its recordings' results are in segment_work, by the settings)."""
        return self._path("segment", "parts", f"part-{part_key(part)}{STATS_SUFFIX}")

    @property
    def segment_work(self) -> str:
        """Where each recording's result is kept, a folder per digest of the settings (sharflow.segment)."""
        return self._path("segment", "work")

    @property
    def segment_manifest(self) -> str:
        """The segments as a NeMo manifest (spans of the long files): what prepare reads."""
        return self._path("segment", "manifest.jsonl")

    @property
    def segment_stats(self) -> str:
        return self._path("segment", "stats.json")

    @property
    def prepared(self) -> str:
        return self._path("prepare", "prepared.jsonl")

    @property
    def prepare_rejected(self) -> str:
        return self._path("prepare", "rejected")

    @property
    def prepare_stats(self) -> str:
        return self._path("prepare", "stats.json")

    @property
    def text_records(self) -> str:
        return self._path("text", "records.jsonl")

    @property
    def text_rejected(self) -> str:
        return self._path("text", "rejected")

    @property
    def text_stats(self) -> str:
        return self._path("text", "stats.json")

    def text_part(self, part: int | str) -> TextPartFiles:
        prefix = self._path("text", "parts", f"part-{part_key(part)}")
        return TextPartFiles(f"{prefix}.jsonl", f"{prefix}.rejected", prefix + STATS_SUFFIX)

    def quality_part(self, part: int | str) -> QualityPartFiles:
        prefix = self._path("quality", "parts", f"part-{part_key(part)}")
        return QualityPartFiles(f"{prefix}.jsonl", f"{prefix}.embeddings.npy", prefix + STATS_SUFFIX)

    @property
    def quality_metrics(self) -> str:
        return self._path("quality", "metrics.jsonl")

    @property
    def quality_embeddings(self) -> str:
        """Every record's speaker embedding (a row per line of quality_metrics), which the context
        stage reads instead of decoding and embedding again."""
        return self._path("quality", "embeddings.npy")

    @property
    def quality_metrics_stats(self) -> str:
        return self._path("quality", "metrics_stats.json")

    @property
    def quality_kept(self) -> str:
        return self._path("quality", "kept.jsonl")

    @property
    def quality_rejected(self) -> str:
        return self._path("quality", "rejected")

    @property
    def quality_stats(self) -> str:
        return self._path("quality", "stats.json")

    def identity_part(self, part: int | str) -> IdentityPartFiles:
        prefix = self._path("identity", "parts", f"part-{part_key(part)}")
        return IdentityPartFiles(
            f"{prefix}.jsonl", f"{prefix}.npy", f"{prefix}.voices.npy", prefix + STATS_SUFFIX
        )

    @property
    def split_records(self) -> str:
        return self._path("splits", "records.jsonl")

    @property
    def split_rejected(self) -> str:
        return self._path("splits", "rejected")

    @property
    def split_stats(self) -> str:
        return self._path("splits", "stats.json")

    @property
    def context_plan(self) -> str:
        return self._path("context", "plan.json")

    def context_part(self, part: int | str) -> ContextPartFiles:
        prefix = self._path("context", "parts", f"part-{part_key(part)}")
        return ContextPartFiles(f"{prefix}.jsonl", prefix + REJECTED_SUFFIX, prefix + STATS_SUFFIX)

    def context_embeddings(self, part: int | str) -> dict[str, str]:
        prefix = self._path("context", "parts", f"part-{part_key(part)}")
        return {"embeddings": f"{prefix}.embeddings.npy", "embedding_ids": f"{prefix}.embedding_ids.jsonl"}

    @property
    def with_context(self) -> str:
        return self._path("context", "with_context.jsonl")

    @property
    def context_rejected(self) -> str:
        return self._path("context", "rejected")

    @property
    def context_stats(self) -> str:
        return self._path("context", "stats.json")

    @property
    def shard_plan(self) -> str:
        return self._path("shard_plan.json")

    @property
    def shar_inputs(self) -> str:
        """Each shar job's records (sharflow.shar.plan: job_inputs_path), written by the plan."""
        return self._path("shar_inputs")

    def shar_input(self, block: str, shards_per_job: int, count: int | None = None) -> str:
        return self._path(
            "shar_inputs", job_file_name(block, shards_per_job, count)[: -len(".json")] + ".jsonl"
        )

    @property
    def shar_dir(self) -> str:
        return self._path("shar")

    def shard(self, shard: int | str) -> ShardFiles:
        cuts = cuts_field(self.indexed)
        shar = [self._path("shar", f.folder, f.name(shard)) for f in (cuts, *AUDIO_FIELDS)]
        job = self._path("shar_jobs", f"shard-{shard_key(shard)}")
        indexes = [index_path(p) for p in shar] if self.indexed else []
        return ShardFiles(*shar, job + STATS_SUFFIX, job + REJECTED_SUFFIX, job + CATALOG_SUFFIX, *indexes)

    def shar_job(self, block: str, shards_per_job: int, count: int | None = None) -> str:
        """A shar job's completion record (blocks.job_file_name)."""
        return self._path("shar_jobs", job_file_name(block, shards_per_job, count))

    def shard_block(self, block: str, shards_per_job: int, count: int | None = None) -> dict[str, str]:
        """A shar job's outputs: cuts_<m>, target_<m>, ... catalog_<m> of each member m of the block,
        and its completion record `job`."""
        job = self.shar_job(block, shards_per_job, count)
        return block_outputs(self.shard, job, block, shards_per_job, count)

    @property
    def shar_stats(self) -> str:
        return self._path("shar_stats.json")

    @property
    def shar_rejected(self) -> str:
        return self._path("shar_rejected")

    def codes(self, codec: str, shard: int | str) -> CodesFiles:
        target, context = (self._path("shar", f.folder, f.name(shard)) for f in codes_fields(codec))
        indexes = [index_path(target), index_path(context)] if self.indexed else []
        return CodesFiles(
            target,
            context,
            self._path("codes_jobs", codec, f"shard-{shard_key(shard)}{STATS_SUFFIX}"),
            *indexes,
        )

    def codes_job(self, codec: str, block: str, shards_per_job: int, count: int | None = None) -> str:
        """A codes job's completion record (blocks.job_file_name)."""
        return self._path("codes_jobs", codec, job_file_name(block, shards_per_job, count))

    def codes_block(
        self, codec: str, block: str, shards_per_job: int, count: int | None = None
    ) -> dict[str, str]:
        """A codes job's outputs: target_<m>, context_<m>, stats_<m> of each member m of the block,
        and its completion record `job`."""
        job = self.codes_job(codec, block, shards_per_job, count)
        return block_outputs(lambda shard: self.codes(codec, shard), job, block, shards_per_job, count)

    def beyond_the_plan(self, stage: str, block: str) -> str:
        """A file no rule makes: the input of a block job (stage shar or codes) whose block is
        not one of the plan's jobs (jobs.plan_jobs), so that Snakemake gives a shard file named on
        the command line to the rule of the job that the plan has (sharflow.workflow.shards: block_inputs)."""
        return self._path("blocks_past_the_plan", stage, f"{block}.none")

    def planned(self, codec: str | None = None) -> list:
        """Every planned shard's files (the plan must exist): ShardFiles, or with `codec` its
        CodesFiles. A merge job lists its stage's job records, not these files (sharflow.workflow.shards:
        job_records_of), so it checks them here: a file deleted after its job ran is named, with
        the way to make it again."""
        laid = self.as_planned()
        shards = [laid.codes(codec, s) if codec else laid.shard(s) for s in planned_shards(self.shard_plan)]
        require_made(path for files in shards for path in files.named().values())
        return shards

    def codes_stats(self, codec: str) -> str:
        return self._path("codes_stats", f"{codec}.json")

    @property
    def buckets(self) -> str:
        return self._path("buckets.yaml")

    @property
    def catalog(self) -> str:
        return self._path("catalog.parquet")

    @property
    def dataset_card(self) -> str:
        return self._path("DATASET.md")

    @property
    def verify(self) -> str:
        return self._path("verify.json")

    @property
    def evaluation(self) -> str:
        """A test split's evaluation set (sharflow.dataset.evaluation): manifest.json, audio/, context/."""
        return self._path("evaluation")


def split_set(dataset: str, split: str) -> str:
    """A held-out split of a dataset as a Shar set of its own: "<dataset>/<split>", whose files are
    under results/<dataset>/<split>/ (shard plan, shar/, shar_jobs/, codes, verify.json)."""
    return f"{dataset}/{split}"


def set_of(name: str) -> tuple[str, str | None]:
    """(dataset, held-out split or None) of a Shar set's name (split_set)."""
    dataset, _, split = name.partition("/")
    return dataset, split or None


def evaluation_name(name: str) -> str:
    """A test split's name in MagpieTTS's dataset_meta_info: "<dataset>_<split>"."""
    dataset, split = set_of(name)
    return f"{dataset}_{split}"


def dataset_files(dataset: str, indexed: bool = True) -> DatasetFiles:
    return DatasetFiles(f"{RESULTS}/{dataset}", indexed)


def codec_model(codec: str) -> str:
    """Where the workflow builds a codec (random_from_config)."""
    return f"{RESULTS}/models/{codec}.nemo"


RANDOM_ASR = f"{RESULTS}/models/asr/{{asr}}.nemo"  # a random ASR model the workflow builds:
ASR_MODEL = RANDOM_ASR.format(asr="random")  # quality.asr.random_from_config's
SEGMENT_ASR_MODEL = RANDOM_ASR.format(asr="segment")  # segment.asr.random_from_config's


def codec_spec(codec: str) -> str:
    return f"{RESULTS}/models/{codec}.json"


def text_normalizer(language: str) -> str:
    """What the text_normalizer job of a language writes: where its grammars are in the cache."""
    return f"{RESULTS}/text_normalizers/{language}.json"


IDENTITY_LINKS = f"{RESULTS}/identity/links.jsonl"  # train records linked to held-out ones, all datasets
IDENTITY_INDEX = IdentityIndexFiles.under(f"{RESULTS}/identity/index")


def identity_check(part: int | str) -> IdentityCheckFiles:
    prefix = f"{RESULTS}/identity/checks/part-{part_key(part)}"
    return IdentityCheckFiles(f"{prefix}.jsonl", prefix + STATS_SUFFIX)


IDENTITY_STATS = f"{RESULTS}/identity/stats.json"
# Speaker pairs decided (linked to a held-out unseen speaker or not): read and rewritten by every run
SPEAKER_DECISIONS = f"{RESULTS}/identity/speaker_decisions.jsonl"
INPUT_CFG = f"{RESULTS}/input_cfg.yaml"
VALIDATION_DS = f"{RESULTS}/validation_ds.yaml"
PUBLISHED = f"{RESULTS}/published.json"  # the publish job's record (sharflow.publish.job)
REPORT_DIR = f"{RESULTS}/report"
# The cost plan (sharflow.plan): a calibration run on a sample in a working folder of its own, and
# what it predicts for the whole corpus; the rules' mem_mb and runtime read PLAN_RESOURCES
PLAN_DIR = f"{RESULTS}/plan"
PLAN_RESOURCES = f"{PLAN_DIR}/resources.yaml"
PLAN = f"{PLAN_DIR}/plan.json"
PLAN_PAGE = f"{PLAN_DIR}/plan.md"
PLAN_DOT = f"{PLAN_DIR}/plan.dot"  # the plan's stages as a picture (python -m sharflow.report.dag)
PLAN_ACTUAL = f"{PLAN_DIR}/actual.json"  # after the real run: the plan beside what its jobs measured
PLAN_ACTUAL_PAGE = f"{PLAN_DIR}/actual.md"
# Where the Slurm profile has its executor write sacct's efficiency reports (--slurm-efficiency-report)
SLURM_EFFICIENCY = "logs/slurm_efficiency"
CALIBRATION = f"{PLAN_DIR}/calibration"  # the calibration run's working folder (its own results/, logs/)
CALIBRATION_CONFIG = f"{CALIBRATION}/config.yaml"
# the calibration run's record (its command and time), in its working folder
CALIBRATION_DONE = f"{CALIBRATION}/done.json"


def calibration_sample(dataset: str) -> str:
    """The records drawn from a dataset's prepared records for the calibration run (a NeMo manifest)."""
    return f"{CALIBRATION}/samples/{dataset}.jsonl"


def calibration_small(dataset: str) -> str:
    """A quarter of the sample, drawn from it the same way: the calibration's second run, whose
    costs beside the sample's tell each job's fixed cost from its cost per record or second."""
    return f"{CALIBRATION}/samples/{dataset}.small.jsonl"


def calibration_summary(dataset: str) -> str:
    """What the draw took from a dataset (sharflow.plan.sample.Sample): records and seconds, per stratum."""
    return f"{CALIBRATION}/samples/{dataset}.json"


LOGS = "logs"


def log(rule: str, *keys: str) -> str:
    """A job's log: logs/<rule>/<key>/.../<last key>.log, or logs/<rule>.log for a rule that runs once.

    Example::

        log("codes_shard", "{dataset}", "{shard}")  # logs/codes_shard/{dataset}/{shard}.log
    """
    return "/".join((LOGS, rule, *keys)) + ".log" if keys else f"{LOGS}/{rule}.log"


def benchmark(rule: str, *keys: str) -> str:
    """A job's Snakemake benchmark file, beside its log (log() with .benchmark.tsv)."""
    return log(rule, *keys)[: -len(".log")] + ".benchmark.tsv"
