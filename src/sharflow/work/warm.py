"""Warm starts: a job of a local run is a fork of one process that has imported the frameworks already.

A new interpreter spends ~10 CPU-seconds importing NeMo (Lightning, torchmetrics, the TTS and ASR
collections) before a codes, text, quality or segment job does any work, and a run of small jobs
(a laptop's, the demo's) is mostly that. Each Snakemake process that runs jobs here names a folder
of its own in $SHARFLOW_WARM (sharflow.workflow.engine.warm_starts, from rules/common.smk). The first
job that imports NeMo starts a server there (`python -m sharflow.work.warm FOLDER`) that imports
`PRELOAD` once; every job after it, light or heavy, hands itself over (`hand_over`, the first line of
each workflow script): the server forks, and the fork runs the job's own script file with the job's
arguments, folder, environment, thread counts and standard streams, while the job's process waits
for it, passes on the signals it is sent and exits as it did. A job that asks before the server is
ready runs itself (a light one) or waits for it (a heavy one); a job with GPUs always runs itself (no
CUDA state may cross a fork). The fork stays in the run's process group (killing the run kills it)
and kills itself when the job's process is gone; the server ends with the Snakemake process that
named its folder.
What a job writes is the same either way (tests: the crash runs are cold, and byte-identical to the
warm reference run). $SHARFLOW_WARM_STARTS=0 turns warm starts off; $SHARFLOW_WARM_SHARED names a
server that the local runs on one machine share (the test suite's, started by `start`).
"""

import contextlib
import fcntl
import importlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

ENV = "SHARFLOW_WARM"  # the folder of the server of the Snakemake process running this job
OFF = "SHARFLOW_WARM_STARTS"  # "0": every job starts cold
SHARED = "SHARFLOW_WARM_SHARED"  # a server's folder that the local runs on this machine share (start)
PRELOAD = (
    "torch",
    "lhotse",
    "snakemake.script",
    "nemo.collections.tts.models",
    "nemo.collections.asr.models",
    "nemo.collections.tts.data.text_to_speech_dataset_lhotse",
    "nemo_text_processing.text_normalization.normalize",
    "sharflow.codes.shard",
    "sharflow.text.job",
    "sharflow.quality.part",
    "sharflow.context.part",
    "sharflow.shar.shard",
)
READY_SECONDS = 600.0  # a heavy job waits this long for the server's imports, then runs cold
_IN_FORK = {"job": False}  # True in a fork running a job: its own hand_over returns at once


def folder_for(workdir: str, owner: int) -> str:
    """The warm server's folder of Snakemake process `owner` running in `workdir`."""
    return os.path.join(workdir, ".snakemake", "sharflow-warm", str(owner))


def hand_over(script: dict, heavy: bool = False) -> None:
    """Run this job (a workflow script, `script` its globals) as a fork of the run's warm server and exit
    as the fork did; return (the job runs in this process) when warm starts are off, in a fork already,
    in a spawned worker (which runs the script file as __mp_main__, without Snakemake's `snakemake`), on
    GPUs, or without a server ready (a heavy job starts one and waits for it)."""
    folder = os.environ.get(ENV)
    snakemake = script.get("snakemake")
    if not folder or _IN_FORK["job"] or script.get("__name__") != "__main__" or snakemake is None:
        return
    if os.environ.get(OFF) == "0" or int(getattr(snakemake.resources, "gpu", 0) or 0) > 0:
        return
    conn = _connect(folder)
    if conn is None and heavy:
        conn = _start_server(folder)
    if conn is None:
        return
    with conn:
        pid = _request(conn)
        if pid is None:
            return
        code = _wait(conn, pid)
    sys.stdout.flush()
    sys.stderr.flush()
    if code < 0:  # ended by a signal: end by the same one
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def _socket_path(fd: int) -> str:
    return f"/proc/self/fd/{fd}/socket"  # a short name for a folder of any depth (sun_path: 108 B)


def _connect(folder: str) -> socket.socket | None:
    try:
        fd = os.open(folder, os.O_PATH)
    except OSError:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(_socket_path(fd))
        return conn
    except OSError:
        conn.close()
        return None
    finally:
        os.close(fd)


def start(folder: str, new_session: bool = False) -> int:
    """Start the server of `folder` (its name: the pid of the process it ends with) unless one runs there
    already (one caller starts it, under a lock); its pid. A run's server stays in the run's process
    group; a server that several runs share (a test session's: $SHARFLOW_WARM_SHARED) has a session of
    its own, as no run's end may end it."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    with open(os.path.join(folder, "start.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = Path(folder, "server.pid")
        running = int(started.read_text() or 0) if started.exists() else 0
        if _alive(running):
            return running
        with open(os.path.join(folder, "server.log"), "ab") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "sharflow.work.warm", folder],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                close_fds=True,
                start_new_session=new_session,
            )
        started.write_text(str(server.pid))
        return server.pid


def _start_server(folder: str) -> socket.socket | None:
    """Start the folder's server unless another job has, then wait until it answers."""
    server = start(folder)
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        conn = _connect(folder)
        if conn is not None or not _alive(server):
            return conn  # None: the server ended without answering (its imports failed: server.log)
        time.sleep(0.05)
    return None


def _request(conn: socket.socket) -> int | None:
    """Send this job (its script, arguments, folder, environment, standard streams); the fork's pid."""
    job = {
        "script": os.path.abspath(sys.argv[0]),
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "client": os.getpid(),
    }
    data = json.dumps(job).encode()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        socket.send_fds(conn, [struct.pack("!Q", len(data)) + data], [0, 1, 2])
        line = _read_line(conn)
    except OSError:
        return None
    return int(line) if line else None


def _wait(conn: socket.socket, pid: int) -> int:
    """The fork's exit status; the signals this process is sent are passed on to it meanwhile."""

    def pass_on(signum, frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, pass_on)
    line = _read_line(conn)
    return int(line) if line else 1  # the server gone: the fork with it


def _read_line(conn: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = conn.recv(64)
        except InterruptedError:
            continue
        if not chunk:
            return ""
        data += chunk
    return data.decode().strip()


# ---- the server ------------------------------------------------------------------------------------


def serve(folder: str, preload: tuple[str, ...] = PRELOAD) -> None:
    """Import `preload`, then fork a job for each request until the process that owns the folder (its
    name: the Snakemake process that named it) is gone."""
    # Ctrl-C reaches the run's whole process group: the forks take it as their jobs would, the server
    # ends with its owner (not before the forks it serves)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        owner = os.pidfd_open(int(os.path.basename(folder)))  # readable once that process is gone
        for name in preload:
            importlib.import_module(name)
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            raise RuntimeError("CUDA was initialised by an import: no job may be forked from here")
    except Exception:
        traceback.print_exc()  # into server.log; the jobs run cold
        return
    fd = os.open(folder, os.O_PATH)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(_socket_path(fd))
    listener.listen(64)
    jobs: dict[int, socket.socket] = {}
    try:
        while True:
            ready = select.select([listener, owner], [], [], 0.2)[0]
            if owner in ready:
                break
            if listener in ready:
                conn, _ = listener.accept()
                try:
                    _fork_job(conn, listener, jobs)
                except Exception:  # a client gone mid-request: the others are served as before
                    traceback.print_exc()
                    conn.close()
            reap(jobs)
    finally:
        listener.close()  # no new job from here; those going end as their processes do
        with contextlib.suppress(OSError):
            os.unlink(_socket_path(fd))
        os.close(fd)
    while jobs:
        time.sleep(0.2)
        reap(jobs)
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(folder, "server.pid"))


def _alive(pid: int) -> bool:
    if pid <= 0:  # os.kill(0, 0) would ask about this process group
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fork_job(conn: socket.socket, listener: socket.socket, jobs: dict) -> None:
    uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
    if uid != os.getuid():  # the folder is the user's own (0700): this is a second lock
        conn.close()
        return
    head, fds, _, _ = socket.recv_fds(conn, 8, 3)
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        raise ConnectionError(f"a request came with {len(fds)} streams, not 3")
    data = _read_exactly(conn, head, 8)
    job = json.loads(_read_exactly(conn, b"", struct.unpack("!Q", data)[0]))
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        listener.close()
        for other in jobs.values():
            other.close()
        conn.close()
        _run_job(job, fds)
    for fd in fds:
        os.close(fd)
    conn.sendall(f"{pid}\n".encode())
    jobs[pid] = conn


def _read_exactly(conn: socket.socket, data: bytes, size: int) -> bytes:
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the client left before its request was whole")
        data += chunk
    return data


def reap(jobs: dict) -> None:
    """Send each fork of `jobs` ({pid: its client's connection}) that ended its exit status, as Popen
    gives it (negative: the signal that ended it)."""
    while jobs:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        conn = jobs.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            conn.close()


def _run_job(job: dict, fds: list[int]) -> None:
    """In the fork: become the job (streams, folder, environment, arguments), run its script as
    __main__, then exit as a process running it would (never returns)."""
    code = 1
    try:
        _IN_FORK["job"] = True
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a new interpreter has it
        _die_with(job["client"])
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        os.environ.pop(ENV, None)  # its own hand_over returns; so do its workers'
        take_threads(job["env"])
        sys.argv = job["argv"]
        import runpy

        runpy.run_path(job["script"], run_name="__main__")
        code = 0
    except SystemExit as e:
        code = exit_code(e)
    except BaseException:
        traceback.print_exc()
    finally:
        exit_as(code)


def take_threads(env: dict) -> int:
    """Size the math libraries' thread pools for the job whose environment is `env`, as a new interpreter
    would: OpenMP, MKL and OpenBLAS read $OMP_NUM_THREADS & co. (which Snakemake sets to the rule's
    threads) once, when they load, and in a fork they were loaded by the server, with whatever the
    process that started it had (the session of a test suite: all cores). Returns the count."""
    value = env.get("OMP_NUM_THREADS", "")
    threads = int(value) if value.isdigit() and int(value) > 0 else len(os.sched_getaffinity(0))
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=threads)  # every BLAS and OpenMP library this process has loaded
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)  # torch's own intra-op pool
    return threads


def exit_code(e: SystemExit) -> int:
    """The exit status an interpreter ending by `e` gives."""
    return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)


def exit_as(code: int) -> None:
    """End a fork as an interpreter ends (its threads, its exit functions, its streams), with status
    `code`; never returns."""
    try:
        threading._shutdown()
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _die_with(client: int) -> None:
    """Kill this fork when the job's process (which Snakemake started and may kill) is gone."""
    pidfd = os.pidfd_open(client)

    def watch():
        select.select([pidfd], [], [])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="sharflow-warm-client").start()


if __name__ == "__main__":
    from sharflow.work import warm  # the module the jobs import, not this __main__ copy of it

    warm.serve(sys.argv[1])
