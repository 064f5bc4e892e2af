"""Snakemake adapter: sharflow.dataset.evaluation.export_evaluation_set."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.layout import dataset_files
from sharflow.core.logs import job_log
from sharflow.dataset.evaluation import export_evaluation_set

with job_log(snakemake.log[0]):
    export_evaluation_set(
        snakemake.params.name,
        shar_dir=dataset_files(snakemake.wildcards.dataset).shar_dir,
        out_dir=snakemake.output.evaluation,
        path_prefix=snakemake.params.path_prefix,
    )
