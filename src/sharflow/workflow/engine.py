"""What the workflow's Python asks of the engine that runs it: the seam between sharflow.workflow and
Snakemake.

`SnakemakeEngine` answers from Snakemake's own objects (the `workflow`, the `checkpoints` and the
logger rules/common.smk hands it); `PlainEngine` answers from plain values, for the tests and for a
script that asks what the workflow would read. Every answer is read when asked, not when the engine
is made: Snakemake knows whether a run is a dry run, local or on a cluster only once it has parsed
the Snakefile.

The one use of Snakemake's internal API is `force_rerun`: a finished shard job whose files are
damaged is forced as `--forcerun <its record>` would force it (tests/test_workflow_engine.py fails
loudly if a Snakemake upgrade changes it).
"""

import logging
import os
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
