"""The explorer over a catalog of a million rows: how long the first page and a filter take, and the
server's memory.

A synthetic run is explored by the real server, in its own process (`python -m sharflow.explore.cli
explore`: what `sharflow explore` runs). The run is results/big/catalog.parquet, 10^6 rows of the
catalog's columns written as the catalog job writes them (row groups of 65,536, dictionary-encoded
strings), and a tenth as many again as records the quality filter dropped, with their reject and
metrics files. The server reads the catalogs before it says it is ready, and that time is printed.
From then on, requests are timed over HTTP from this process, each the median of 5 but the first:
the first page (the first request), the first page again, a filter on a metric, the same sorted by
duration, page 1,000 of it, the row of the table's last record (a dropped one: a scan of the whole
cut_id column), and a threshold moved. The floor, measured in this run, is pyarrow itself reading
the same catalog and answering the same filter and page in this process (no HTTP, no JSON): ratio =
served / floor. The server's resident memory (VmRSS, VmHWM) is read from /proc after the requests.

    .venv/bin/python benchmarks/bench_explore.py [--rows 1000000]
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from sharflow.core.layout import DatasetFiles
from sharflow.core.metrics import CATALOG_METRICS
from sharflow.dataset.catalog import ROW_GROUP_ROWS, STRING

REPEATS = 5
FILTER = "dnsmos_bak < 3.0"
DROPPED_SHARE = 0.1


def catalog(rows: int, seed: int = 0) -> pa.Table:
    """`rows` catalog rows with varied values: 2,000 speakers, five splits, 0.5 to 20 s."""
    rng = np.random.default_rng(seed)
    speakers = np.array([f"| Language:en Dataset:big Speaker:s{i:04d} |" for i in range(2000)])
    splits = np.array(["train", "dev_seen", "dev_unseen", "test_seen", "test_unseen"])
    columns = {
        "cut_id": pa.array([f"rec{i:08d}-0-{i % 977}" for i in range(rows)]),
        "shard": pa.array(np.arange(rows) // 4096, pa.int32()),
        "position": pa.array(np.arange(rows) % 4096, pa.int32()),
        "split": pa.array(splits[rng.choice(5, rows, p=[0.9, 0.025, 0.025, 0.025, 0.025])]).cast(STRING),
        "speaker": pa.array(speakers[rng.integers(0, 2000, rows)]).cast(STRING),
        "language": pa.array(np.full(rows, "en")).cast(STRING),
        "source_file": pa.array([f"tars/shard-{i // 2000:05d}.tar#{i}.mp3" for i in range(rows)]),
        "offset": pa.array(np.zeros(rows)),
        "duration": pa.array(rng.uniform(0.5, 20.0, rows)),
        "sample_rate": pa.array(np.full(rows, 24000), pa.int32()),
        "text_chars": pa.array(rng.integers(5, 300, rows), pa.int32()),
        "context_similarity": pa.array(rng.uniform(0.6, 1.0, rows).astype(np.float32)),
    }
    for metric in CATALOG_METRICS:
        columns[metric] = pa.array(rng.uniform(1.0, 5.0, rows).astype(np.float32))
    return pa.table(columns)


def write_run(folder: Path, rows: int) -> Path:
    """A run folder with the synthetic catalog of dataset `big`, its dropped records and a config."""
    files = DatasetFiles(str(folder / "results" / "big"))
    Path(files.catalog).parent.mkdir(parents=True)
    pq.write_table(catalog(rows), files.catalog, row_group_size=ROW_GROUP_ROWS)
    dropped = int(rows * DROPPED_SHARE)
    Path(files.quality_rejected).mkdir(parents=True)
    with (
        open(files.quality_metrics, "w") as metrics,
        open(f"{files.quality_rejected}/quality_dnsmos_bak.jsonl", "w") as rejects,
    ):
        for line in range(1, dropped + 1):
            record = {
                "audio_filepath": f"dropped/{line}.flac",
                "offset": 0.0,
                "duration": 3.0,
                "text": "x",
                "speaker": "s",
            }
            metrics.write(json.dumps({"line": line, **dict.fromkeys(CATALOG_METRICS, 2.0)}) + "\n")
            rejects.write(
                json.dumps(
                    {
                        "line": line,
                        "reason": "quality_dnsmos_bak",
                        "detail": "",
                        "original": json.dumps(record),
                    }
                )
                + "\n"
            )
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump({"datasets": {"big": {"manifest": "m.json", "audio_root": "audio"}}}))
    return config


def start(folder: Path, config: Path) -> tuple[subprocess.Popen, str, str]:
    """The explorer of the run in `folder`, started as `sharflow explore` starts it: (process, its
    host:port, its token), once it has printed its link (the catalogs read)."""
    cmd = [
        sys.executable,
        "-m",
        "sharflow.explore.cli",
        "explore",
        "--run",
        str(folder),
        "--configfile",
        str(config),
        "--port",
        "0",
    ]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    link = server.stdout.readline().split("http://", 1)[1].split()[0]
    return server, link.split("/", 1)[0], link.split("token=", 1)[1]


def timed(address: str, path: str, token: str) -> tuple[float, dict]:
    began = time.perf_counter()
    asked = urllib.request.Request(f"http://{address}{path}", headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(asked, timeout=120) as response:
        body = response.read()
    return time.perf_counter() - began, json.loads(body) if path.startswith("/api/") else body


def median(address: str, path: str, token: str) -> float:
    return statistics.median(timed(address, path, token)[0] for _ in range(REPEATS))


def memory_mb(pid: int) -> dict[str, float]:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {
        line.split(":")[0]: int(line.split()[1]) / 1024
        for line in status
        if line.startswith(("VmRSS", "VmHWM"))
    }


def floor(path: str) -> dict[str, float]:
    """pyarrow alone: read the catalog, then filter and take the first page (median of REPEATS)."""
    began = time.perf_counter()
    table = pq.read_table(path)
    read = time.perf_counter() - began
    times = []
    for _ in range(REPEATS):
        began = time.perf_counter()
        kept = table.filter(pc.field("dnsmos_bak") < pa.scalar(3.0, pa.float32()))
        kept.slice(0, 50).to_pylist()
        times.append(time.perf_counter() - began)
    return {"read": read, "filter": statistics.median(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        began = time.perf_counter()
        config = write_run(folder, args.rows)
        print(f"catalog of {args.rows:,} rows written in {time.perf_counter() - began:.1f} s")
        bare = floor(str(folder / "results" / "big" / "catalog.parquet"))
        began = time.perf_counter()
        server, address, token = start(folder, config)
        try:
            ready = time.perf_counter() - began
            first, _ = timed(address, "/api/cuts?dataset=big&page=0", token)
            query = urllib.parse.quote(FILTER)
            dropped = urllib.parse.quote("status != kept")
            newest = f"/api/cuts?dataset=big&filter={dropped}&sort=cut_id&desc=1&size=1"
            last = timed(address, newest, token)[1]["rows"][0]["cut_id"]
            figures = {
                "first page (the first request)": first,
                "first page again": median(address, "/api/cuts?dataset=big&page=0", token),
                f"filter {FILTER}": median(address, f"/api/cuts?dataset=big&filter={query}", token),
                "the same, sorted by duration": median(
                    address, f"/api/cuts?dataset=big&filter={query}&sort=duration", token
                ),
                "its page 1,000": median(
                    address, f"/api/cuts?dataset=big&filter={query}&sort=duration&page=1000&size=20", token
                ),
                "a dropped record's row (the last)": median(
                    address, f"/api/cut?dataset=big&id={last}", token
                ),
                "a threshold moved": median(
                    address, "/api/threshold?dataset=big&metric=dnsmos_bak&value=3.1", token
                ),
            }
            memory = memory_mb(server.pid)
            total = timed(address, f"/api/cuts?dataset=big&filter={query}", token)[1]["total"]
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(
        f"server ready in {ready:.2f} s (started, the catalog and the dropped records read: "
        f"{ready / bare['read']:.1f}x the floor's read); {total:,} rows pass the filter"
    )
    print(
        f"floor (pyarrow in this process): read {bare['read']:.3f} s, "
        f"filter + first page {bare['filter']:.3f} s"
    )
    for name, seconds in figures.items():
        base = bare["filter"]
        print(
            f"  {name:<40} {seconds:7.3f} s   {seconds / base:5.1f}x floor   "
            + ("ok" if seconds <= 1.0 else "OVER 1 s")
        )
    print(
        f"server memory: VmRSS {memory['VmRSS']:.0f} MB, peak VmHWM {memory['VmHWM']:.0f} MB "
        f"({memory['VmHWM'] * 2**20 / args.rows:.0f} B a row)"
    )


if __name__ == "__main__":
    main()
