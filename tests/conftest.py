"""Fixtures shared by test modules: the demo corpus through the stages, a tiny codec, workflow runs."""

import importlib
import inspect
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

import pytest
from test_prepare import dirty_manifest
from tqdm import tqdm
from tqdm.std import TqdmDefaultWriteLock

from sharflow.models.codecs.nemo import build_random_codec
from testkit import (
    LONG_RUN,
    REPO,
    SMALL_SHARDS,
    Background,
    S3Server,
    arm_hang_guard,
    demo_config,
    disarm_hang_guard,
    prepare_demo,
    run_codes,
    run_snakemake,
    run_stage,
    stop_process_groups,
    system_tool,
    write_all,
)


def _fresh_tqdm_lock() -> None:
    """tqdm's write lock is a class-wide multiprocessing lock shared by every process forked after it
    was made; one that dies holding it (mutmut forks and kills a process per mutant) leaves the others
    waiting forever. A forked child gets locks of its own."""
    TqdmDefaultWriteLock.th_lock = threading.RLock()
    TqdmDefaultWriteLock.mp_lock = multiprocessing.RLock()
    tqdm.set_lock(TqdmDefaultWriteLock())


os.register_at_fork(after_in_child=_fresh_tqdm_lock)

_SESSION_CACHE = "SHARFLOW_TEST_SESSION_CACHE"
_SEED_CACHE = "SHARFLOW_TEST_SEED_CACHE"
_OWN_CACHE = pytest.StashKey[str]()


@pytest.fixture(autouse=True)
def hang_guard():
    """A test that hangs ends the run, with every thread's traceback, after testkit.hang_timeout()
    seconds instead of holding CI (a mutant that loops forever counts as caught); waiting for a shared
    run (Background.result) does not count."""
    arm_hang_guard()
    yield
    disarm_hang_guard()


def pytest_configure(config):
    """SIGTERM (`timeout`, a CI runner giving up) ends the session as Ctrl-C does, so that its teardown
    still runs: the Slurm daemons this session started are stopped (early_runs). sharflow's cache (the
    text normalizer's grammars) is a folder of this session's, shared by every test and workflow run
    in it (built once), and removed when the session ends. With $SHARFLOW_TEST_SEED_CACHE, a cache
    that holds the built grammars, the session's cache starts as a copy of it (a mutation run: every
    mutant's tests are a session, and each would build the grammars again, minutes a mutant; a copy,
    because a mutant of the cache or the normalizer may write a wrong entry)."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    config.addinivalue_line("markers", f"ahead: {AHEAD_DOC}")
    if not os.environ.get(_SESSION_CACHE):
        os.environ["SHARFLOW_CACHE_DIR"] = os.environ[_SESSION_CACHE] = tempfile.mkdtemp(
            prefix="sharflow-cache-"
        )
        config.stash[_OWN_CACHE] = os.environ[_SESSION_CACHE]
        if os.environ.get(_SEED_CACHE):  # copied, never shared: a mutant may write anything into its own
            shutil.copytree(os.environ[_SEED_CACHE], os.environ[_SESSION_CACHE], dirs_exist_ok=True)


def pytest_unconfigure(config):
    if config.stash.get(_OWN_CACHE, None):
        shutil.rmtree(config.stash[_OWN_CACHE], ignore_errors=True)
        os.environ.pop(_SESSION_CACHE, None)


# Workflow runs that one test module's tests share, run in the background one after another (a second
# chain beside the two-dataset and crash runs): fixture -> (module, function of a fresh folder).
CHAINED = {
    "webdataset_run": ("test_corpora", "run_webdataset_and_manifest"),
    "planned_demo": ("test_plan", "run_plan"),
    "split_run": ("test_splits", "run_splits"),
    "long_form_run": ("test_segment", "run_long_form"),
}
# Session fixtures that build the demo through stages or run whole workflows: minutes each.
RUNS = frozenset({"two_datasets", "slurm_run", "crash", "with_context", "demo_shards", "coded", *CHAINED})


def pytest_addoption(parser):
    parser.addoption(
        "--without-runs",
        action="store_true",
        help="deselect the tests that need a workflow run or the demo's stages (fixtures: "
        + ", ".join(sorted(RUNS))
        + "): the mutation runs, which build every fixture again for each mutant",
    )


def pytest_collection_modifyitems(config, items):
    """Tests that need a background workflow run (early_runs) go last, in their order: the unit
    tests run while those runs finish instead of after a test that waits for them. With
    --without-runs, the tests that need any of RUNS are deselected."""
    if config.getoption("--without-runs"):
        kept = [item for item in items if not RUNS & set(getattr(item, "fixturenames", ()))]
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept
    waiting = {"two_datasets", "slurm_run", "crash", *CHAINED}
    items.sort(key=lambda item: bool(waiting & set(getattr(item, "fixturenames", ()))))


@pytest.fixture(scope="session")
def with_context(tmp_path_factory):
    """(with_context.jsonl, context stats.json) of the demo corpus."""
    tmp = tmp_path_factory.mktemp("with_context")
    ctx, _ = run_stage(tmp, prepare_demo(tmp))
    return ctx / "with_context.jsonl", ctx / "stats.json"


@pytest.fixture(scope="session")
def demo_shards(with_context, tmp_path_factory):
    """(folder, plan, shard stats paths, shard reject paths) of the demo in 4 shards of 16."""
    out = tmp_path_factory.mktemp("demo_shards")
    plan, stats, rejected = write_all(out, with_context[0])
    return out, plan, stats, rejected


@pytest.fixture(scope="session")
def tiny_nemo_codec(tmp_path_factory):
    return build_random_codec(
        REPO / "config" / "models" / "tiny_codec.yaml", tmp_path_factory.mktemp("codec") / "tiny.nemo"
    )


@pytest.fixture(scope="session")
def coded(demo_shards, tiny_nemo_codec, tmp_path_factory):
    """(folder, stats) of tiny-codec codes for demo shards 0 and 1, codec name "tiny"."""
    out = tmp_path_factory.mktemp("codes")
    return out, run_codes(demo_shards[0], out, tiny_nemo_codec)


@pytest.fixture(scope="session")
def tiny_asr(tmp_path_factory):
    """The tiny random NeMo CTC model of config/models/tiny_asr.yaml (its .nemo file)."""
    from sharflow.models.asr import build_random_asr

    return build_random_asr(
        REPO / "config" / "models" / "tiny_asr.yaml", tmp_path_factory.mktemp("asr") / "asr.nemo"
    )


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """A real S3 API (testkit.S3Server: moto's server on 127.0.0.1) for the session, the environment
    pointing at it; stopped when the session ends, passed or failed."""
    server = S3Server(tmp_path_factory.mktemp("object_cache")).start()
    try:
        yield server
    finally:
        server.stop()


LHOTSE_2 = "lhotse==2.0.0a7"  # the newest pre-release of lhotse 2 (indexed Shar, resumable loading)


@pytest.fixture(scope="session")
def lhotse2(tmp_path_factory):
    """A folder holding lhotse 2 alone (its dependencies are the project's lhotse's), for PYTHONPATH:
    installed from PyPI apart from the project's lhotse 1.33 (tests/test_lhotse2.py)."""
    target = tmp_path_factory.mktemp("lhotse2")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), LHOTSE_2],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"pip could not install {LHOTSE_2} (from PyPI):\n{proc.stderr[-2000:]}"
    return target


@pytest.fixture(scope="session")
def chromium():
    """A headless-capable Chromium, installed from Debian when missing and we are root."""
    return system_tool("chromium", ["chromium"])


def run_two_datasets(tmp):
    """One local run of the default target over the demo corpus and a dirty manifest."""
    manifest, root = dirty_manifest(tmp)
    # no quality filter: the dirty dataset's tones hold no speech, and the default filter would
    # leave its context and shar stages nothing to show (test_quality covers the filter's rejects)
    # two text parts: the runs that start from this one's outputs (test_crash) see the parts' merge
    config = demo_config(
        prepare={"max_rejected_fraction": 0.9}, quality={"filters": {}}, shar=SMALL_SHARDS, text={"parts": 2}
    )
    # German, with its text read as it is: building the German normalizer's grammars (47-114 s) would
    # add minutes to the suite; the English ones are built once per session (test_text: German text)
    config["datasets"]["dirty"] = {
        "manifest": str(manifest),
        "audio_root": str(root),
        "language": "de",
        "normalized_text": "text",
    }
    work = tmp / "work"
    proc = run_snakemake(work, config, timeout=LONG_RUN)
    return work, proc, manifest


# Tests marked `ahead`: each one's body runs in a background thread, in one of AHEAD_STREAMS chains that
# start once the CHAINED runs have ended (on two cores the session's last minutes ran one test at a
# time, with a core idle); the test itself waits for that body's outcome (pytest_pyfunc_call). Such a
# test asks for tmp_path, the session's runs (two_datasets, split_run, ...: the body waits for them) and
# session-scoped fixtures only (resolved before the first test), and its body must be safe beside other
# tests: absolute paths, its commands given run_environment(), no monkeypatch, no chdir, no torch seed.
AHEAD_DOC = "the test's body runs in a background thread at the session's end (conftest: _ahead)"
AHEAD_STREAMS = 2


def _ahead(items, previous, runs, request, tmp_path_factory) -> dict:
    """{"ahead:<nodeid>": Background} of the marked `items`, dealt in turn to AHEAD_STREAMS chains that
    start after `previous` (a Background, or None)."""
    out, streams = {}, [previous] * AHEAD_STREAMS
    for i, item in enumerate(items):
        names = list(inspect.signature(item.function).parameters)
        early = [name for name in names if name in runs]  # runs are keyed by their fixtures' names
        try:
            assert not hasattr(item, "callspec"), "it is parametrized"
            given = {n: request.getfixturevalue(n) for n in names if n != "tmp_path" and n not in early}
        except (Exception, pytest.fail.Exception) as e:  # (a scope mismatch is pytest's Failed)
            raise pytest.UsageError(
                f"{item.nodeid} is marked ahead, but {e}: an ahead test asks for tmp_path, the session's "
                "runs and session-scoped fixtures only (tests/conftest.py: _ahead)"
            ) from None

        def body(tmp, function=item.function, names=names, given=given, early=early):
            args = {**given, "tmp_path": tmp, **{name: runs[name].result() for name in early}}
            return function(**{name: args[name] for name in names})

        tmp = tmp_path_factory.mktemp(item.name[:40])
        out[f"ahead:{item.nodeid}"] = streams[i % AHEAD_STREAMS] = Background(
            _after, streams[i % AHEAD_STREAMS], body, tmp
        )
    return out


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """A test marked ahead reports what its body did in the background (raised, or returned)."""
    if pyfuncitem.get_closest_marker("ahead") is None:
        return None
    pyfuncitem.funcargs["early_runs"][f"ahead:{pyfuncitem.nodeid}"].result()
    return True


def _after(previous, run, tmp):
    """`run(tmp)` once `previous` (a Background, or None) has ended; its result or failure is its
    own tests' to report."""
    if previous is not None:
        previous.join()
    return run(tmp)


@pytest.fixture(scope="session", autouse=True)
def early_runs(request, tmp_path_factory):
    """{name: Background} of the long workflow runs the selected tests need, started before the first test.

    The two-dataset run overlaps the unit tests; the crash test's killed runs (one core) start when
    it is done and overlap the tests after it; the Slurm run (which mostly waits on Slurm's queue)
    overlaps everything; the CHAINED runs go one after another beside them, and the bodies of the
    tests marked ahead after those (_ahead). Most unit tests use one core of two: the suite takes
    minutes less than running them in turn. When the session ends
    (passed, failed or interrupted) a Slurm cluster the session started is stopped again.
    """
    wanted = {name for item in request.session.items for name in getattr(item, "fixturenames", ())}
    runs = {}
    if {"two_datasets", "slurm_run", "crash"} & wanted:
        runs["two_datasets"] = Background(run_two_datasets, tmp_path_factory.mktemp("wf"))
    if "crash" in wanted:
        from test_crash import crash_run

        reference = runs["two_datasets"]

        def crash_after_the_reference(tmp):
            return crash_run(reference.result()[0], tmp)

        runs["crash"] = Background(crash_after_the_reference, tmp_path_factory.mktemp("crash"))
    previous = None
    for name in [name for name in CHAINED if name in wanted]:
        module, function = CHAINED[name]
        run = getattr(importlib.import_module(module), function)
        runs[name] = previous = Background(_after, previous, run, tmp_path_factory.mktemp(name))
    if "slurm_run" in wanted:
        from test_slurm import run_on_slurm

        runs["slurm_run"] = Background(
            run_on_slurm, tmp_path_factory.mktemp("slurm"), request.getfixturevalue("s3")
        )
    try:
        ahead = [item for item in request.session.items if item.get_closest_marker("ahead")]
        runs.update(_ahead(ahead, previous, runs, request, tmp_path_factory))
        yield runs
    finally:
        stop_process_groups()  # runs still going when the session ends early (failed, interrupted)
        if "slurm_run" in runs:
            from test_slurm import stop_the_cluster_this_session_started

            runs["slurm_run"].join(timeout=5)
            stop_the_cluster_this_session_started()


@pytest.fixture(scope="session")
def two_datasets(early_runs):
    """(work dir, CompletedProcess, dirty manifest) of run_two_datasets."""
    return early_runs["two_datasets"].result()


@pytest.fixture(scope="session")
def crash(early_runs):
    """What test_crash.crash_run gathered (it starts once the two-dataset run is done)."""
    return early_runs["crash"].result()


@pytest.fixture(scope="session")
def webdataset_run(early_runs):
    """test_corpora.run_webdataset_and_manifest's run."""
    return early_runs["webdataset_run"].result()


@pytest.fixture(scope="session")
def planned_demo(early_runs):
    """(work dir, CompletedProcess) of test_plan.run_plan: `snakemake plan` on the demo."""
    return early_runs["planned_demo"].result()


@pytest.fixture(scope="session")
def long_form_run(early_runs):
    """(work dir, recordings folder, listing) of test_segment.run_long_form."""
    return early_runs["long_form_run"].result()


@pytest.fixture(scope="session")
def split_run(early_runs):
    """(work dir, config) of test_splits.run_splits."""
    return early_runs["split_run"].result()


@pytest.fixture(scope="session")
def slurm_run(early_runs):
    """(work dir, snakemake output, Slurm state dir, real profile) of test_slurm.run_on_slurm."""
    return early_runs["slurm_run"].result()
