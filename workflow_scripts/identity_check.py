"""Snakemake adapter: sharflow.identity.links.check_identities."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.layout import IdentityCheckFiles, IdentityIndexFiles
from sharflow.core.logs import job_log
from sharflow.identity.links import DatasetIdentity, MatchRules, check_identities

with job_log(snakemake.log[0]):
    params = snakemake.params
    check_identities(
        {name: DatasetIdentity(**ds) for name, ds in params.datasets.items()},
        index=IdentityIndexFiles.of(snakemake.input),
        part=int(snakemake.wildcards.part),
        parts=params.parts,
        rules=MatchRules(params.min_score, params.min_matched, params.train_duplicates),
        out=IdentityCheckFiles.of(snakemake.output),
    )
