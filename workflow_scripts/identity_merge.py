"""Snakemake adapter: sharflow.identity.links.merge_identities."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.layout import IdentityCheckFiles
from sharflow.core.logs import job_log
from sharflow.identity.links import MatchRules, merge_identities

with job_log(snakemake.log[0]):
    params = snakemake.params
    merge_identities(
        snakemake.input.summary,
        [
            IdentityCheckFiles(*files)
            for files in zip(snakemake.input.links, snakemake.input.stats, strict=True)
        ],
        rules=MatchRules(params.min_score, params.min_matched, params.train_duplicates),
        out_links=snakemake.output.links,
        out_stats=snakemake.output.stats,
    )
