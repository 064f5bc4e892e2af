"""Snakemake adapter: sharflow.dataset.training.write_input_cfg over the dev splits."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.logs import job_log
from sharflow.dataset.training import write_input_cfg

with job_log(snakemake.log[0]):
    write_input_cfg(
        snakemake.params.datasets,
        snakemake.output.validation_ds,
        codec=snakemake.params.codec,
        num_buckets=0,  # bins are estimated on train only; a validation loader needs none
        settings=snakemake.params.settings,
        path_prefix=snakemake.params.path_prefix,
        use="model.validation_ds",
    )
