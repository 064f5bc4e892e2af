"""Snakemake adapter: sharflow.dataset.tables.write_dataset_card."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.logs import job_log
from sharflow.dataset.tables import write_dataset_card

with job_log(snakemake.log[0]):
    write_dataset_card(
        snakemake.wildcards.dataset,
        catalog=snakemake.input.catalog,
        buckets=snakemake.input.buckets,
        verify=snakemake.input.verify,
        out=snakemake.output.card,
        splits=snakemake.input.get("splits"),
        identity=snakemake.input.get("identity"),
        plan=snakemake.input.get("plan"),
        text=snakemake.input.text,
        segment=snakemake.input.get("segment"),
    )
