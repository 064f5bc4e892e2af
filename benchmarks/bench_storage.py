"""Object storage: requests per object and time, in and out, against a local floor in the same run.

A real S3 API (moto's server, installed with the test extras) on 127.0.0.1; every request the
client sends is counted (sharflow.core.storage.RequestCount).

- **In**: the demo corpus uploaded; prepare reads it from `s3://` with a cold object cache (headers
  probed on the local copies it downloads), then a later stage's reading of every record's span
  from the warm cache, each against the same from the local folder.
- **Out**: `--files` shard-sized files plus two multipart-sized ones published (sharflow.publish),
  then published again unchanged, then again with 1 % of the files changed; requests per published
  object and time, against a floor: copying the same files to another local folder.

Loopback to an in-process Python server says what the code asks of a store (requests, bytes), not
what a real store's latency costs: multiply the requests by your store's per-request latency.

    .venv/bin/python benchmarks/bench_storage.py [--files 1000] [--kib 256]
"""

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from sharflow.core import storage  # noqa: E402
from sharflow.core.audio import read_span, resolve_audio_path  # noqa: E402
from sharflow.prepare.job import prepare_dataset  # noqa: E402
from sharflow.publish import PublishSettings, publish  # noqa: E402
from testkit import DEMO, S3Server, random_files, upload_demo  # noqa: E402


def timed(fn, *args, **kwargs):
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t


def prepare(tmp: Path, name: str, manifest: str, root: str) -> dict:
    out = tmp / name
    return prepare_dataset(
        manifest,
        prepared=str(out / "prepared.jsonl"),
        rejected_dir=str(out / "rejected"),
        stats=str(out / "stats.json"),
        dataset="demo",
        audio_root=root,
        workers=1,
    )


def read_all(records: list[dict], root: str) -> None:
    for r in records:
        read_span(resolve_audio_path(root, r["audio_filepath"])[0], r["offset"], r["duration"])


def bench_in(tmp: Path, s3: S3Server) -> None:
    demo = upload_demo(s3, "bench-corpus")
    objects = len(list((DEMO / "audio").rglob("*.flac"))) + 1
    _, local_s = timed(prepare, tmp, "local", str(DEMO / "manifest.json"), str(DEMO / "audio"))
    with storage.RequestCount() as n:
        _, remote_s = timed(prepare, tmp, "remote", demo["manifest"], demo["audio_root"])
    print(f"in: prepare of the demo ({objects} objects: {objects - 1} audio files and the manifest)")
    print(f"  local folder        {local_s:7.2f} s")
    print(
        f"  s3, cold cache      {remote_s:7.2f} s  ({remote_s / local_s:.1f}x)  requests {n.total}: "
        f"{json.dumps(n.by_operation, sort_keys=True)} = {n.total / objects:.2f} per object"
    )
    records = [json.loads(line) for line in (tmp / "local" / "prepared.jsonl").read_text().splitlines()]
    _, floor = timed(read_all, records, str(DEMO / "audio"))
    storage.head.cache_clear()  # a later stage is another process: it asks for each ETag again
    with storage.RequestCount() as n:
        _, warm = timed(read_all, records, demo["audio_root"])
    print(
        f"  a later stage reading every span ({len(records)} records): local {floor:.2f} s, "
        f"s3 warm cache {warm:.2f} s ({warm / floor:.1f}x), requests {n.total}: "
        f"{json.dumps(n.by_operation, sort_keys=True)} = {n.total / (objects - 1):.2f} per object"
    )


def copy_all(files: list[str], dest: Path) -> None:
    dest.mkdir()
    for f in files:
        shutil.copyfile(f, dest / Path(f).name)


def bench_out(tmp: Path, s3: S3Server, count: int, kib: int) -> None:
    os.chdir(tmp)
    files = random_files(Path("shar"), count, kib * 1024, 0) + random_files(Path("big"), 2, 40 << 20, 1)
    total = sum(os.path.getsize(f) for f in files)
    _, floor = timed(copy_all, files, tmp / "copy")
    url = s3.bucket("bench-training") + "/run"
    settings = PublishSettings(url, part_mb=8, workers=8)
    print(f"out: {len(files)} files, {total / 1e6:.0f} MB ({count} x {kib} KiB, 2 x 40 MiB in 8 MiB parts)")
    print(f"  floor: local copy {floor:.2f} s")
    first, t1 = timed(publish, settings, files, "published.json")
    print(
        f"  publish, fresh       {t1:6.2f} s ({t1 / floor:.1f}x the floor)  requests {first['requests']} "
        f"= {first['requests'] / len(files):.3f} per object  {json.dumps(first['requests_by_operation'])}"
    )
    again, t2 = timed(publish, settings, files, "published.json")
    print(
        f"  publish, unchanged   {t2:6.2f} s  uploaded {again['uploaded']}  requests {again['requests']} "
        f"= {again['requests'] / len(files):.4f} per object"
    )
    changed = files[: max(1, count // 100)]
    for f in changed:
        Path(f).write_bytes(os.urandom(kib * 1024))
    third, t3 = timed(publish, settings, files, "published.json")
    print(
        f"  publish, 1 % changed {t3:6.2f} s  uploaded {third['uploaded']}  requests {third['requests']} "
        f"= {third['requests'] / len(files):.4f} per object  {json.dumps(third['requests_by_operation'])}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--kib", type=int, default=256)
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="bench-storage-") as tmp:
        s3 = S3Server(Path(tmp) / "objects").start()
        try:
            bench_in(Path(tmp), s3)
            bench_out(Path(tmp), s3, args.files, args.kib)
        finally:
            os.chdir(REPO)
            s3.stop()


if __name__ == "__main__":
    main()
