"""The profiles route only rules that exist (a typo silently sends a GPU job to the CPU partition)."""

import subprocess

import yaml

from testkit import GPU_RULES, REPO, demo_config, run_snakemake, snakemake_cmd


def rules_in_workflow(tmp_path):
    """Every rule, those of the smaller blocks (shar_block100, codes_block10, ...) included."""
    config = demo_config(shar={"shards_per_job": 1000}, codes={"shards_per_job": 1000})
    proc = run_snakemake(tmp_path / "w", config, "--list-rules")
    return {line.strip() for line in proc.stdout.splitlines() if line.strip()}


def load_profile(name):
    return yaml.safe_load((REPO / "profiles" / name / "config.v8+.yaml").read_text())


def test_every_rule_named_in_a_profile_exists(tmp_path):
    rules = rules_in_workflow(tmp_path)
    assert "prepare" in rules and "all" in rules
    for name in ("slurm", "local"):
        profile = load_profile(name)
        for section in ("set-resources", "set-threads", "groups"):
            for rule in profile.get(section) or {}:
                assert rule in rules, f"profiles/{name}: {section} names unknown rule {rule!r}"


def test_slurm_profile_shape():
    profile = load_profile("slurm")
    assert profile["executor"] == "slurm"
    assert profile["default-resources"]["slurm_partition"] == "cpu"
    assert "attempt" in str(profile["default-resources"]["mem_mb"])
    assert not any("slurm_extra" in (r or {}) for r in profile["set-resources"].values())
    gpu_rules = GPU_RULES
    assert gpu_rules <= set(profile["set-resources"])
    for rule, res in profile["set-resources"].items():
        if rule in gpu_rules:
            assert res["slurm_partition"] == "gpu" and res["gpu"] >= 1, rule
        else:
            assert "gpu" not in res and res.get("slurm_partition", "cpu") == "cpu", rule


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


def test_slurm_profile_dry_run_parses(tmp_path):
    """The plugin is installed and the profile's keys and expressions are accepted (the shipped
    config, both its datasets)."""
    proc = subprocess.run(
        snakemake_cmd(tmp_path, demo_config(degraded=True), "-n", profile="slurm"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "prepare" in proc.stdout and "dataset=degraded" in proc.stdout
