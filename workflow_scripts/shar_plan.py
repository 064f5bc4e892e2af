"""Snakemake adapter: sharflow.shar.plan.plan_shards (the plan, and each shar job's inputs beside it)."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.layout import dataset_files
from sharflow.core.logs import job_log
from sharflow.shar.plan import plan_shards

with job_log(snakemake.log[0]):
    plan_shards(
        snakemake.input.with_context,
        plan=snakemake.output.plan,
        inputs_dir=dataset_files(snakemake.wildcards.dataset).shar_inputs,
        shard_size=snakemake.params.shard_size,
        seed=snakemake.params.seed,
        shards_per_job=snakemake.params.shards_per_job,
        split=snakemake.params.split,
        grow=snakemake.params.grow,
        leaks=snakemake.params.leaks,
        held_out_rejects=snakemake.input.get("held_out_rejects"),
        indexed=snakemake.params.indexed,
    )
