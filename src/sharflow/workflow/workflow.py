"""The workflow's Python in one object: its run's constants and every rule's input, params and
resource functions, over a config and an engine (rules/common.smk makes one with Snakemake's).

Example::

    w = Workflow(config, PlainEngine())
    w.inputs.manifest(SimpleNamespace(dataset="demo"))     # what prepare reads
    w.shards.repairs("demo")(None)                          # the shard jobs a run would make again
"""

from sharflow.models.phoneme_dict import dictionary_key
from sharflow.plan.calibrate import passed_options
from sharflow.workflow.handoff import Handoff
from sharflow.workflow.inputs import Inputs
from sharflow.workflow.look import Look
from sharflow.workflow.measures import Measures
from sharflow.workflow.run import Run
from sharflow.workflow.shards import Shards


class Workflow:
    """A run's constants (`run`), its functions by stage (`inputs`, `measures`, `shards`, `handoff`,
    `look`), every rule's resources (`resources`) and what the jobs share."""

    def __init__(
        self, config: dict, engine, *, host_shows_gpu: bool = False, argv: list[str] = (), basedir: str = "."
    ):
        self.run = run = Run(config, engine, host_shows_gpu)
        self.inputs = Inputs(run, on_first_look=lambda: self.look.summarize_dry_run(self.resources))
        self.measures = Measures(run)
        self.shards = Shards(run)
        self.handoff = Handoff(run, self.shards)
        self.look = Look(run, self.inputs)
        # Every rule's mem_mb and runtime; a plan made for something else is said once, here, where
        # every look (a dry run too) shows it.
        self.resources = self.look.resources()
        if self.resources.message():
            engine.warn(f"sharflow: {self.resources.message()}")
        # The key of the English IPA dictionary the default english_phoneme tokenizer reads (without
        # training.tokenizer): a param of the text jobs, so that another dictionary measures again.
        self.phoneme_dict_key = None if config["training"]["tokenizer"] else dictionary_key()[0]
        # What the calibration run (rules/plan.smk) takes over from this snakemake's command line:
        # profiles, executor, jobs and cores (read here, in the process that plans the jobs).
        self.calibration_options = passed_options(list(argv), *run.calibration_dirs(basedir))
        # Per-shard rules take static values where they can: a callable costs Snakemake ~0.5 ms per
        # job, which adds up with tens of thousands of shard jobs (benchmarks/bench_dag.py). The `gpu`
        # resource is the one callable: whether a job holds the local GPU cap depends on the executor.
        self.shar_threads = run.workers("shar")
        self.codes_threads = run.workers("codes")
        self.codes_gpus = run.gpu_request("codes", config["codes"]["gpus_per_job"])
        self.quality_gpus = run.gpu_request("quality")
        self.segment_gpus = run.gpu_request("segment")
        self.quality_part_rule = run.gpu_rules()[0][0]
        # With quality on, the quality parts embed every record (one decode): the context parts only
        # read the embeddings and select, on CPU, asking for no GPU.
        self.context_gpus = run.gpu_request("context") if not run.quality else (lambda wildcards: 0)
        self.context_device = config["context"]["device"] if not run.quality else "cpu"
