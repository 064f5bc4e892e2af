"""Snakemake adapter: sharflow.text.normalizer.record_normalizer (build the grammars into the cache)."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.logs import job_log
from sharflow.text.normalizer import record_normalizer

with job_log(snakemake.log[0]):
    record_normalizer(
        snakemake.wildcards.language, snakemake.output.normalizer, cache_dir=snakemake.params.cache_dir
    )
