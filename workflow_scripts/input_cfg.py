"""Snakemake adapter: sharflow.dataset.training.write_input_cfg."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.logs import job_log
from sharflow.dataset.training import write_input_cfg

with job_log(snakemake.log[0]):
    write_input_cfg(
        snakemake.params.datasets,
        snakemake.output.input_cfg,
        codec=snakemake.params.codec,
        num_buckets=snakemake.params.num_buckets,
        settings=snakemake.params.settings,
        path_prefix=snakemake.params.path_prefix,
        group_by=snakemake.params.group_by,
        temperature=snakemake.params.temperature,
    )
