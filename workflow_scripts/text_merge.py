"""Snakemake adapter: sharflow.text.job.merge_text."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.layout import TextPartFiles
from sharflow.core.logs import job_log
from sharflow.text.fields import TextSettings
from sharflow.text.job import merge_text

with job_log(snakemake.log[0]):
    merge_text(
        [
            TextPartFiles(*files)
            for files in zip(
                snakemake.input.records, snakemake.input.rejected, snakemake.input.stats, strict=True
            )
        ],
        records_stats=snakemake.input.records_stats,
        out_records=snakemake.output.records,
        rejected_dir=snakemake.output.rejected,
        stats=snakemake.output.stats,
        dataset=snakemake.wildcards.dataset,
        settings=TextSettings(**snakemake.params.settings),
        tokenizer=snakemake.params.tokenizer,
    )
