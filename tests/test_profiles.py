"""The profiles route only rules that exist (a typo silently sends a GPU job to the CPU partition)."""

import shutil

import yaml

from sharflow.plan.resources import DEFAULTS
from testkit import GPU_RULES, REPO, demo_config, run_command, run_snakemake, snakemake_cmd


def rules_in_workflow(tmp_path):
    """Every rule, those of the smaller blocks (shar_block100, codes_block10, ...), the quality job
    without a GPU (quality_part_cpu) and the identity parts of a run without quality included."""
    rules = set()
    for device, quality in (("auto", True), ("cpu", True), ("auto", False)):
        config = demo_config(
            shar={"shards_per_job": 1000},
            codes={"shards_per_job": 1000},
            quality={"device": device, "enabled": quality},
        )
        proc = run_snakemake(tmp_path / f"{device}-{quality}", config, "--list-rules")
        rules |= {line.strip() for line in proc.stdout.splitlines() if line.strip()}
    return rules


def load_profile(name):
    return yaml.safe_load((REPO / "profiles" / name / "config.v8+.yaml").read_text())


def test_every_rule_named_in_a_profile_exists(tmp_path):
    rules = rules_in_workflow(tmp_path)
    assert "prepare" in rules and "all" in rules
    # and every rule that runs a job has its memory and time without a plan (the plan's are tested
    # in test_plan); rules of the main process (localrules) need none
    local = {"all", "plan", "calibration", "cost_plan"}
    assert set(DEFAULTS) <= rules and not (set(DEFAULTS) & local)
    assert rules - local - set(DEFAULTS) == set()
    for name in ("slurm", "local"):
        profile = load_profile(name)
        for section in ("set-resources", "set-threads", "groups"):
            for rule in profile.get(section) or {}:
                assert rule in rules, f"profiles/{name}: {section} names unknown rule {rule!r}"


def test_slurm_profile_shape():
    profile = load_profile("slurm")
    assert profile["executor"] == "slurm"
    assert profile["default-resources"]["slurm_partition"] == "cpu"
    # memory and time are the rules' own (the cost plan's, else sharflow.plan.resources.DEFAULTS)
    for res in (profile["default-resources"], *profile["set-resources"].values()):
        assert not {"mem_mb", "runtime"} & set(res or {}), res
    assert not any("slurm_extra" in (r or {}) for r in profile["set-resources"].values())
    gpu_rules = GPU_RULES
    assert gpu_rules <= set(profile["set-resources"])
    for rule, res in profile["set-resources"].items():
        # no GPU count here: a rule asks for its own, none where its stage's device is cpu (the dry run below)
        assert "gpu" not in res, rule
        assert res.get("slurm_partition", "cpu") == ("gpu" if rule in gpu_rules else "cpu"), rule


def test_slurm_profile_bundles_shard_jobs_in_series():
    profile = load_profile("slurm")
    blocks = {
        f"{stage}_{kind}": f"{stage}_blocks"
        for stage in ("shar", "codes")
        for kind in ("block", "block100", "block10", *(f"tail{n}" for n in range(2, 10)))
    }
    assert profile["groups"] == {**blocks, "shar_shard": "shar_shards", "codes_shard": "codes_shards"}
    assert all(profile["group-components"][g] >= 2 for g in profile["groups"].values())
    # at most shards / 16 submissions per stage: 16 shard jobs, or blocks of 16 shards and more
    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())["properties"]
    for stage in ("shar", "codes"):
        per_job = schema[stage]["properties"]["shards_per_job"]["default"]
        assert profile["group-components"][f"{stage}_blocks"] * per_job >= 16
        assert profile["group-components"][f"{stage}_shards"] >= 16
    # a group asks for its parallel jobs' sum capped by `cores`: one shard job's threads fill it
    for rule in profile["groups"]:
        assert (
            profile["set-threads"][rule]
            == profile["set-resources"][rule]["cpus_per_task"]
            == profile["cores"]
        )


def test_local_profile_caps_gpus():
    profile = load_profile("local")
    assert profile["resources"]["gpu"] >= 1
    assert profile["keep-going"] and profile["rerun-incomplete"] and profile["cores"] == "all"


def slurm_dry_run(workdir, config) -> dict[str, list[dict[str, str]]]:
    """{rule: [the resources of each of its jobs]} that `snakemake -n --profile profiles/slurm` plans.
    Its output goes to files beside the folder, not into this process: a dry run that prints without
    end fills a disk's worth at most, not the suite's memory (it once filled 24 GB and was killed)."""
    out, err = (workdir.parent / f"{workdir.name}.dry-run.{kind}" for kind in ("out", "err"))
    cmd = snakemake_cmd(workdir, config, "-n", profile="slurm")
    # a dry run that ran over its time printing one group job again and again (py-spy:
    # JobScheduler.run -> Executor.printjob -> GroupJob.log_info) was seen three times in the suite
    # before sharflow.workflow.engine.mend_group_components; run_command fails with its last lines
    proc = run_command(cmd, timeout=900, outputs=(out, err))
    jobs: dict[str, list[dict[str, str]]] = {}
    rule = None
    for line in proc.stdout.splitlines():
        if line.lstrip().startswith(("rule ", "localrule ")):  # a grouped job's lines are indented
            rule = line.split()[1].rstrip(":")
        elif line.strip().startswith("resources:") and rule:
            pairs = (kv.split("=", 1) for kv in line.split(":", 1)[1].split(", "))
            jobs.setdefault(rule, []).append({k.strip(): v for k, v in pairs})
    return jobs


def test_slurm_profile_dry_run_parses_and_routes_quality_by_where_its_models_run(tmp_path):
    """The plugin is installed and the profile's keys and expressions are accepted (the shipped
    config, both its datasets); a job asks for a GPU exactly when its stage's device is not cpu: on
    auto every GPU rule's jobs ask for one (codes: codes.gpus_per_job), on cpu none does; quality's
    jobs are then quality_part_cpu jobs on the CPU partition."""
    gpu = slurm_dry_run(tmp_path / "gpu", demo_config(degraded=True))
    assert {"prepare", "quality_part"} <= set(gpu) and "quality_part_cpu" not in gpu
    assert len(gpu["quality_part"]) == 4  # 2 parts x 2 datasets
    for job in gpu["quality_part"]:
        assert (job["slurm_partition"], job["gpu"], job["cpus_per_task"]) == ("gpu", "1", "8")
        # without a plan, the defaults (with a plan: test_plan.py)
        assert (job["mem_mb"], job["runtime"]) == ("16000", "480")
    # the context parts read the embeddings the quality parts measured: no GPU
    assert gpu["context_part"] and all(job.get("gpu", "0") == "0" for job in gpu["context_part"])
    # the codes jobs come after the shar plan (a checkpoint): a dry run of a finished plan lists them
    cpu = slurm_dry_run(tmp_path / "cpu", demo_config(quality={"device": "cpu"}))
    assert "quality_part" not in cpu and len(cpu["quality_part_cpu"]) == 2
    for job in cpu["quality_part_cpu"]:
        assert job["slurm_partition"] == "cpu" and job.get("gpu", "0") == "0" and job["cpus_per_task"] == "8"
    assert all(job.get("gpu", "0") == "0" for job in cpu["context_part"])
    # with quality off, the context parts embed themselves, on a GPU where context.device allows
    alone = slurm_dry_run(tmp_path / "alone", demo_config(quality={"enabled": False}))
    assert alone["context_part"] and all(job["gpu"] == "1" for job in alone["context_part"])
    devices = {section: {"device": "cpu"} for section in ("quality", "context", "codes")}
    none = slurm_dry_run(tmp_path / "none", demo_config(**devices))
    assert none["context_part"] and "quality_part" not in none
    asking = {rule: [j["gpu"] for j in jobs if j.get("gpu", "0") != "0"] for rule, jobs in none.items()}
    assert not any(asking.values()), asking  # every device on cpu: no job holds a GPU


CODES_RULES = {rule for rule in GPU_RULES if rule.startswith("codes_")}  # the codes jobs, not the merge


def test_the_codes_jobs_of_a_finished_plan_ask_for_gpus_exactly_where_their_device_is_not_cpu(
    two_datasets, tmp_path
):
    """The codes jobs come after the shar plan (a checkpoint), so a dry run lists them only over a
    finished plan: the session's run, copied, with a second codec (its codes jobs are planned). On
    auto they ask for codes.gpus_per_job GPUs each; with codes.device: cpu (every codes job planned
    again: its device changed) none asks for one."""
    work = tmp_path / "work"
    shutil.copytree(two_datasets[0], work, symlinks=True)  # keeps mtimes: only the codes jobs are due
    config = yaml.safe_load((work / "config.yaml").read_text())
    config["codecs"]["second"] = dict(config["codecs"]["tiny_nemo"])
    auto = slurm_dry_run(work, config)
    codes = [job for rule, jobs in auto.items() if rule in CODES_RULES for job in jobs]
    assert codes and {job["gpu"] for job in codes} == {
        str(config["codes"].get("gpus_per_job", 1))
    }  # the default: 1
    assert {job["slurm_partition"] for job in codes} == {"gpu"}
    config["codes"]["device"] = "cpu"
    cpu = slurm_dry_run(work, config)
    codes = [job for rule, jobs in cpu.items() if rule in CODES_RULES for job in jobs]
    assert len(codes) > len([j for r, js in auto.items() if r in CODES_RULES for j in js])
    assert all(job.get("gpu", "0") == "0" for job in codes)
