"""profiles/slurm on a real single-node Slurm (tests/slurm/cluster.sh), compared with a local run.

A test-only workflow profile (written here) sits on top of profiles/slurm: an account name, the
plugin's squeue status command (no slurmdbd here), small cores and memory for a 2-core machine, and
GPU requests turned into partition routing (there are no GPUs). Everything else, partitions and
groups included, is the real profile's.
"""

import json
import os
import re
import subprocess
import threading
from collections import Counter
from pathlib import Path

import pytest
import yaml

from sharflow.core import layout
from sharflow.io import storage
from sharflow.plan.resources import DEFAULTS
from testkit import (
    GPU_RULES,
    LONG_RUN,
    REPO,
    SMALL_SHARDS,
    assert_informative_codes,
    assert_same_outputs,
    codes_in_tars,
    demo_config,
    run_snakemake,
    upload_demo,
)

CLUSTER = REPO / "tests" / "slurm" / "cluster.sh"
STARTED = threading.Event()  # set once this session has run `cluster.sh up` on a machine without a cluster


def cluster_running() -> bool:
    return subprocess.run(["bash", str(CLUSTER), "running"], capture_output=True, timeout=60).returncode == 0


def stop_the_cluster_this_session_started() -> None:
    """`cluster.sh down` if this session brought the cluster up: its daemons stop, and the Slurm config
    it wrote goes (a config that was there before comes back). A cluster that was up before stays up.
    Called when the session ends, passed or failed or interrupted (conftest.early_runs)."""
    if STARTED.is_set():
        subprocess.run(["bash", str(CLUSTER), "down"], capture_output=True, timeout=300)
        STARTED.clear()


PUBLISHED = "s3://slurm-training/run1"  # where the Slurm run publishes (test_storage reads it back)


def run_on_slurm(tmp: Path, s3):
    """The demo through profiles/slurm on tests/slurm/cluster.sh: (work, output, state dir, real profile).

    The corpus is read from object storage (the `s3` server, the demo uploaded to it) and the run
    publishes its Shar there (PUBLISHED); the credentials reach the jobs as the Slurm profile's docs
    say, in the environment sbatch exports. Started before the first test (conftest.early_runs);
    skips where Slurm cannot run.
    """
    if os.geteuid() != 0:
        pytest.skip("Slurm's daemons need root (tests/slurm/cluster.sh up)")
    if not cluster_running():
        STARTED.set()  # before `up`: what a half-finished `up` started is stopped too
    done = subprocess.run(["bash", str(CLUSTER), "up"], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        pytest.skip(f"Slurm could not start: {done.stderr[-1500:]}")
    state = Path(done.stdout.strip().splitlines()[-1])
    real = write_test_profile(tmp / "wp")
    work = tmp / "work"
    config = demo_config(shar=SMALL_SHARDS, publish={"url": PUBLISHED})
    config["datasets"]["demo"].update(upload_demo(s3, "slurm-corpus"))
    write_small_plan(work, config)
    s3.bucket(storage.split_url(PUBLISHED)[0], versioned=True)
    proc = run_snakemake(
        work,
        config,
        "--workflow-profile",
        str(tmp / "wp"),
        profile="slurm",
        timeout=LONG_RUN,
        check=False,
    )
    output = proc.stdout + proc.stderr
    (tmp / "snakemake.out").write_text(output)  # for a reader of a failure
    assert proc.returncode == 0, output[-6000:]
    return work, output, state, real


# What the run's cost plan asks for, for every rule: small enough for this machine's one node, and a
# time limit no default has, so that the jobs' own limits show they came from the plan
PLANNED = {"mem_mb": 1500, "runtime": 37}


def write_small_plan(work: Path, config: dict) -> None:
    """The plan's resources file (sharflow.plan.resources) in the run's folder, every rule at PLANNED,
    and its key for this config, corpus and code (sharflow.plan.key: as `snakemake plan` records it):
    the Slurm run asks for its memory and time from a plan, as a run after `snakemake plan` does."""
    from sharflow.core.config import validate_config
    from sharflow.plan.key import key_now

    path = work / layout.PLAN_RESOURCES
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(dict.fromkeys(DEFAULTS, PLANNED)))
    filled = validate_config(yaml.safe_load(yaml.safe_dump(config)), REPO / "config" / "schema.yaml")
    inputs = {ds: [d["manifest"]] for ds, d in filled["datasets"].items()}
    stats = {ds: str(work / layout.dataset_files(ds).prepare_stats) for ds in filled["datasets"]}
    (work / layout.PLAN).write_text(json.dumps({"key": key_now(filled, inputs, stats)}))


def write_test_profile(profile_dir: Path) -> dict:
    """Test-only workflow profile over profiles/slurm (memory and time: the plan's, write_small_plan)."""
    real = yaml.safe_load((REPO / "profiles" / "slurm" / "config.v8+.yaml").read_text())
    small = {"cpus_per_task": 1}
    override = {
        "slurm-status-command": "squeue",
        "slurm-init-seconds-before-status-checks": 2,
        "slurm-keep-successful-logs": True,
        "latency-wait": 10,
        "retries": 0,
        "cores": 2,  # groups: at most 2 one-core jobs side by side
        "default-resources": {**real["default-resources"], "slurm_account": "sharflow-test", "mem_mb": 1000},
        # the real routing, one core each, and `gpu: 0`: the gpu partition has no GPUs to grant
        "set-resources": {
            rule: {**{k: v for k, v in res.items() if k == "slurm_partition"}, **small, "gpu": 0}
            for rule, res in real["set-resources"].items()
        },
        "set-threads": dict.fromkeys(real["set-threads"], 1),
    }
    profile_dir.mkdir(parents=True, exist_ok=True)
    (profile_dir / "config.v8+.yaml").write_text(yaml.safe_dump(override, sort_keys=False))
    return real


def submissions(output: str) -> list[tuple[str, str]]:
    """(slurm job id, rule_<name> or group_<name>) of every sbatch the plugin made."""
    out = []
    for jobid, log in re.findall(r"submitted with SLURM jobid (\d+) \(log: (\S+)\)", output):
        parts = Path(log).parts
        out.append((jobid, parts[parts.index("slurm_logs") + 1]))
    return out


def completed_jobs(state: Path) -> dict[str, dict[str, str]]:
    """Slurm job id -> the fields of its line in the job completion log."""
    out = {}
    for line in (state / "log" / "jobcomp.txt").read_text().splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        out[fields["JobId"]] = fields
    return out


def partitions(state: Path) -> dict[str, str]:
    """Slurm job id -> partition, from the job completion log."""
    return {jobid: fields["Partition"] for jobid, fields in completed_jobs(state).items()}


def test_slurm_profile_runs_the_demo_like_a_local_run(slurm_run, two_datasets):
    work, output, state, real = slurm_run

    def rules_of(log_dir: str) -> list[str]:  # rule_<rule>, or group_<group>_<rule>_<rule>... (sorted)
        if not log_dir.startswith("group_"):
            return [log_dir.removeprefix("rule_")]
        group = next(g for g in set(real["groups"].values()) if log_dir.startswith(f"group_{g}_"))
        rest, rules = log_dir.removeprefix(f"group_{group}_"), []
        while rest:
            rule = max((r for r in real["groups"] if rest == r or rest.startswith(f"{r}_")), key=len)
            rules.append(rule)
            rest = rest.removeprefix(rule).removeprefix("_")
        return rules

    subs = [(jobid, rules_of(name)) for jobid, name in submissions(output)]
    submitted = Counter(rule for _, rules in subs for rule in rules)
    ran = Counter(re.findall(r"Finished jobid: \d+ \(Rule: (\w+)\)", output))
    # every job but the local target went through sbatch; 12 shards: one group submission per stage
    # (the block of shards 0-9 and the job of the short last block, shards 10 and 11)
    assert set(submitted) == set(ran) - {"all"}, (submitted, ran)
    for stage in ("shar", "codes"):
        jobs = (f"{stage}_block", f"{stage}_tail")
        assert [rules for _, rules in subs if rules[0].startswith(jobs)] == [
            [f"{stage}_block", f"{stage}_tail2"]
        ]
        assert ran[f"{stage}_block"] == ran[f"{stage}_tail2"] == 1

    # each job asked for the plan's time (a group: its jobs' times, one after another on its cores)
    limits = {jobid: fields["TimeLimit"] for jobid, fields in completed_jobs(state).items()}
    for jobid, rules in subs:
        if len(rules) == 1:
            assert limits[jobid] in ("37", "00:37:00"), (rules, limits[jobid])

    where = partitions(state)
    gpu_rules = {rule for rule, res in real["set-resources"].items() if res.get("slurm_partition") == "gpu"}
    assert gpu_rules == GPU_RULES
    for jobid, rules in subs:
        for rule in rules:
            assert where[jobid] == ("gpu" if rule in gpu_rules else "cpu"), (rule, jobid, where[jobid])

    # every job ran cold: each runs in a job step of its own (a group's too: srun), whose Snakemake is
    # started for it alone, so a warm server would serve that one job (it started one a heavy job)
    assert not (work / ".snakemake" / "sharflow-warm").exists()

    # the GPU-stage jobs logged what they were granted
    assert (
        "asked for 0 GPU(s), sees no GPU"
        in (work / "logs" / "codes_block" / "demo" / "tiny_nemo" / "00000.log").read_text()
    )

    # byte for byte what the local run wrote
    local = two_datasets[0] / "results"
    coded = sorted((local / "demo" / "shar").glob("codes_*/target_codes/*.tar"))
    assert_informative_codes(codes_in_tars(coded))
    # the Slurm run read its corpus from object storage: only the prepare stats' manifest differs
    assert_same_outputs(
        local,
        work / "results",
        ["demo"],
        "local run vs Slurm run (one core per job, the corpus read from object storage)",
        json_differ={"prepare/stats.json": {"manifest"}},
    )
    assert json.loads((work / "results" / "demo" / "verify.json").read_text())["ok"]
