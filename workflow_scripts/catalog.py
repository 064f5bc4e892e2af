"""Snakemake adapter: sharflow.dataset.catalog.build_catalog."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.layout import dataset_files
from sharflow.core.logs import job_log
from sharflow.dataset.catalog import build_catalog

with job_log(snakemake.log[0]):
    build_catalog(
        snakemake.wildcards.dataset,
        fragments=[shard.catalog for shard in dataset_files(snakemake.wildcards.dataset).planned()],
        plan=snakemake.input.plan,
        codes_stats=snakemake.params.codes_stats,
        out=snakemake.output.catalog,
        tokenizer=snakemake.params.tokenizer,
        held_out=snakemake.params.held_out,
    )
