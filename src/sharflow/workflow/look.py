"""What a look at the run shows beyond Snakemake's own counts, and what every job is given: the cost
plan's resources, a dry run's summary of the jobs the shard plan hides, the end of a run's warning.

Nothing here writes a file: a dry run, a DAG picture and a Slurm job's own start only read.
"""

import os

from sharflow.core import layout
from sharflow.core.atomic import read_json
from sharflow.core.errors import SharflowError
from sharflow.io import storage
from sharflow.plan.key import key_now
from sharflow.plan.resources import PlannedResources
from sharflow.prepare.readers import Source, container_suffix, open_reader


class Look:
    """The resources of every rule, the dry run's summary and the end of a run's warning."""

    def __init__(self, run, inputs):
        self.run = run
        self.config = run.config
        self.inputs = inputs  # sharflow.workflow.inputs.Inputs: each dataset's corpus files
        self._summarized = False

    def resources(self) -> PlannedResources:
        """Every rule's mem_mb and runtime: the cost plan's where one was made (snakemake plan) for this
        config, corpus and code (sharflow.plan.key), else defaults. A job's own start on a cluster node
        asks nothing of it (its resources are held already): no stamp of the corpus there."""
        run = self.run

        def now():
            corpus = {ds: self.inputs.plan_inputs(ds) for ds in run.datasets}
            prepared = {ds: layout.dataset_files(ds).prepare_stats for ds in run.datasets}
            return key_now(self.config, corpus, prepared)

        return PlannedResources(
            layout.PLAN_RESOURCES, layout.PLAN, key_now=None if run.engine.remote_job else now
        )

    def summarize_dry_run(self, resources: PlannedResources) -> None:
        """In a dry run, log once what Snakemake's job counts cannot show: the cost plan's stages (every
        job, the shard jobs after the checkpoint included) where a plan made for this run is there, else
        the most shar and codes jobs of every dataset not planned into shards yet, from what costs
        almost nothing to read (most_records). Called from prepare's input function, which every DAG
        evaluates first: the Snakefile is read before Snakemake knows it is a dry run, the DAG is built
        after (and an input function on `all` would make Snakemake build the DAG below it again after
        the checkpoint)."""
        from sharflow.plan.page import plan_summary, shard_jobs_summary

        if not self.run.engine.dryrun or self._summarized:
            return
        self._summarized = True
        if os.path.exists(layout.PLAN) and resources.planned:
            self.run.engine.info(plan_summary(read_json(layout.PLAN)))
            return
        waiting = [ds for ds in self.run.datasets if not os.path.exists(layout.dataset_files(ds).shard_plan)]
        if waiting:
            sets = {ds: 1 + len(self.run.held_out_sets_of(ds)) for ds in waiting}
            rows = [{"dataset": ds, **self.most_records(ds), "sets": sets[ds]} for ds in waiting]
            per_job = {stage: self.config[stage]["shards_per_job"] for stage in ("shar", "codes")}
            gpu = [
                f"{rule} (device: {self.config[section]['device']})" for rule, section in self.run.gpu_rules()
            ]
            gpu_line = f"GPU rules in the counts below: {', '.join(gpu)}; and the codes jobs above"
            summary = shard_jobs_summary(
                rows, self.config["shar"]["shard_size"], per_job, self.run.codecs, gpu_line
            )
            self.run.engine.info(summary)

    def most_records(self, dataset: str) -> dict:
        """{records, source}: the most records the dataset can give, and where that comes from: its
        reader's cheap count (a line count, Parquet footers, tar headers; sharflow.prepare.readers), else
        what prepare counted last; records None where neither can be had without reading the corpus."""
        ds = self.config["datasets"][dataset]
        if self.run.long_form(dataset) and not os.path.exists(
            self.inputs.dataset_inputs(dataset)["manifest"]
        ):
            return {"records": None, "source": "its segments, which the segment stage has not cut yet"}
        # containers on object storage are not fetched to count (nor listed again: corpus_files did)
        form = self.inputs.form(dataset)
        objects = container_suffix(form) and any(storage.is_url(f) for f in self.inputs.corpus_files(dataset))
        if ds["recipe"] is None and not objects:
            inputs = self.inputs.dataset_inputs(dataset)
            source = Source(inputs["manifest"], ds["audio_root"], inputs["recordings"], fetch=False)
            try:
                reader = open_reader(form, source)
                found = reader.most_records()
            except (OSError, SharflowError) as e:  # prepare's job names it, with what to do
                return {"records": None, "source": f"its corpus cannot be read ({e})"}
            if found is not None:
                return {"records": found, "source": f"{reader.unit}s ({form})"}
        stats = layout.dataset_files(dataset).prepare_stats
        if os.path.exists(stats):
            return {"records": read_json(stats)["records_out"], "source": "prepared records"}
        return {"records": None, "source": "not known before prepare has read the corpus"}

    def warn_of_dropped_text(self) -> None:
        """One warning line at the end of a run whose train cuts hand the model text its tokenizers skip
        in part (sharflow.dataset.tables.dropped_text_warning); silent otherwise."""
        from sharflow.dataset.tables import dropped_text_warning

        catalogs = {ds: layout.dataset_files(ds).catalog for ds in self.run.datasets}
        line = dropped_text_warning({ds: path for ds, path in catalogs.items() if os.path.exists(path)})
        if line:
            self.run.engine.warn(f"sharflow: {line}")
