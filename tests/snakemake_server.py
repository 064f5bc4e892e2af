"""The suite's Snakemake runs, each forked from one process that has imported Snakemake already.

A test starts ~130 Snakemake runs, and each new interpreter spends ~1.5 CPU-seconds importing Snakemake
and loading every executor, storage, report and logger plugin before it reads the Snakefile. This
server (one a session: started by the first run, stopped with the session's runs by
testkit.stop_process_groups) does that once; a run is then a fork of it that
calls Snakemake's own command line (`snakemake.cli.main`) with the run's arguments, environment and
working folder, in a session of its own (so that killing its process group ends it and every job it
started, as for a run started with Popen), with its output in files. The server is never itself a
run: every run starts from the same freshly imported state.

    python snakemake_server.py SOCKET

prints "ready" once it listens on the Unix socket SOCKET, and ends when its standard input closes
(the test session is gone). A client sends one JSON line, {"argv", "env", "cwd", "stdout", "stderr"},
and reads two lines back: the run's pid (once it leads its own session), and its exit status as
Popen gives it (negative: the signal that ended it).
"""

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path

from sharflow.work import warm


def _run(request: dict, started: int) -> None:
    """In the forked child: the run, then exit with its status (never returns)."""
    code = 1
    try:
        os.setsid()
        os.write(started, b"x")
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # the run's TMPDIR (the server's own was cached when it made its folder)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(out, fd)
            os.close(out)
        import snakemake.cli

        sys.argv = [snakemake.cli.__file__, *request["argv"]]
        snakemake.cli.main(request["argv"])
        code = 0
    except SystemExit as e:
        code = warm.exit_code(e)
    except BaseException:
        traceback.print_exc()
    finally:
        warm.exit_as(code)


def _start(conn: socket.socket, listener: socket.socket, runs: dict) -> None:
    """Fork the run `conn` asks for; send its pid once it leads its own session."""
    with conn.makefile("r") as lines:
        request = json.loads(lines.readline())
    started_r, started_w = os.pipe()
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        listener.close()
        conn.close()
        for other in runs.values():
            other.close()
        os.close(started_r)
        _run(request, started_w)
    os.close(started_w)
    os.read(started_r, 1)  # the child's setsid: a kill of its group from now on reaches it
    os.close(started_r)
    conn.sendall(f"{pid}\n".encode())
    runs[pid] = conn


def serve(path: str) -> None:
    import snakemake.cli

    snakemake.cli.get_argument_parser()  # imports and registers every plugin: the cost saved a run
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    runs: dict[int, socket.socket] = {}
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [], 0.05)
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1):
            return  # the session that started this server is gone; its runs are its own to stop
        if listener in ready:
            conn, _ = listener.accept()
            _start(conn, listener, runs)
        warm.reap(runs)


# ---- the client (the test session's side) -----------------------------------------------------------


class ForkedRun:
    """A Popen-like handle (pid, poll, wait, returncode) on a run the server forked."""

    def __init__(self, args: list[str], conn: socket.socket):
        self.args, self.returncode = args, None
        self._conn = conn
        self._lines = conn.makefile("rb", buffering=0)  # unbuffered: select sees the status line
        self.pid = int(self._line())

    def _line(self) -> str:
        line = self._lines.readline()
        if not line:
            raise RuntimeError(f"the suite's Snakemake server ended while running {self.args}")
        return line.decode().strip()

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._conn], [], [], 0)[0]:
            self._finish()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._conn], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._finish()
        return self.returncode

    def _finish(self) -> None:
        self.returncode = int(self._line())
        self._lines.close()
        self._conn.close()


class SnakemakeServer:
    """The session's server (started at the first run, stopped by `stop`), and the warm server that the
    session's runs share (sharflow.work.warm: $SHARFLOW_WARM_SHARED, unless a run's environment names
    another), started beside it: one server's imports for the whole session, not one a run."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="sharflow-snakemake-")
        self.socket = os.path.join(self.folder, "socket")
        self.warm = os.path.join(self.folder, "warm", str(os.getpid()))  # it ends with this session
        self.warm_pid = warm.start(self.warm, new_session=True)
        self.proc = subprocess.Popen(
            [sys.executable, __file__, self.socket], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        ready = self.proc.stdout.readline().strip()
        if ready != "ready":
            self.stop()
            raise RuntimeError(f"the suite's Snakemake server did not start (it said {ready!r})")

    def start(self, cmd: list[str], stdout: Path, stderr: Path, env: dict) -> ForkedRun:
        """Run `cmd` ([python, -m, snakemake, *argv]) as the server's fork, in environment `env` (the
        caller's: testkit.process_group gives testkit.run_environment's)."""
        request = {
            "argv": cmd[3:],
            "env": {warm.SHARED: self.warm, **env},
            "cwd": os.getcwd(),
            "stdout": str(stdout),
            "stderr": str(stderr),
        }
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.socket)
        conn.sendall((json.dumps(request) + "\n").encode())
        return ForkedRun(cmd, conn)

    def stop(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        with contextlib.suppress(ProcessLookupError):  # the warm server and any fork of it left
            os.killpg(self.warm_pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.warm_pid, 0)
        shutil.rmtree(self.folder, ignore_errors=True)


_SERVER: dict[str, SnakemakeServer] = {}
_LOCK = threading.Lock()


def is_snakemake(cmd: list[str]) -> bool:
    return cmd[:3] == [sys.executable, "-m", "snakemake"]


def start(cmd: list[str], stdout: Path, stderr: Path, env: dict) -> ForkedRun:
    """Run the Snakemake command `cmd` as a fork of the session's server (started at the first)."""
    with _LOCK:
        if "server" not in _SERVER:
            _SERVER["server"] = SnakemakeServer()
        server = _SERVER["server"]
    return server.start(cmd, stdout, stderr, env)


def stop() -> None:
    """Stop the session's server, if one was started (its runs are stopped as process groups)."""
    with _LOCK:
        server = _SERVER.pop("server", None)
    if server is not None:
        server.stop()


if __name__ == "__main__":
    serve(sys.argv[1])
