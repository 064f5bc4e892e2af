"""Snakemake adapter: sharflow.plan.actual.compare, printed as compare_markdown renders it."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.atomic import atomic_file, read_json, write_json
from sharflow.core.config import load_yaml
from sharflow.core.logs import job_log
from sharflow.plan.actual import compare, compare_markdown

with job_log(snakemake.log[0]):
    plan, resources = read_json(snakemake.input.plan), load_yaml(snakemake.input.resources)
    result = compare(plan, resources, snakemake.params.logs, snakemake.params.slurm_efficiency)
    page = compare_markdown(result)
    with atomic_file(snakemake.output.page) as f:
        f.write(page)
    write_json(snakemake.output.json, result)
    print(page, flush=True)  # the terminal: stdout is not the job's log
