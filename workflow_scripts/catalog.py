"""Snakemake adapter: sharflow.dataset.catalog.build_catalog."""

from sharflow.core.logs import job_log
from sharflow.dataset.catalog import build_catalog

with job_log(snakemake.log[0]):
    build_catalog(
        snakemake.wildcards.dataset,
        fragments=list(snakemake.input.fragments),
        plan=snakemake.input.plan,
        codes_stats=snakemake.params.codes_stats,
        out=snakemake.output.catalog,
        tokenizer=snakemake.params.tokenizer,
    )
