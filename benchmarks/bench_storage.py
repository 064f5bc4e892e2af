"""Object storage: requests, bytes and time, in and out, against a local floor in the same run.

A real S3 API (moto's server, installed with the test extras) on 127.0.0.1; every request the
client sends is counted (sharflow.io.storage.RequestCount; a Snakemake process's through
SHARFLOW_REQUEST_LOG).

- **Emilia-shaped**: `--tars` WebDataset tars of `--per-tar` short samples (`--seconds` of FLAC each,
  `--speakers` voices) on the server. Prepare (each tar one stream), a shar job of one `--shard`-cut
  shard drawn by the plan's seeded shuffle from the whole corpus (its target and a same-speaker
  context each), and a real `snakemake -n` over the corpus: wall, requests by operation, bytes fetched
  against bytes needed (prepare: the tars' bytes; the shar job: the members it reads), and the object
  cache's peak against its bound (containers are never copied into it: 0).
- **In, loose files**: the demo corpus uploaded; prepare reads it from `s3://` with a cold object cache
  (headers probed on the copies it fetches), then a later stage's reading of every record's span,
  warm, and again on a cache bounded at a third of the corpus (copies evicted and fetched again),
  each against the same from the local folder.
- **Out**: `--files` shard-sized files plus two multipart-sized ones published (sharflow.publish),
  then published again unchanged, then again with 1 % of the files changed; requests per published
  object and time, against a floor: copying the same files to another local folder.

Loopback to an in-process Python server says what the code asks of a store (requests, bytes), not
what a real store's latency costs: multiply the requests by your store's per-request latency.

    .venv/bin/python benchmarks/bench_storage.py [--tars 2000] [--per-tar 50] [--shard 4096]
        [--files 1000] [--kib 256] [--only emilia,in,out]
"""

import argparse
import io
import json
import logging
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import soundfile as sf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from sharflow.io import containers, object_cache, storage  # noqa: E402
from sharflow.io.audio import read_span, resolve_audio_path  # noqa: E402
from sharflow.publish import PublishSettings, publish  # noqa: E402
from testkit import (  # noqa: E402
    DEMO,
    S3Server,
    demo_config,
    prepare_demo,
    random_files,
    snakemake_cmd,
    upload_demo,
    write_all,
)


def timed(fn, *args, **kwargs):
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t


def prepare(tmp: Path, name: str, manifest: str, root: str, **settings) -> dict:
    """prepare (testkit.prepare_demo) into tmp/name/prepare: its stats."""
    folder = prepare_demo(tmp / name, manifest=manifest, root=root, **settings)
    return json.loads((folder / "stats.json").read_text())


def ops(n: storage.RequestCount) -> str:
    return json.dumps(n.by_operation, sort_keys=True)


def new_process() -> None:
    """What a later job's process starts from: no listing or HEAD answer, no index in memory."""
    storage.forget_listings()
    containers._url_tar_index.cache_clear()


def short_clips(count: int, seconds: float) -> list[tuple[bytes, float]]:
    """`count` distinct FLAC clips of `seconds` each, cut from the demo's voices: (bytes, duration)."""
    sources = sorted((DEMO / "audio").rglob("*.flac"))
    clips = []
    for i in range(count):
        samples, rate = sf.read(sources[i % len(sources)], dtype="int16")
        n = int(seconds * rate)
        start = (i // len(sources)) * n % max(1, len(samples) - n)
        buffer = io.BytesIO()
        sf.write(buffer, samples[start : start + n], rate, format="FLAC", subtype="PCM_16")
        clips.append((buffer.getvalue(), n / rate))
    return clips


def emilia_corpus(s3: S3Server, bucket: str, tars: int, per_tar: int, seconds: float, speakers: int) -> dict:
    """The tars on the server: {"url", "bytes", "samples"}."""
    url = s3.bucket(bucket)
    clips = short_clips(per_tar, seconds)
    total = 0
    for t in range(tars):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for j, (flac, duration) in enumerate(clips):
                key = f"EN_B{t:06d}_W{j:06d}"
                meta = {
                    "text": f"sample {j} of tar {t}",
                    "duration": duration,
                    "speaker": f"S{(t * 7 + j) % speakers}",
                }
                for name, data in ((f"{key}.json", json.dumps(meta).encode()), (f"{key}.flac", flac)):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        body = buffer.getvalue()
        total += len(body)
        storage.client().put_object(Bucket=bucket, Key=f"EN/EN-B{t:06d}.tar", Body=body)
        if t % 200 == 199:
            print(f"  uploaded {t + 1} tars", flush=True)
    return {"url": url, "bytes": total, "samples": tars * per_tar}


def shard_with_context(records: list[dict], shard: int, path: Path, seed: int = 7) -> Path:
    """`shard` records drawn by a seeded shuffle from all of them (as the shard plan draws), each with
    a same-speaker context from the whole corpus: the one shard a shar job writes."""
    by_speaker: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        by_speaker.setdefault(r["speaker"], []).append(i)
    rng = random.Random(seed)
    lines = []
    for i in sorted(rng.sample(range(len(records)), min(shard, len(records)))):
        same = by_speaker[records[i]["speaker"]]
        c = records[rng.choice([j for j in same if j != i] or same)]
        lines.append(
            {
                **records[i],
                "split": "train",
                "context_audio_filepath": c["audio_filepath"],
                "context_audio_offset": 0.0,
                "context_audio_duration": c["duration"],
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def bench_emilia(
    tmp: Path, s3: S3Server, tars: int, per_tar: int, shard: int, seconds: float, speakers: int
) -> None:
    os.environ["SHARFLOW_CACHE_DIR"] = str(tmp / "sharflow-cache")  # the tar indexes prepare keeps
    cache = Path(os.environ["SHARFLOW_OBJECT_CACHE"])
    print(f"emilia-shaped: {tars} tars x {per_tar} samples of {seconds} s FLAC, {speakers} speakers")
    corpus, upload_s = timed(emilia_corpus, s3, "bench-emilia", tars, per_tar, seconds, speakers)
    print(f"  on the server: {corpus['bytes'] / 1e6:.0f} MB in {upload_s:.0f} s")
    pattern = f"EN/EN-B{{000000..{tars - 1:06d}}}.tar"
    new_process()
    with storage.RequestCount() as n:
        stats, wall = timed(prepare, tmp, "emilia", pattern, corpus["url"], form="webdataset")
    per = n.total / corpus["samples"]
    print(
        f"  prepare        {wall:7.1f} s  {stats['records_out']:,} records "
        f"({stats['records_out'] / wall:,.0f}/s)  "
        f"requests {n.total:,} {ops(n)} = {per:.4f} per sample; fetched {n.bytes / 1e6:,.1f} MB of "
        f"{corpus['bytes'] / 1e6:,.1f} MB ({n.bytes / corpus['bytes']:.3f}x the tars' bytes)"
    )
    records = [
        json.loads(x) for x in (tmp / "emilia" / "prepare" / "prepared.jsonl").read_text().splitlines()
    ]
    ctx = shard_with_context(records, shard, tmp / "with_context.jsonl")
    chosen = [json.loads(x) for x in ctx.read_text().splitlines()]
    needed = sum(
        containers.tar_index(f"{corpus['url']}/{r[k].split('#')[0]}")[r[k].split("#")[1]][1]
        for r in chosen
        for k in ("audio_filepath", "context_audio_filepath")
    )
    drawn = {r[k].split("#")[0] for r in chosen for k in ("audio_filepath", "context_audio_filepath")}
    new_process()
    with storage.RequestCount() as n:
        _, wall = timed(write_all, tmp / "emilia-shar", ctx, shard_size=len(chosen), root=corpus["url"])
    whole = sum(1 for op, _, span in n.requests if op == "GetObject" and not span)
    print(
        f"  a shar job     {wall:7.1f} s  {len(chosen):,} cuts from {len(drawn):,} tars  "
        f"requests {n.total:,} "
        f"{ops(n)} = {n.total / len(chosen):.2f} per cut, {whole} of a whole object; fetched "
        f"{n.bytes / 1e6:,.1f} MB for {needed / 1e6:,.1f} MB of members read ({n.bytes / needed:.3f}x)"
    )
    config = demo_config()
    config["datasets"] = {
        "emilia": {"format": "webdataset", "manifest": pattern, "audio_root": corpus["url"]}
    }
    log = tmp / "dry-run-requests.tsv"
    cmd = snakemake_cmd(tmp / "dry-run", config, "-n", "--quiet")
    t = time.perf_counter()
    proc = subprocess.run(
        cmd, env={**os.environ, storage.REQUEST_LOG: str(log)}, capture_output=True, text=True
    )
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"the dry run failed:\n{proc.stderr[-3000:]}")
    sent = [line.split("\t")[0] for line in log.read_text().splitlines()] if log.exists() else []
    counts = {op: sent.count(op) for op in sorted(set(sent))}
    print(
        f"  a dry run      {wall:7.1f} s  requests {len(sent)} {json.dumps(counts)} for {tars} tars "
        f"({len(sent) / tars:.4f} per tar)"
    )
    print(
        f"  object cache   peak {object_cache.peak(cache) / 1e6:.1f} MB of a "
        f"{object_cache.bound() / 2**30:.0f} GiB bound "
        "(containers are read by range, never copied)"
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
    records = [
        json.loads(line) for line in (tmp / "local" / "prepare" / "prepared.jsonl").read_text().splitlines()
    ]
    _, floor = timed(read_all, records, str(DEMO / "audio"))
    storage.head.cache_clear()  # a later stage is another process: it asks for each ETag again
    with storage.RequestCount() as n:
        _, warm = timed(read_all, records, demo["audio_root"])
    print(
        f"  a later stage reading every span ({len(records)} records): local {floor:.2f} s, "
        f"s3 warm cache {warm:.2f} s ({warm / floor:.1f}x), requests {n.total}: "
        f"{json.dumps(n.by_operation, sort_keys=True)} = {n.total / (objects - 1):.2f} per object"
    )
    corpus = sum(p.stat().st_size for p in (DEMO / "audio").rglob("*.flac"))
    bounded = tmp / "bounded-cache"
    os.environ.update(SHARFLOW_OBJECT_CACHE=str(bounded), SHARFLOW_OBJECT_CACHE_SIZE=str(corpus // 3))
    new_process()
    try:
        with storage.RequestCount() as n:
            _, small = timed(read_all, records, demo["audio_root"])
    finally:
        os.environ.pop("SHARFLOW_OBJECT_CACHE_SIZE")
    print(
        f"  the same on a cache bounded at a third of the corpus ({corpus // 3 / 1e6:.1f} MB): {small:.2f} s "
        f"({small / floor:.1f}x), requests {n.total} {ops(n)}, fetched {n.bytes / 1e6:.1f} MB; cache peak "
        f"{object_cache.peak(bounded) / 1e6:.2f} MB of its {corpus // 3 / 1e6:.2f} MB bound"
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
    parser.add_argument("--tars", type=int, default=2000)
    parser.add_argument("--per-tar", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=0.5, help="each Emilia-shaped sample's length")
    parser.add_argument("--speakers", type=int, default=2000)
    parser.add_argument("--shard", type=int, default=4096, help="cuts in the shar job's one shard")
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--kib", type=int, default=256)
    parser.add_argument("--only", default="emilia,in,out", help="which parts, comma-separated")
    args = parser.parse_args()
    parts = set(args.only.split(","))
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="bench-storage-") as tmp:
        s3 = S3Server(Path(tmp) / "objects").start()
        try:
            if "emilia" in parts:
                bench_emilia(Path(tmp), s3, args.tars, args.per_tar, args.shard, args.seconds, args.speakers)
            if "in" in parts:
                bench_in(Path(tmp), s3)
            if "out" in parts:
                bench_out(Path(tmp), s3, args.files, args.kib)
        finally:
            os.chdir(REPO)
            s3.stop()


if __name__ == "__main__":
    main()
