"""Snakemake adapter: sharflow.plan.calibrate.run_calibration."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

import os

from sharflow.core.logs import job_log
from sharflow.plan.calibrate import run_calibration

with job_log(snakemake.log[0]):
    params = snakemake.params
    run_calibration(
        config=params.config,
        samples=dict(zip(params.datasets, snakemake.input.samples, strict=True)),
        smalls=dict(zip(params.datasets, snakemake.input.smalls, strict=True)),
        folder=os.path.dirname(snakemake.output.done),  # the calibration's working folder
        snakefile=params.snakefile,
        options=params.options,
        cwd=os.getcwd(),
        done=snakemake.output.done,
    )
