"""Snakemake adapter: sharflow.plan.build.make_plan and write_plan."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

import os

from sharflow.core import layout
from sharflow.core.atomic import read_json
from sharflow.core.logs import job_log
from sharflow.plan.build import make_plan, write_plan
from sharflow.plan.key import key_now

with job_log(snakemake.log[0]):
    params = snakemake.params
    plan, resources = make_plan(
        calibration=os.path.dirname(snakemake.input.done),  # the calibration's working folder
        logs=params.logs,
        samples={ds: read_json(p) for ds, p in zip(params.datasets, snakemake.input.summaries, strict=True)},
        config=params.config,
        slots=params.slots,
        calibration_run=read_json(snakemake.input.done),
    )
    # what the figures hold for: a later run uses them only under the same key (sharflow.plan.key)
    stats = {ds: layout.dataset_files(ds).prepare_stats for ds in params.datasets}
    plan["key"] = key_now(params.config, params.inputs, stats)
    page = write_plan(plan, resources, snakemake.output)
    print(page, flush=True)  # the terminal: stdout is not the job's log
