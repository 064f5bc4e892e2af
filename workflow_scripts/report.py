"""Snakemake adapter: sharflow.report.write_report."""

from pathlib import Path

from sharflow.logs import job_log
from sharflow.report import write_report

with job_log(snakemake.log[0]):
    write_report(
        snakemake.params.datasets,
        str(Path(snakemake.output.summary).parent),
        min_similarity=snakemake.params.min_similarity,
    )
