"""What the workflow's Python asks of the engine that runs it: the seam between sharflow.workflow and
Snakemake.

`SnakemakeEngine` answers from Snakemake's own objects (the `workflow`, the `checkpoints` and the
logger rules/common.smk hands it); `PlainEngine` answers from plain values, for the tests and for a
script that asks what the workflow would read. Every answer is read when asked, not when the engine
is made: Snakemake knows whether a run is a dry run, local or on a cluster only once it has parsed
the Snakefile.

Snakemake's internal API is used in two functions here, each with a test against a real Snakemake
that fails loudly if an upgrade changes what it relies on (tests/test_workflow_inputs.py):
`force_rerun` (a finished shard job whose files are damaged is forced as `--forcerun <its record>`
would force it) and `mend_group_components` (a dry run of grouped jobs that never ends).
"""

import logging
import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


def force_rerun(workflow, path: str) -> bool:
    """Make Snakemake run again the job that makes `path`, as `--forcerun path` does; False when there
    is no DAG yet to tell (the Snakefile is still being read). Snakemake's DAG reads its forced files
    after every input function has run, so an input function may call this."""
    dag = getattr(workflow, "dag", None)
    if dag is None:
        return False
    dag.forcefiles.add(path)
    return True


def _component_key(group) -> tuple:
    """A group job's place among the components of its group: by its jobs' rules and outputs, the
    same in every process (not by the hash of its jobs, which Python seeds anew in each)."""
    return tuple(sorted((job.rule.name, *sorted(map(str, job.output))) for job in group))


def _update_group_components(dag) -> None:
    """Snakemake's DAG._update_group_components (9.27.1), bundling `group-components` connected
    components of a group into one group job, with two changes: the bundle is the group job factory's
    own for its set of jobs, instead of its first component grown in place, and the components are
    taken in a fixed order. Snakemake's factory keeps each group job by the jobs it was made with;
    grown in place, the first component is handed out again for its own jobs the next time the DAG's
    groups are made (after a checkpoint's update) and is then bundled a second time, so that one job
    ends in two group jobs, and a dry run prints one of them forever (profiles/slurm's two bundles of
    shard jobs: 3 of 41 hash seeds, 116 MB of output in 25 s)."""
    from snakemake.common import group_into_chunks

    by_group = defaultdict(set)
    for group in dag._group.values():
        by_group[group.groupid].add(group)
    for groupid, components in by_group.items():
        name = dag.workflow.parent_groupids.get(groupid, groupid)
        bundle = dag.workflow.group_settings.group_components.get(name, 1)
        if bundle > 1:
            for chunk in group_into_chunks(bundle, sorted(components, key=_component_key)):
                if len(chunk) > 1:
                    jobs = (job for component in chunk for job in component)
                    bundled = dag.group_job_factory.new(groupid, jobs, dag.workflow.global_resources)
                    for job in bundled:
                        dag._group[job] = bundled
    for group in dag._group.values():
        group.finalize()


def mend_group_components() -> None:
    """Give Snakemake's DAG the bundling of `_update_group_components` (once per process: the
    Snakefile calls this before Snakemake builds its DAG)."""
    from snakemake.dag import DAG

    DAG._update_group_components = _update_group_components


class SnakemakeEngine:
    """The engine of a Snakemake run: `workflow`, `checkpoints` and `logger` as the Snakefile has them."""

    def __init__(self, workflow, checkpoints, logger):
        self._workflow = workflow
        self._checkpoints = checkpoints
        self._logger = logger

    @property
    def cores(self) -> int:
        return self._workflow.cores

    @property
    def dryrun(self) -> bool:
        return bool(self._workflow.dryrun)

    @property
    def cluster_or_dryrun(self) -> bool:
        """Whether jobs run elsewhere (a cluster executor) or not at all (a dry run)."""
        return bool(self._workflow.non_local_exec_or_dryrun)

    @property
    def remote_job(self) -> bool:
        """Whether this process is a job's own start on a cluster node."""
        return bool(self._workflow.remote_exec)

    @property
    def target_jobs(self) -> int:
        """How many jobs this process was started for: target_jobs of its command line."""
        return target_jobs(sys.argv)

    def shard_plan(self, dataset: str) -> str:
        """The shar_plan checkpoint's plan file of a Shar set (Snakemake's IncompleteCheckpointException
        until the checkpoint has run)."""
        return self._checkpoints.shar_plan.get(dataset=dataset).output.plan

    def force(self, path: str) -> None:
        force_rerun(self._workflow, path)

    def warn(self, message: str) -> None:
        self._logger.warning(message)

    def info(self, message: str) -> None:
        self._logger.info(message)


@dataclass
class PlainEngine:
    """An engine of plain values: a local run (or a dry run) in the current folder, plans read from
    disk, forced files collected in `forced`, messages in `said` (and the log)."""

    cores: int = 2
    dryrun: bool = False
    cluster_or_dryrun: bool = False
    remote_job: bool = False
    target_jobs: int = 0
    forced: set[str] = field(default_factory=set)
    said: list[str] = field(default_factory=list)

    def shard_plan(self, dataset: str) -> str:
        from sharflow.core import layout

        plan = layout.dataset_files(dataset).shard_plan
        if not os.path.exists(plan):
            raise FileNotFoundError(f"{plan}: the shar_plan checkpoint has not run")
        return plan

    def force(self, path: str) -> None:
        self.forced.add(path)

    def warn(self, message: str) -> None:
        self.said.append(message)
        log.warning(message)

    def info(self, message: str) -> None:
        self.said.append(message)
        log.info(message)


def target_jobs(argv: list[str]) -> int:
    """How many jobs a Snakemake command line starts (`--target-jobs RULE:WILDCARDS ...`: a cluster
    submission's, one a job of its group); 0 for a run that makes what its targets need."""
    count, listing = 0, False
    for arg in argv:
        if arg.startswith("-"):
            listing = arg == "--target-jobs"
            count += arg.startswith("--target-jobs=")
        elif listing:
            count += 1
    return count


def warm_starts(target_jobs: int = 0) -> None:
    """Name the warm-start folder of this Snakemake process (sharflow.work.warm) in the environment its
    jobs inherit: each Snakemake process running jobs (a local run, a Slurm job's) has its own, in its
    working folder's .snakemake, unless $SHARFLOW_WARM_SHARED names a server that the local runs on this
    machine share (a test session's); a Slurm job's Snakemake keeps its own (its jobs stay in Slurm's
    accounting). With $SHARFLOW_WARM_STARTS=0 none is named: every job starts cold. So is the job of a
    process started for one job (`target_jobs`: on Slurm every job's, a group's jobs each in a job step
    of their own): a server would import every stage's frameworks (sharflow.work.warm.PRELOAD) for the
    one job it would serve."""
    from sharflow.work import warm

    shared = os.environ.get(warm.SHARED)
    if os.environ.get(warm.OFF) == "0" or target_jobs == 1:
        os.environ.pop(warm.ENV, None)
    elif shared and not os.environ.get("SLURM_JOB_ID"):
        os.environ[warm.ENV] = shared
    else:
        os.environ[warm.ENV] = warm.folder_for(os.getcwd(), os.getpid())
