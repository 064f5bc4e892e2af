"""Helpers shared by the tests: test audio, JSON lines, and real snakemake runs."""

import contextlib
import faulthandler
import glob
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import snakemake_server
import soundfile as sf
import yaml
from lhotse import CutSet

from sharflow.codes.shard import ShardCodes, encode_shards
from sharflow.codes.spec import CodecSpec
from sharflow.context.merge import merge_context
from sharflow.context.part import PartSettings, run_context_part
from sharflow.context.plan import plan_context
from sharflow.core.layout import DatasetFiles
from sharflow.dataset.catalog import merge_catalog
from sharflow.identity.links import DatasetIdentity, MatchRules, link_identities
from sharflow.identity.part import run_identity_part
from sharflow.prepare.job import prepare_dataset
from sharflow.quality.filter import filter_quality
from sharflow.shar.audio import EncodeSettings
from sharflow.shar.plan import plan_shards, read_job_inputs
from sharflow.shar.shard import write_planned
from sharflow.splits.stage import DatasetSplits, assign_splits

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "demo"
# The workflow runs' shards (two_datasets, Slurm): the demo's 56 cuts in 12 shards, so that its shar
# and codes jobs are a block of 10 shards (<stage>.shards_per_job) and a short last block of 2 (one
# <stage>_tail2 job).
SMALL_SHARDS = {"shard_size": 5}
# The most seconds a whole workflow run that tests share (conftest.early_runs) may take before it is
# killed: three times the longest one in a suite on the developers' 2-core machine (the plan's, ~1,170
# s), so that one on a machine twice as busy still ends; a hung one still ends inside CI's 90 minutes.
LONG_RUN = 3600
# The rules profiles/slurm sends to partition gpu: every model stage (codes at each block size).
GPU_RULES = {
    "quality_part",
    "context_part",
    *(f"codes_{kind}" for kind in ("block", "block100", "block10", "shard")),
    *(f"codes_tail{n}" for n in range(2, 10)),
}
README = REPO / "README.md"


def magpie_dataset(*, load_16khz_audio: bool):
    """NeMo's MagpieTTSLhotseDataset for the demo codec's codes: 22.05 kHz, 1024 samples a frame, 8 books."""
    from nemo.collections.tts.data.text_to_speech_dataset_lhotse import MagpieTTSLhotseDataset
    from omegaconf import OmegaConf

    chars = "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers.EnglishCharsTokenizer"
    return MagpieTTSLhotseDataset(
        sample_rate=22050,
        codec_model_samples_per_frame=1024,
        num_audio_codebooks=8,
        tokenizer_config=OmegaConf.create({"english_phoneme": {"_target_": chars}}),
        load_16khz_audio=load_16khz_audio,
    )


def write_tone(path: Path, seconds: float, rate: int = 16000, fmt: str | None = None) -> Path:
    """A short deterministic test signal at `path` (format from the suffix unless given)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(round(seconds * rate))) / rate
    sf.write(path, 0.3 * np.sin(2 * np.pi * 220 * t), rate, format=fmt, subtype="PCM_16")
    return path


def write_noise(path: Path, seconds: float, seed: int, rate: int = 16000) -> Path:
    """Seeded white noise at `path`: signals that differ in content from one seed to another."""
    path.parent.mkdir(parents=True, exist_ok=True)
    noise = np.random.default_rng(seed).normal(0, 0.1, int(round(seconds * rate)))
    sf.write(path, np.clip(noise, -1, 1), rate, subtype="PCM_16")
    return path


def write_jsonl(path: Path, lines: list) -> Path:
    """Lines may be dicts (dumped as JSON) or raw strings (written as they are)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def demo_config(degraded: bool = False, splits: bool = False, talks: bool = False, **overrides) -> dict:
    """The shipped config with absolute demo paths, for runs in a temp working directory.

    Without the `degraded` dataset unless asked for: workflow tests run the demo corpus (its files
    and the shipped filters are checked in test_quality, without a workflow run). Without the demo's
    splits unless asked for: the other workflow tests are about the whole demo in one Shar
    (test_splits runs them). Without the `talks` long recordings unless asked for (test_segment runs
    a long_form dataset of its own).
    """
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    if not degraded:
        config["datasets"].pop("degraded", None)
    if not talks:
        config["datasets"].pop("talks", None)
    if not splits:
        for ds in config["datasets"].values():
            ds.pop("splits", None)
    for ds in config["datasets"].values():
        if ds.get("manifest"):
            ds["manifest"] = str(REPO / ds["manifest"])
        ds["audio_root"] = str(REPO / ds["audio_root"])
    for codec in config.get("codecs", {}).values():
        if codec.get("random_from_config"):
            codec["random_from_config"] = str(REPO / codec["random_from_config"])
    for section in ("quality", "segment"):
        asr = config.get(section, {}).get("asr", {})
        if asr.get("random_from_config"):
            asr["random_from_config"] = str(REPO / asr["random_from_config"])
    for section, values in overrides.items():
        config.setdefault(section, {}).update(values)
    return config


def snakemake_cmd(workdir: Path, config: dict, *args: str, profile: str = "local") -> list[str]:
    """The real snakemake CLI on the repo's Snakefile in `workdir`, config written there (only when it
    is not there already: a look at a finished run must find its folder as it was)."""
    workdir.mkdir(parents=True, exist_ok=True)
    configfile = workdir / "config.yaml"
    text = yaml.safe_dump(config, sort_keys=False)
    if not configfile.exists() or configfile.read_text() != text:
        configfile.write_text(text)
    return [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(configfile),
        "--profile",
        str(REPO / "profiles" / profile),
        *args,
    ]


_GROUPS: set[int] = set()  # process groups of the runs still going (stop_process_groups)
_THREAD = threading.local()  # .env, .tmpdir: a Background's session environment and temporary folder


def run_environment() -> dict:
    """The environment a command started from this thread gets: in a Background's thread, a copy of the
    environment the session had when it started that Background (a test running meanwhile may change
    os.environ for a while: monkeypatch's setenv); else os.environ as it is now."""
    return dict(getattr(_THREAD, "env", None) or os.environ)


@contextlib.contextmanager
def process_group(cmd: list[str], stdout: Path, stderr: Path | None = None, env: dict | None = None):
    """`cmd` in a session of its own, its output in files (emptied first; `stderr` None: with
    stdout); a Snakemake command (snakemake_cmd) is a fork of the suite's Snakemake server
    (snakemake_server), any other a subprocess. Killed, with every process it started, if the block
    fails, or when the test session ends while it still runs (conftest.early_runs:
    stop_process_groups). The block ends once every process of the group is gone (wait_group_gone),
    not only its leader: what a run that was killed left is read after its last write. Its temporary
    files go to a folder beside `stdout` (TMPDIR): a killed Snakemake leaves its own there, not in /tmp."""
    for path in {stdout, stderr or stdout}:
        open(path, "wb").close()  # the files hold this command's output alone
    scratch = stdout.with_name(f".{stdout.name}.tmp")
    scratch.mkdir(exist_ok=True)
    env = {**(run_environment() if env is None else env), "TMPDIR": str(scratch)}
    if snakemake_server.is_snakemake(cmd):
        proc = snakemake_server.start(cmd, stdout, stderr or stdout, env)
    else:
        with open(stdout, "ab") as out, open(stderr or stdout, "ab") as err:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, start_new_session=True)
    _GROUPS.add(proc.pid)
    try:
        yield proc
    except BaseException:
        _kill_group(proc.pid)
        raise
    finally:
        proc.wait()
        wait_group_gone(proc.pid)  # a killed job's last rename may land after its leader is reaped
        _GROUPS.discard(proc.pid)


def wait_group_gone(pgid: int, seconds: float = 120.0) -> None:
    """Return once no live process of process group `pgid` is left (zombies aside): a SIGKILLed job's
    process can still finish the system call it was in (the rename of a record into place) after
    the group's leader is reaped, so what a killed run left is read only after this."""
    deadline = time.monotonic() + seconds
    while True:
        alive = False
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = stat.read_text().rsplit(")", 1)[1].split()  # state, ppid, pgrp, ...
                alive = alive or (int(fields[2]) == pgid and fields[0] != "Z")
        if not alive:
            return
        assert time.monotonic() < deadline, f"process group {pgid} still alive {seconds:.0f} s after its kill"
        time.sleep(0.01)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def stop_process_groups() -> None:
    """Kill every workflow run (and its jobs) still going: a session that ends early leaves none behind;
    then stop the Snakemake server."""
    for pgid in list(_GROUPS):
        _kill_group(pgid)
    snakemake_server.stop()


def run_snakemake(
    workdir: Path,
    config: dict,
    *args: str,
    check: bool = True,
    profile: str = "local",
    timeout: int = 900,
    env: dict | None = None,
) -> subprocess.CompletedProcess:
    """Run snakemake (snakemake_cmd) to the end (run_command)."""
    cmd = snakemake_cmd(workdir, config, *args, profile=profile)
    return run_command(cmd, check=check, timeout=timeout, env=env)


def run_command(
    cmd: list[str],
    *,
    check: bool = True,
    timeout: float = 900,
    env: dict | None = None,
    outputs: tuple[Path, Path] | None = None,
) -> subprocess.CompletedProcess:
    """Run `cmd` in a process group (process_group) to its end, its stdout and stderr in `outputs` (or
    in a folder of its own, removed after) and read back once it ended. A run still going after
    `timeout` s is killed with its whole group and fails with the tail of what it printed (read from
    the end of the file: a run that prints without end cannot fill the suite's memory)."""
    with contextlib.ExitStack() as stack:
        if outputs is None:
            scratch = tempfile.TemporaryDirectory(
                prefix="sharflow-run-", dir=getattr(_THREAD, "tmpdir", None)
            )
            folder = Path(stack.enter_context(scratch))
            outputs = (folder / "stdout", folder / "stderr")
        out, err = outputs
        with process_group(cmd, out, err, env) as proc:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                timed_out = True
            else:
                timed_out = False
        what = f"snakemake {' '.join(cmd[3:])}" if snakemake_server.is_snakemake(cmd) else " ".join(cmd)
        if timed_out:
            size = out.stat().st_size
            with open(out, "rb") as f:
                f.seek(max(0, size - 3000))
                tail = f.read().decode(errors="replace")
            pytest.fail(
                f"{what} ran over {timeout} s, printing {size:,} B, the last:\n{tail}\n"
                f"{err.read_text(errors='replace')[-3000:]}"
            )
        proc = subprocess.CompletedProcess(
            cmd, proc.returncode, out.read_text(errors="replace"), err.read_text(errors="replace")
        )
    if check and proc.returncode != 0:
        pytest.fail(f"{what} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
    return proc


# ---- running stages directly (package functions, no snakemake) ---------------------------------


def prepare_demo(tmp, manifest=DEMO / "manifest.json", root=DEMO / "audio", **settings):
    """The prepare stage (one worker) of `manifest` as dataset "demo" into tmp/prepare; that folder."""
    out = tmp / "prepare"
    prepare_dataset(
        str(manifest),
        prepared=str(out / "prepared.jsonl"),
        rejected_dir=str(out / "rejected"),
        stats=str(out / "stats.json"),
        dataset="demo",
        audio_root=str(root),
        workers=1,
        **settings,
    )
    return out


def measure_demo_part(tmp, records, name, previous=None):
    """One quality part over all of `records` (demo audio, one DNSMOS window, CPU) into
    tmp/<name>.jsonl, keeping the measures of `previous` where their keys hold: (stats, metrics bytes)."""
    from sharflow.quality.part import run_quality_part
    from sharflow.quality.rank import MeasureSettings

    stats = run_quality_part(
        0,
        records=str(records),
        parts=1,
        out_metrics=str(tmp / f"{name}.jsonl"),
        out_stats=str(tmp / f"{name}.stats.json"),
        settings=MeasureSettings(str(DEMO / "audio"), dnsmos_max_windows=1),
        device="cpu",
        previous=previous,
    )
    return stats, (tmp / f"{name}.jsonl").read_bytes()


def run_quality_filter(tmp, prepared, metrics, stats, action, filters):
    """sharflow.quality.filter.filter_quality into tmp/<action>: (summary, kept records, rejected dir)."""
    out = tmp / action
    summary = filter_quality(
        records=str(prepared),
        metrics=str(metrics),
        records_stats=str(stats),
        kept=str(out / "kept.jsonl"),
        rejected_dir=str(out / "rejected"),
        stats=str(out / "stats.json"),
        filters=filters,
        action=action,
        dataset="t",
    )
    kept = [json.loads(x) for x in (out / "kept.jsonl").read_text().splitlines()]
    return summary, kept, out / "rejected"


def run_stage(
    tmp,
    prep,
    root=DEMO / "audio",
    parts=1,
    workers=1,
    save_embeddings=False,
    device="cpu",
    measured=None,
    **rules,
):
    """The context stage (plan, every part, merge) over `prep`'s records, reading the quality parts'
    embeddings with `measured` (a MeasuredEmbeddings); (context folder, stats)."""
    source = DatasetFiles(str(prep.parent))
    files = DatasetFiles(str(tmp / f"run-{parts}-{workers}{'-measured' if measured else ''}"))
    plan_context(
        source.prepared,
        plan=files.context_plan,
        parts=parts,
        grouping={"preset": "speaker"},
        cost_per_audio_second=1e6,
    )
    settings = PartSettings(
        audio_root=str(root), top_k=2, embed_batch=5, save_embeddings=save_embeddings, **rules
    )
    for p in range(parts):
        embeddings = files.context_embeddings(p)
        run_context_part(
            p,
            prepared=source.prepared,
            plan=files.context_plan,
            out=files.context_part(p),
            settings=settings,
            device=device,
            workers=workers,
            out_embeddings=embeddings["embeddings"],
            out_embedding_ids=embeddings["embedding_ids"],
            measured=measured,
        )
    stats = merge_context(
        part_records=[files.context_part(p).records for p in range(parts)],
        part_rejected=[files.context_part(p).rejected for p in range(parts)],
        part_stats=[files.context_part(p).stats for p in range(parts)],
        records_stats=source.prepare_stats,
        with_context=files.with_context,
        rejected_dir=files.context_rejected,
        stats=files.context_stats,
        dataset="demo",
    )
    return Path(files.with_context).parent, stats


FIELDS = ("cuts", "target_audio", "context_audio")


def identity_part(out, records, root, voices=None, **options) -> tuple[dict, list[str]]:
    """One identity part (part 0 of 1) of `records` into out/part.{jsonl,npy,voices.npy,stats.json},
    embedding voices with `voices` (a VoiceEmbedding, or None): (stats, [records, hashes, voices])."""
    files = [str(out / name) for name in ("part.jsonl", "part.npy", "part.voices.npy")]
    stats = run_identity_part(
        0,
        records=str(records),
        parts=1,
        audio_root=str(root),
        out_records=files[0],
        out_hashes=files[1],
        out_stats=str(out / "part.stats.json"),
        out_voices=files[2],
        voices=voices,
        **options,
    )
    return stats, files


def run_identity(tmp, datasets: dict, rules=None, voices=None):
    """Identity parts, the identity job and each dataset's splits job over datasets {name: (records,
    audio root, count, splits block[, speaker_ids own])}, voices by `voices` (VoiceRules; the
    default's without): (identity stats, {name: (splits stats, records, rejects)})."""
    from sharflow.identity.part import VoiceEmbedding
    from sharflow.identity.voices import VoiceRules

    voices = voices or VoiceRules()
    parts = {}
    own = {name: bool(spec[4:] and spec[4]) for name, spec in datasets.items()}  # speaker_ids: own
    for name, (records, root, *_) in datasets.items():
        _, files = identity_part(
            tmp / "identity" / name,
            records,
            root,
            VoiceEmbedding(voices.embedder) if voices.enabled else None,
            dataset=name,
            own_speaker_ids=own[name],
        )
        parts[name] = DatasetIdentity([files if voices.enabled else files[:2]], datasets[name][3])
    links = tmp / "identity" / "links.jsonl"
    identity = link_identities(
        parts,
        rules=rules or MatchRules(),
        out_links=str(links),
        out_stats=str(tmp / "identity" / "stats.json"),
        voices=voices,
        decisions=str(tmp / "identity" / "speaker_decisions.jsonl"),
    )
    result = {}
    for name, (records, root, n, split_rules, *_) in datasets.items():
        files = {k: str(tmp / "splits" / name / k) for k in ("records.jsonl", "rejected", "stats.json")}
        stats = assign_splits(
            name,
            DatasetSplits(str(records), str(root), split_rules, own[name]),
            links=str(links),
            identity=[str(tmp / "identity" / name / "part.jsonl")],
            records_in=n,
            out_records=files["records.jsonl"],
            rejected_dir=files["rejected"],
            stats=files["stats.json"],
        )
        rejects = [
            r for p in sorted((tmp / "splits" / name / "rejected").glob("*.jsonl")) for r in read_jsonl(p)
        ]
        result[name] = (stats, read_jsonl(files["records.jsonl"]), rejects)
    return identity, result


def write_all(out, with_context, shard_size=16, workers=1, root=DEMO / "audio", indexed=True, **settings):
    """Shards of `with_context` under `out` as the workflow lays out a dataset (sharflow.core.layout),
    and their catalog (no codes columns)."""
    files = DatasetFiles(str(out), indexed)
    plan = plan_shards(
        str(with_context),
        plan=files.shard_plan,
        inputs_dir=files.shar_inputs,
        shard_size=shard_size,
        seed=7,
        shards_per_job=1,
        indexed=indexed,
    )
    write_planned(files, EncodeSettings(audio_root=str(root), **settings), workers)
    jobs = [files.shard(s) for s in range(plan["num_shards"])]
    merge_catalog([job.catalog for job in jobs], files.catalog, codecs=[])
    return plan, [job.stats for job in jobs], [job.rejected for job in jobs]


def planned_lines(inputs_dir) -> list[tuple[int, bytes]]:
    """(shard, record line) of every record the shar jobs' inputs hold, in shard order."""
    out = []
    for path in sorted(Path(inputs_dir).glob("*.jsonl")):
        for shard, lines in read_job_inputs(str(path)).items():
            out += [(int(shard), line) for line in lines]
    return out


def data_files(folder) -> list[str]:
    """A Shar field folder's data files, in order (not their indexes, <file>.idx)."""
    return sorted(p for p in glob.glob(str(Path(folder) / "*")) if not p.endswith(".idx"))


def read_back(out):
    return CutSet.from_shar(fields={f: data_files(out / "shar" / f) for f in FIELDS})


def run_codes(shards_dir, out, codec_path, shards=(0, 1), workers=1, name="tiny", per_job=None):
    """Codes of `shards` of the dataset at `shards_dir`, laid out under `out` as the workflow does:
    `per_job` shards per codes job (default: all in one job). Returns every shard's stats."""
    spec = CodecSpec(name=name, backend="nemo", model=str(codec_path))
    source, files = DatasetFiles(str(shards_dir)), DatasetFiles(str(out))
    jobs = [
        ShardCodes(s, source.shard(s).target, source.shard(s).context, files.codes(name, s)) for s in shards
    ]
    per_job = per_job or len(jobs)
    return [
        stats
        for first in range(0, len(jobs), per_job)
        for stats in encode_shards(
            jobs[first : first + per_job], codec=spec, batch_seconds=8.0, device="cpu", workers=workers
        )
    ]


def codes_in_tars(paths) -> list[np.ndarray]:
    """Every codes array (.npy member) of the given code tars, in order."""
    arrays = []
    for path in paths:
        with tarfile.open(path) as tar:
            arrays += [
                np.load(io.BytesIO(tar.extractfile(m).read()))
                for m in tar.getmembers()
                if m.name.endswith(".npy")
            ]
    return arrays


def assert_informative_codes(
    arrays, *, reversed_arrays=None, distinct_arrays: bool = True, min_distinct: int = 64
):
    """Fail unless codes carry information, so that a test comparing them can fail at all.

    `arrays`: (C, T) codes of different utterances (different audio when `distinct_arrays`).
    Checks: every codebook takes >= `min_distinct` distinct values over all arrays; no array is the
    same frame repeated; no two arrays are equal; and each `reversed_arrays[i]` (codes of the same
    audio played backwards) differs from `arrays[i]`. Call it before comparing codes.
    """
    arrays = [np.asarray(a) for a in arrays]
    assert arrays and all(a.ndim == 2 for a in arrays), "codes must be a list of (C, T) arrays"
    stacked = np.concatenate(arrays, axis=1)
    distinct = [len(np.unique(row)) for row in stacked]
    assert min(distinct) >= min_distinct, (
        f"codebooks take only {distinct} distinct values (floor {min_distinct})"
    )
    for i, a in enumerate(arrays):
        assert a.shape[1] < 2 or (a[:, 1:] != a[:, :-1]).any(), f"codes {i}: every frame is the same"
    if distinct_arrays:
        assert len({(a.shape, a.tobytes()) for a in arrays}) == len(arrays), (
            "two different utterances got equal codes"
        )
    for i, (a, r) in enumerate(zip(arrays, reversed_arrays or arrays, strict=True)):
        assert reversed_arrays is None or a.shape != r.shape or (a != r).any(), (
            f"codes {i}: the same audio played backwards gets the same codes"
        )


def assert_informative_embeddings(embeddings, *, min_spread: float = 0.05, max_similarity: float = 0.999):
    """Fail unless L2-normalised embeddings of different utterances differ clearly from one another.

    The off-diagonal cosine similarities must spread (standard deviation >= `min_spread`) and none may
    reach `max_similarity`: a random model whose outputs are all one vector passes any comparison.
    """
    e = np.asarray(embeddings, dtype=np.float64)
    sims = (e @ e.T)[np.triu_indices(len(e), 1)]
    assert sims.std() >= min_spread, (
        f"cosine similarities hardly vary (std {sims.std():.4f}): embeddings are degenerate"
    )
    assert sims.max() < max_similarity, f"two different utterances embed alike (cosine {sims.max():.5f})"


def system_tool(binary: str, packages: list[str]) -> str:
    """Path of `binary`; apt-installs `packages` first where it is missing and we are root, else skips.

    CI runs the test command alone on a fresh Debian machine, so tests that need a system tool
    (Chromium, Slurm) install it here rather than in a separate CI step.
    """
    if path := shutil.which(binary):
        return path
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip(
            f"{binary} is not installed and this is not a root Debian machine (apt-get install "
            f"{' '.join(packages)})"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            pytest.skip(f"could not install {packages}: {done.stderr[-500:]}")
    return shutil.which(binary) or pytest.skip(f"{binary} not found after installing {packages}")


def hang_timeout() -> int:
    """Seconds a test may run before the session ends as hung (conftest.hang_guard): default 1200 (the
    slowest test takes ~4 min); the mutation runs set SHARFLOW_TEST_TIMEOUT=60."""
    return int(os.environ.get("SHARFLOW_TEST_TIMEOUT", "1200"))


_GUARD: dict[str, float] = {}  # "deadline": time.monotonic() at which the running test counts as hung


def arm_hang_guard(seconds: float | None = None) -> None:
    """End the process, with every thread's traceback, `seconds` (hang_timeout()) from now."""
    seconds = hang_timeout() if seconds is None else seconds
    _GUARD["deadline"] = time.monotonic() + seconds
    faulthandler.dump_traceback_later(seconds, exit=True)


def disarm_hang_guard() -> float | None:
    """Stop the hang guard; the seconds it had left (None: it was not armed)."""
    faulthandler.cancel_dump_traceback_later()
    deadline = _GUARD.pop("deadline", None)
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


class Background(threading.Thread):
    """`fn(*args)` run in a thread started now; `result()` waits for it, then returns or raises as `fn` did.

    The suite starts its long workflow runs this way before the first test (conftest.early_runs), so
    that a run which mostly waits (Slurm's queue) or uses one core overlaps the unit tests. A
    pytest.skip or pytest.fail raised in `fn` skips or fails the test that asks for the result.
    """

    def __init__(self, fn, *args):
        super().__init__(daemon=True, name=getattr(fn, "__name__", "background"))
        self.fn, self.args = fn, args
        self.value, self.error = None, None
        self.env = dict(os.environ)  # its runs' (run_environment): not what a later test sets meanwhile
        self.tmpdir = tempfile.gettempdir()  # run_command's folders: not where a later test points tempfile
        self.start()

    def run(self):
        _THREAD.env, _THREAD.tmpdir = self.env, self.tmpdir
        try:
            self.value = self.fn(*self.args)
        except BaseException as e:
            self.error = e

    def result(self, timeout: float = 3 * LONG_RUN):
        """The run's value, once it has ended (its own timeouts bound it; a chained run waits for the
        runs before it too). Asked by a test, the wait is not the test's own work: the hang guard
        (conftest.hang_guard, process-wide) stops while it lasts and starts again after with the time
        it had left, so that a test which waits long for a run on a busy machine is not taken for a
        hang. (Asked by another run's thread, the guard of the test running is left be.)"""
        left = disarm_hang_guard() if threading.current_thread() is threading.main_thread() else None
        try:
            self.join(timeout)
        finally:
            if left is not None:  # the test's own time before the wait still counts
                arm_hang_guard(max(left, 1.0))
        if self.is_alive():
            pytest.fail(f"background run {self.name} still running after {timeout} s")
        if self.error is not None:
            raise self.error
        return self.value


def deterministic_outputs(results: Path) -> list[str]:
    """Files of a dataset's results that must be byte-identical between runs of the same inputs and config.

    Everything but the stats and logs of the context, shar and codes jobs, which hold wall-clock times.
    """
    files = DatasetFiles(str(results))
    fixed = (
        files.prepared,
        files.prepare_stats,
        files.context_plan,
        files.with_context,
        files.shard_plan,
        files.buckets,
        files.catalog,
        files.dataset_card,
    )
    shards = sorted(p for p in Path(files.shar_dir).rglob("*") if p.is_file())
    shards += sorted(Path(files.shar_dir).parent.glob("shar_jobs/*.catalog.parquet"))
    shards += sorted(Path(files.shar_inputs).glob("*.jsonl"))
    return [str(Path(p).relative_to(results)) for p in (*fixed, *shards)]


def assert_same_outputs(a: Path, b: Path, datasets, what: str, json_differ: dict | None = None) -> None:
    """deterministic_outputs of each dataset are byte-identical under results dirs `a` and `b`; a
    JSON file named in `json_differ` ({name: keys}) equal but for those keys (which must differ)."""
    json_differ = json_differ or {}
    for ds in datasets:
        names = deterministic_outputs(a / ds)
        assert sum(name.startswith("shar/") for name in names) >= 5, f"{ds}: no shard in {names}"
        for name in names:
            if name in json_differ:
                one, two = (json.loads((r / ds / name).read_text()) for r in (a, b))
                assert all(one.pop(k) != two.pop(k) for k in json_differ[name]), (name, json_differ[name])
                assert one == two, f"{ds}/{name} differs beyond {json_differ[name]}: {what}"
                continue
            assert (a / ds / name).read_bytes() == (b / ds / name).read_bytes(), (
                f"{ds}/{name} differs: {what}"
            )


# ---- object storage: a real S3 API (moto's server) on this machine ----------------------------
S3_SECRET = "sharflow-test-secret-4f1c9e"  # must never appear in a log (test_storage, test_slurm)


class S3Server:
    """moto's S3 server on 127.0.0.1 and a free port, with the environment pointing at it.

    `start()` sets AWS_ENDPOINT_URL and test credentials in os.environ (which workflow runs and
    Slurm jobs inherit) and a fresh object cache; `stop()` ends the server and restores them.
    """

    ENV = (
        "AWS_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_DEFAULT_REGION",
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
        "SHARFLOW_OBJECT_CACHE",
    )
    # the machine's own settings that would win over the ones above: unset while the server runs
    UNSET = ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN")

    def __init__(self, cache: Path):
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request in the test output
        self.cache = cache
        self.saved: dict[str, str | None] = {}

    def start(self) -> "S3Server":
        import urllib.request

        from sharflow.io import storage

        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        # moto keeps its buckets in this process's memory: a second session in one process (mutmut
        # runs the tests twice before its mutants) starts from an empty store, as a first one does
        reset = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        urllib.request.urlopen(reset).close()
        self.saved = {k: os.environ.get(k) for k in (*self.ENV, *self.UNSET)}
        for k in self.UNSET:
            os.environ.pop(k, None)
        os.environ.update(
            AWS_ENDPOINT_URL=self.endpoint,
            AWS_ACCESS_KEY_ID="sharflowtestkey",
            AWS_SECRET_ACCESS_KEY=S3_SECRET,
            AWS_DEFAULT_REGION="us-east-1",
            AWS_CONFIG_FILE=str(self.cache / "no-aws-config"),  # none of the machine's profiles
            AWS_SHARED_CREDENTIALS_FILE=str(self.cache / "no-aws-credentials"),
            SHARFLOW_OBJECT_CACHE=str(self.cache),
        )
        storage.client.cache_clear()
        return self

    def stop(self) -> None:
        from sharflow.io import storage

        self.server.stop()
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for cached in (storage.client, storage.head, storage.bucket_exists):
            cached.cache_clear()

    def bucket(self, name: str, *, versioned: bool = False) -> str:
        """A new empty bucket (versioned: every PUT of a key keeps a version); its s3:// URL."""
        from sharflow.io import storage

        client = storage.client()
        client.create_bucket(Bucket=name)
        if versioned:
            client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        return f"s3://{name}"

    def upload_tree(self, folder: Path, url: str) -> None:
        """Every file under `folder` to `url`/<its path under folder>."""
        from sharflow.io import storage

        bucket, base = storage.split_url(url)
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            key = "/".join(filter(None, [base.strip("/"), path.relative_to(folder).as_posix()]))
            storage.client().upload_file(str(path), bucket, key)


def random_files(folder: Path, count: int, size: int, seed: int = 0) -> list[str]:
    """`count` files of `size` random bytes in `folder` (made if need be): their paths from the cwd."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(count):
        path = folder / f"f{k:06d}.bin"
        path.write_bytes(rng.bytes(size))
        paths.append(os.path.relpath(path))
    return paths


def upload_demo(s3: S3Server, bucket: str) -> dict:
    """The demo corpus (manifest and audio) in a new bucket: {"manifest": url, "audio_root": url}."""
    from sharflow.io import storage

    url = s3.bucket(bucket)
    s3.upload_tree(DEMO / "audio", f"{url}/demo/audio")
    storage.client().upload_file(str(DEMO / "manifest.json"), bucket, "demo/manifest.json")
    return {"manifest": f"{url}/demo/manifest.json", "audio_root": f"{url}/demo/audio"}
