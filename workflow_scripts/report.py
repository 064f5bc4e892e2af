"""Snakemake adapter: sharflow.report.report.write_report."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from pathlib import Path

from sharflow.core.logs import job_log
from sharflow.report.report import write_report

with job_log(snakemake.log[0]):
    write_report(
        snakemake.params.datasets,
        str(Path(snakemake.output.summary).parent),
        min_similarity=snakemake.params.min_similarity,
    )
