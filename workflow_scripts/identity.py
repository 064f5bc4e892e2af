"""Snakemake adapter: sharflow.identity.links.link_identities."""

from sharflow.core.logs import job_log
from sharflow.identity.links import DatasetIdentity, MatchRules, link_identities
from sharflow.identity.voices import VoiceRules

with job_log(snakemake.log[0]):
    link_identities(
        {name: DatasetIdentity(**ds) for name, ds in snakemake.params.datasets.items()},
        rules=MatchRules(
            snakemake.params.min_score, snakemake.params.min_matched, snakemake.params.train_duplicates
        ),
        out_links=snakemake.output.links,
        out_stats=snakemake.output.stats,
        voices=VoiceRules.from_config(snakemake.params.voices),
        decisions=snakemake.output.decisions,
    )
