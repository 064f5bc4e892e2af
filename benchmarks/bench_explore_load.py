"""The explorer under a careless or hostile neighbour: 50 idle connections and 64 kB filters in flight
while a browser opens its first page and filters, over a catalog of a million rows.

The run and the server are bench_explore's (a synthetic catalog of --rows rows and a tenth as many
dropped records; the real server in its own process, as `sharflow explore` starts it). While
--idle connections that never send a byte are held open and --senders threads send, over and over,
a filter of 64 kB (the longest request line the server reads: a run of spaces between two words,
the input the old filter splitter spent 48 s of the GIL on), this process times what a browser does
first (the page, its script and style, the dataset list, the first page of cuts and the reject
reasons) and a filter, each the median of 5. The floor is the same requests measured in this run with
nothing else in flight: ratio = under load / floor. The bar is 1 s for each. The server's memory
(VmRSS, VmHWM) and how many of the long filters it refused (each a 400 naming the length cap) are
printed.

    .venv/bin/python benchmarks/bench_explore_load.py [--rows 1000000] [--idle 50] [--senders 1]
"""

import argparse
import http.client
import socket
import statistics
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

from bench_explore import FILTER, REPEATS, memory_mb, start, write_run

LONG_FILTER = 64 * 1024 - 200  # characters: the request line stays under http.server's 65,536


def get(address: str, path: str, token: str | None) -> tuple[int, bytes, float]:
    host, port = address.rsplit(":", 1)
    began = time.perf_counter()
    connection = http.client.HTTPConnection(host, int(port), timeout=300)
    try:
        headers = {"Authorization": f"token {token}"} if token else {}
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, response.read(), time.perf_counter() - began
    finally:
        connection.close()


def browser(address: str, token: str) -> dict[str, float]:
    """Median seconds of a browser's first requests and of a filter."""
    query = urllib.parse.quote(FILTER)
    steps = {
        "the page": f"/?token={token}",
        "its script": "/static/app.js",
        "its style": "/static/style.css",
        "the datasets": "/api/datasets",
        "the first page of cuts": "/api/cuts?dataset=big&page=0",
        "the reject reasons": "/api/rejects?dataset=big",
        f"filter {FILTER}": f"/api/cuts?dataset=big&filter={query}",
    }
    out = {}
    for name, path in steps.items():
        times = []
        for _ in range(REPEATS):
            status, _, seconds = get(address, path, token)
            assert status == 200, (name, status)
            times.append(seconds)
        out[name] = statistics.median(times)
    return out


class Neighbour:
    """`idle` silent connections held open and `senders` threads sending 64 kB filters until stopped."""

    def __init__(self, address: str, token: str, idle: int, senders: int):
        self.address, self.token = address, token
        host, port = address.rsplit(":", 1)
        self.sockets = [socket.create_connection((host, int(port)), timeout=300) for _ in range(idle)]
        self.stop = threading.Event()
        self.refused, self.other = 0, []
        self.threads = [threading.Thread(target=self._send, daemon=True) for _ in range(senders)]
        for thread in self.threads:
            thread.start()

    def _send(self) -> None:
        path = "/api/cuts?dataset=big&filter=a" + "+" * LONG_FILTER + "b"
        while not self.stop.is_set():
            status, body, _ = get(self.address, path, self.token)
            if status == 400 and b"at most" in body:
                self.refused += 1
            else:
                self.other.append(status)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()
        for s in self.sockets:
            s.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--idle", type=int, default=50)
    parser.add_argument("--senders", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        config = write_run(folder, args.rows)
        server, address, token = start(folder, config)
        try:
            browser(address, token)  # the tables warm, the first answers made once
            floor = browser(address, token)
            neighbour = Neighbour(address, token, args.idle, args.senders)
            try:
                time.sleep(0.5)  # the long filters are in flight before the browser asks
                loaded = browser(address, token)
                memory = memory_mb(server.pid)
            finally:
                neighbour.close()
            after = get(address, "/api/datasets", token)[0]
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(
        f"{args.rows:,} rows; {args.idle} idle connections and {args.senders} senders of "
        f"{LONG_FILTER + 2:,}-character filters in flight ({neighbour.refused} refused with the "
        f"length cap, other answers: {sorted(set(neighbour.other)) or 'none'})"
    )
    print(f"  {'request':<36} {'at rest':>8} {'loaded':>8}  ratio")
    for name, seconds in loaded.items():
        mark = "ok" if seconds <= 1.0 else "OVER 1 s"
        print(f"  {name:<36} {floor[name]:7.3f}s {seconds:7.3f}s  {seconds / floor[name]:5.1f}x  {mark}")
    print(f"after the neighbour left: /api/datasets answered {after}")
    print(f"server memory: VmRSS {memory['VmRSS']:.0f} MB, peak VmHWM {memory['VmHWM']:.0f} MB")


if __name__ == "__main__":
    main()
