"""Snakemake adapter: sharflow.context.plan.plan_context."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.context.plan import plan_context
from sharflow.core.logs import job_log

with job_log(snakemake.log[0]):
    plan_context(
        snakemake.input.records,
        plan=snakemake.output.plan,
        parts=snakemake.params.parts,
        grouping=snakemake.params.grouping,
        cost_per_audio_second=snakemake.params.cost_per_audio_second,
    )
