"""Snakemake adapter: sharflow.identity.links.index_identities."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.layout import IdentityIndexFiles
from sharflow.core.logs import job_log
from sharflow.identity.links import DatasetIdentity, MatchRules, index_identities
from sharflow.identity.voices import VoiceRules

with job_log(snakemake.log[0]):
    params = snakemake.params
    index_identities(
        {name: DatasetIdentity(**ds) for name, ds in params.datasets.items()},
        rules=MatchRules(params.min_score, params.min_matched, params.train_duplicates),
        out=IdentityIndexFiles.of(snakemake.output),
        voices=VoiceRules.from_config(params.voices),
        decisions=snakemake.output.decisions,
    )
