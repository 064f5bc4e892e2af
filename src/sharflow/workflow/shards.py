"""What the shard jobs read, and how a lost or damaged one is found: the shar plan's jobs, each shar and
codes job's inputs, the jobs' completion records that later jobs list, the repairs.

Which job makes which shards is sharflow.work.jobs; this module asks it for the rules. A block that is
not one of the plan's jobs gets a file no rule makes as its input, so that Snakemake passes over that
candidate rule: a shard's file named on the command line matches a rule of every kind, and the job the
plan has makes it. A finished job whose files are damaged is forced from its own input function (the
engine's `force`); nothing is removed or written here: input functions run on every look (-n, --dag,
--summary, a Slurm job's own parse), and looking changes nothing.
"""

import functools
import os
from types import SimpleNamespace

from sharflow.core import blocks, layout
from sharflow.core.atomic import read_json
from sharflow.shar.plan import correction_notes
from sharflow.work import jobs

ENCODE_SETTINGS = ("audio_format", "sample_rate", "copy_through")


@functools.cache
def _plan_jobs(plan_path: str, mtime: float, shards_per_job: int) -> SimpleNamespace:
    plan = read_json(plan_path)
    planned = jobs.planned_jobs(plan, shards_per_job)
    of_shard = {
        int(shard): job
        for job in planned
        for shard in blocks.block_members(job[0], blocks.block_size(job[0]), job[1])
    }
    return SimpleNamespace(
        jobs=planned, set=frozenset(planned), of_shard=of_shard, corrected=plan.get("corrected", [])
    )


def block_record(files, stage: str, codec: str | None, block: str, shards: int) -> str:
    """The completion record of the `stage` job (shar, or codes of `codec`) of `shards` shards from
    `block`."""
    if stage == "shar":
        return files.shar_job(block, blocks.block_size(block), shards)
    return files.codes_job(codec, block, blocks.block_size(block), shards)


class Shards:
    """Input and params functions of the shar and codes jobs, their merges and the repairs."""

    def __init__(self, run):
        self.run = run
        self.config = run.config
        self.listing = jobs.Listing()
        self._said: set[str] = set()

    def say_once(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            self.run.engine.warn(f"sharflow: {message}")

    # ---- the plan's jobs ----------------------------------------------------------------------
    def plan_jobs(self, dataset: str, stage: str) -> SimpleNamespace:
        """The jobs of `stage` (shar or codes) from the dataset's shar plan (the checkpoint), read once
        per plan file version: `jobs` [(block key, shards)] in order, as a `set`, and the job
        `of_shard` ({shard number: job})."""
        plan = self.run.engine.shard_plan(dataset)
        return _plan_jobs(plan, os.path.getmtime(plan), self.config[stage]["shards_per_job"])

    def planned_on_disk(self, dataset: str, stage: str) -> SimpleNamespace | None:
        """plan_jobs from the plan file as it is on disk (None before the first plan), without asking the
        checkpoint: Snakemake answers the checkpoint only after choosing a rule for a file named on the
        command line, and never goes back on that choice."""
        plan = layout.dataset_files(dataset).shard_plan
        if not os.path.exists(plan):
            return None
        return _plan_jobs(plan, os.path.getmtime(plan), self.config[stage]["shards_per_job"])

    def job_records(self, name: str, stage: str, codec: str | None = None) -> list[str]:
        """The completion record of every `stage` job (shar, or codes of `codec`) of a Shar set's plan."""
        files = layout.dataset_files(name)
        return [block_record(files, stage, codec, *job) for job in self.plan_jobs(name, stage).jobs]

    def block_inputs(self, shards: int, stage: str, inputs):
        """Input function of the `stage` jobs of `shards` shards: inputs(wildcards, files, block); for a
        block that is not one of the plan's jobs of that many shards, a file no rule makes."""

        def block_inputs(wildcards):
            files = layout.dataset_files(wildcards.dataset)
            job = (wildcards.block, shards)
            on_disk = self.planned_on_disk(wildcards.dataset, stage)
            if on_disk is not None and job not in on_disk.set:  # decided before the checkpoint pass
                return {"beyond_the_plan": files.beyond_the_plan(stage, wildcards.block)}
            if job not in self.plan_jobs(wildcards.dataset, stage).set:
                return {"beyond_the_plan": files.beyond_the_plan(stage, wildcards.block)}
            self.rerun_if_damaged(block_record(files, stage, getattr(wildcards, "codec", None), *job))
            return inputs(wildcards, files, wildcards.block)

        return block_inputs

    def rerun_if_damaged(self, record: str) -> None:
        """Run a finished shar or codes job again when its files are no longer what its record says
        (jobs.damage: one missing, or of another size): its record is forced, and the log names what
        is wrong and the job. The job's run replaces the record with its files (docs: long runs)."""
        wrong = jobs.damage(record, self.listing)
        if wrong:
            self.run.engine.force(record)
        for why in wrong:
            self.say_once(f"{why}: its job ({record}) runs again")

    def repairs(self, name: str):
        """Input function: the record of every shar and codes job of the Shar set `name` that is missing
        (a job not run yet, or its record deleted): asking for those makes Snakemake run the jobs. The
        default target asks for them, a function per set (one whose plan is not made yet waits for it
        alone), not the jobs that list the records: Snakemake does not look again at what those ask for
        after the plan's checkpoint."""

        def repairs(wildcards):
            records = self.job_records(name, "shar")
            records += [r for c in self.run.codecs for r in self.job_records(name, "codes", c)]
            return [record for record in records if not os.path.exists(record)]

        return repairs

    def job_records_of(self, stage: str):
        """Input function: job_records of the Shar set. Jobs after the shar and codes jobs list these
        instead of every shard's files (a 10,000-shard DAG lists ~1,000 files per stage, not 10,000 or
        more), and find the shards' files from the plan (layout.DatasetFiles.planned)."""
        return lambda wildcards: self.job_records(wildcards.dataset, stage, getattr(wildcards, "codec", None))

    # ---- shar ---------------------------------------------------------------------------------
    def encode_settings(self, wildcards) -> dict:
        """Fields of sharflow.shar.audio.EncodeSettings for the Shar set's dataset."""
        audio_root = self.config["datasets"][self.run.dataset_of(wildcards.dataset)]["audio_root"]
        return {"audio_root": audio_root, **{k: self.config["shar"][k] for k in ENCODE_SETTINGS}}

    def shar_block_inputs(self, shards: int):
        """Input function of the shar jobs of `shards` shards: the records and the plan (block_inputs)."""

        def inputs(wildcards, files, block):
            found = files.shar_input(block, blocks.block_size(block), shards)
            self.say_corrections(wildcards.dataset, files, block, shards, found)
            return {"inputs": found}

        return self.block_inputs(shards, "shar", inputs)

    def say_corrections(self, dataset: str, files, block: str, shards: int, inputs: str) -> None:
        """Log once which of a shar job's shards are written again for records corrected since the job
        ran (the plan's `corrected`), and what of them is kept: a look names what the run will remake."""
        record = files.shar_job(block, blocks.block_size(block), shards)
        if not (os.path.exists(record) and os.path.exists(inputs)):
            return
        if os.path.getmtime(record) >= os.path.getmtime(inputs):
            return
        members = {int(m) for m in blocks.block_members(block, blocks.block_size(block), shards)}
        for note in correction_notes(self.plan_jobs(dataset, "shar").corrected, members):
            self.say_once(f"{dataset}: {note}")

    def shar_plan_inputs(self, wildcards) -> dict:
        """The Shar set's records; for a dataset's train set with identity, its splits rejects too (the
        plan keeps in their shards the records now found to be held-out audio: shar.leaks)."""
        out = {"with_context": self.dataset_file("with_context")(wildcards)}
        if self.run.identity and self.run.split_of(wildcards.dataset) == "train":
            out["held_out_rejects"] = layout.dataset_files(wildcards.dataset).split_rejected
        return out

    def dataset_file(self, kind: str):
        """Input function: the dataset's file `kind` (with_context, context_stats, catalog) for a Shar set."""
        return lambda wildcards: getattr(layout.dataset_files(self.run.dataset_of(wildcards.dataset)), kind)

    # ---- codes --------------------------------------------------------------------------------
    def random_codec_config(self, wildcards) -> str:
        path = self.config["codecs"][wildcards.codec]["random_from_config"]
        if path is None:
            raise ValueError(f"codec {wildcards.codec} has a model; nothing to build")
        return path

    def _codec_model_path(self, codec: str) -> tuple[str, bool]:
        """Where the codec's model is, and whether the workflow builds it."""
        spec = self.config["codecs"][codec]
        if spec["random_from_config"]:
            return layout.codec_model(codec), True
        return spec["model"], False

    def codec_model_file(self, wildcards) -> list[str]:
        """The codec's model file as an input (so a new model reruns the codes), if it is a local file."""
        path, built = self._codec_model_path(wildcards.codec)
        return [path] if built or os.path.exists(path) else []

    def codec_spec(self, wildcards) -> dict:
        """Fields of sharflow.codes.spec.CodecSpec."""
        spec = self.config["codecs"][wildcards.codec]
        path, _ = self._codec_model_path(wildcards.codec)
        return {
            "name": wildcards.codec,
            "backend": spec["backend"],
            "model": path,
            "precision": spec["precision"],
        }

    def codes_block_inputs(self, shards: int):
        """Input function of the codes jobs of `shards` shards: the completion record of every shar job
        that made one of its shards, and the codec (block_inputs)."""

        def inputs(wildcards, files, block):
            of_shard = self.plan_jobs(wildcards.dataset, "shar").of_shard
            members = blocks.block_members(block, blocks.block_size(block), shards)
            shar_jobs = sorted({of_shard[int(m)] for m in members})
            return {
                "codec": layout.codec_spec(wildcards.codec),
                "shar_jobs": [files.shar_job(key, blocks.block_size(key), count) for key, count in shar_jobs],
            }

        return self.block_inputs(shards, "codes", inputs)
