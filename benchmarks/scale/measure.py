"""Running bench_scale's jobs each in a process of its own (fresh, or forked by a zygote) and judging
the ladder: CPU per record, peak RSS, their growth with the records, and the cost plan's predicted
peaks against the measured ones."""

import contextlib
import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from functools import partial
from pathlib import Path

from scale.corpus import CALIBRATION, REPO
from scale.jobs import JOBS, planted_found
from scale.steps import make_inputs

BENCH = Path(__file__).resolve().parents[1] / "bench_scale.py"  # --run-job: one job; --zygote: many


def counted(folder: Path, out: Path, name: str) -> dict:
    """What a job's outputs count, read after it is measured (not timed): the records it kept, the
    cuts it verified or exported, the report's summary rows."""
    if name == "prepare":
        stats = json.loads((out / "stats.json").read_text())
        return {"records_in": stats["records_in"], "records_out": stats["records_out"]}
    if name == "verify":
        return {"cuts": json.loads((out / "verify.json").read_text())["cuts"]}
    if name == "evaluation_set":
        with open(out / "set" / "manifest.json", encoding="utf-8") as f:
            return {"cuts": sum(1 for _ in f)}
    if name == "report":
        return {"summary_rows": len((out / "summary.tsv").read_text().splitlines()) - 1}
    raise ValueError(f"nothing counted for {name}")


# What a job's outputs say, read after it is measured: {job: function(folder, out) -> dict}
SAID = {
    "identity_check": planted_found,
    **{name: partial(counted, name=name) for name in ("prepare", "verify", "evaluation_set", "report")},
}

# Jobs this machine runs only up to a size, and why (their figures beyond are extrapolated in the docs)
MOST_RECORDS: dict[str, int] = {}
WHY_NOT: dict[str, str] = {}


# What a job imports when it runs, imported before it is measured (not for every job: lhotse's ~200 MB
# would be in every job's peak)
JOB_IMPORTS = {"evaluation_set": ("lhotse",)}


def peak_rss_mb() -> float:
    """This process's peak RSS since its exec (VmHWM): not ru_maxrss, which on Linux keeps the peak of
    the process it was forked from (the benchmark's own, holding the largest size's corpus)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# The modules the jobs run, imported before a job is measured (once, in the zygote)
JOB_MODULES = (
    "sharflow.codes.merge",
    "sharflow.context.merge",
    "sharflow.context.plan",
    "sharflow.dataset.buckets",
    "sharflow.dataset.catalog",
    "sharflow.dataset.evaluation",
    "sharflow.dataset.tables",
    "sharflow.dataset.training",
    "sharflow.identity.links",
    "sharflow.plan.sample",
    "sharflow.prepare.job",
    "sharflow.quality.filter",
    "sharflow.quality.merge",
    "sharflow.report.report",
    "sharflow.shar.merge",
    "sharflow.shar.plan",
    "sharflow.splits.stage",
    "sharflow.text.job",
    "sharflow.verify.dataset",
)


def run_job(name: str, folder: Path) -> dict:
    """Run job `name` over `folder`'s inputs here (a fresh process, or one the zygote forked): its
    figures. The modules are imported first, so that CPU and RSS above `base_mb` are the job's own."""
    for module in (*JOB_MODULES, *JOB_IMPORTS.get(name, ())):
        importlib.import_module(module)
    out = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=folder))
    base = peak_rss_mb()
    start, cpu = time.perf_counter(), time.process_time()
    done = JOBS[name](folder, out) or {}
    figures = {
        "wall": time.perf_counter() - start,
        "cpu": time.process_time() - cpu,
        "rss_mb": peak_rss_mb(),
        "base_mb": base,
        "share": done.get("share", 1.0),  # of the corpus's records, the share the job handled
    }
    return {**figures, "out": str(out)}


def zygote() -> None:
    """bench_scale.py --zygote: import the jobs' modules once, then for each request on stdin (a JSON
    line [job, folder]) fork a child that runs it, and answer its figures as a line on stdout
    ({"error": ...} when it failed; the child's own output goes to stderr). The child's CPU is its
    own, as a fresh process's after its imports; its peak RSS mark is reset at the fork, but its RSS
    leaves out the libraries' pages until the job touches them: its memory is not a cold job's."""
    for module in JOB_MODULES:
        importlib.import_module(module)
    for request in sys.stdin:
        name, folder = json.loads(request)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the job's process
            os.close(read)
            os.dup2(2, 1)
            try:
                Path("/proc/self/clear_refs").write_text("5")  # VmHWM from the RSS it has now
                reply = run_job(name, Path(folder))
            except BaseException:
                reply = {"error": traceback.format_exc()}
            with os.fdopen(write, "w") as f:
                f.write(json.dumps(reply))
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as f:
            answer = f.read()
        _, status = os.waitpid(pid, 0)
        print(answer or json.dumps({"error": f"the job's process ended with status {status}"}), flush=True)


class Zygote:
    """bench_scale.py --zygote as a subprocess: `run(job, folder)` gives a job's figures, each job in a
    process of its own without paying the imports again (about a second each); stopped when the
    block ends. `env`: its environment (None: this process's)."""

    def __init__(self, env: dict | None = None):
        self.env = env

    def __enter__(self):
        cmd = [sys.executable, str(BENCH), "--zygote"]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO, env=self.env
        )
        return self

    def run(self, name: str, folder: Path) -> dict:
        self.proc.stdin.write(json.dumps([name, str(folder)]) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline() or '{"error": "the zygote ended"}')
        if "error" in reply:
            sys.exit(f"{name} at {folder} failed:\n{reply['error'][-3000:]}")
        return reply

    def __exit__(self, *exc):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# Jobs run more than once at each size, the run of least CPU kept: a few seconds' run on a shared
# machine varies by up to a third (identity_check at 10^4: 5.9 to 8.4 s), enough to decide its bar
REPEATS = {"identity_check": 3}


def fresh_run(name: str, folder: Path) -> dict:
    """The job's figures from a fresh Python process (bench_scale.py --run-job): its peak RSS is a cold
    job's, its libraries' pages resident as they are in a real job."""
    cmd = [sys.executable, str(BENCH), "--run-job", name, "--folder", str(folder)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        sys.exit(f"{name} at {folder} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(name: str, folder: Path, repeats: dict[str, int] = REPEATS, zygote: Zygote | None = None) -> dict:
    """The job in a process of its own (`repeats` times, the least CPU kept): a fresh one, or one forked
    by `zygote` (the same CPU, without the imports' second a job; its RSS counts a library's pages only
    once the job touches them, so its memory is not a cold job's): {wall, cpu, rss_mb, base_mb, share,
    said} (CPU: the job's own, after its imports; peak RSS of the process, and its RSS before the job;
    the share of the records it handled)."""
    run = zygote.run if zygote else fresh_run
    runs = [run(name, folder) for _ in range(repeats.get(name, 1))]
    kept = min(runs, key=lambda row: row["cpu"])
    out = Path(kept.pop("out"))
    return {**kept, "said": SAID[name](folder, out) if name in SAID else None}  # the kept run's outputs


def ladder(
    sizes: list[int],
    jobs: list[str],
    work: Path,
    repeats: dict[str, int] = REPEATS,
    forked: bool = False,
    env: dict | None = None,
) -> dict[str, dict[int, dict]]:
    """{job: {size: figures}} over the ladder (the inputs made once per size; measure's `repeats`; with
    `forked`, every job forked by one zygote started with `env`: CPU alone is compared)."""
    rows: dict[str, dict[int, dict]] = {job: {} for job in jobs}
    with Zygote(env) if forked else contextlib.nullcontext() as zygote:
        for n in sizes:
            _rung(n, work, jobs, repeats, zygote, rows)
    return rows


def _rung(
    n: int, work: Path, jobs: list[str], repeats: dict[str, int], zygote: Zygote | None, rows: dict
) -> None:
    """One size of the ladder: its inputs made, each job measured into rows[job][n]."""
    folder = work / f"n{n}"
    t = time.perf_counter()
    make_inputs(n, folder, jobs)
    print(f"inputs for {n:,} records: {time.perf_counter() - t:.1f} s", flush=True)
    for job in jobs:
        if n > MOST_RECORDS.get(job, n):
            print(f"{job}: not run at {n:,} records ({MOST_RECORDS[job]:,} at most: {WHY_NOT[job]})")
            continue
        rows[job][n] = measure(job, folder, repeats, zygote)
        if rows[job][n]["said"]:
            print(f"{job} at {n:,} records: {rows[job][n]['said']}", flush=True)


def per_record(row: dict, n: int) -> float:
    """CPU seconds per record of a job's run over `n` records (of those it handled: its share)."""
    return row["cpu"] / (n * row.get("share", 1.0))


def growth(rows: dict[int, dict]) -> dict[int, tuple[float, float]]:
    """{size: (CPU per record / the smallest size's, the job's own RSS (above the process's before it)
    grown from the smallest size's, in bytes per record added: the per-record part of its memory)}."""
    first = min(rows)
    base = rows[first]

    def own(row):
        return row["rss_mb"] - row["base_mb"]

    return {
        n: (
            per_record(row, n) / per_record(base, first),
            max(0.0, own(row) - own(base)) * 2**20 / (n - first) if n > first else 0.0,
        )
        for n, row in rows.items()
    }


def report(rows: dict[str, dict[int, dict]]) -> bool:
    """Print the ladder; whether every job meets the bars (1.5x CPU per record; memory a fixed part
    plus at most 2 KB a record, or 4 GB in all)."""
    ok = True
    print(
        f"{'job':14} {'records':>10} {'wall s':>8} {'CPU-µs/rec':>11} {'peak RSS MB':>12} "
        f"{'own MB':>7} {'CPU/rec x':>10} {'+B/rec':>8}"
    )
    for job, by_size in rows.items():
        g = growth(by_size)
        for n, row in sorted(by_size.items()):
            per, added = g[n]
            print(
                f"{job:14} {n:>10,} {row['wall']:>8.2f} {per_record(row, n) * 1e6:>11.1f} "
                f"{row['rss_mb']:>12.0f} {row['rss_mb'] - row['base_mb']:>7.0f} {per:>10.2f} {added:>8.0f}"
            )
            ok &= per <= 1.5 and (added <= 2048 or row["rss_mb"] <= 4096)
    return ok


def plan_check(rows: dict[str, dict[int, dict]], calibration: dict[str, dict[int, dict]]) -> bool:
    """Print, per job, the peak RSS the cost plan predicts for the ladder's largest size from the job's
    run on a CALIBRATION-record sample (sharflow.plan.model.predicted_peak_mb: that run's peak plus the
    rule's per-record part), against the peak measured there; whether every one is within the bar
    (within 25 %, or over by at most 2x)."""
    from sharflow.plan.model import ACTUAL, RSS_PER_RECORD, predicted_peak_mb

    ok = True
    print(f"\nplan check: peak RSS predicted from a {CALIBRATION}-record run (plan.model.predicted_peak_mb)")
    print(
        f"{'job':14} {'sample MB':>10} {'B/rec':>6} {'records':>10} {'predicted MB':>13} "
        f"{'measured MB':>12} {'ratio':>6}"
    )
    for job, by_size in rows.items():
        n = max(by_size)
        if job in ACTUAL:  # it ran on every record before the plan: the plan asks for its own peak
            print(
                f"{job:14} not predicted: the plan takes its run on every record "
                f"({by_size[n]['rss_mb']:.0f} MB)"
            )
            continue
        sample = calibration[job][CALIBRATION]["rss_mb"]
        predicted = predicted_peak_mb(job, sample, CALIBRATION, n)
        measured = by_size[n]["rss_mb"]
        ratio = predicted / measured
        print(
            f"{job:14} {sample:>10.0f} {RSS_PER_RECORD.get(job, 0):>6} {n:>10,} {predicted:>13.0f} "
            f"{measured:>12.0f} {ratio:>6.2f}"
        )
        ok &= 0.75 <= ratio <= 2.0
    return ok
