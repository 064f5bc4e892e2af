"""Containers on object storage read by range, a bounded object cache, nothing lost from a tar cut short.

Against a real S3 API (moto's server, conftest's `s3`), every request counted by the project's own
counter (sharflow.io.storage.RequestCount, or SHARFLOW_REQUEST_LOG for a Snakemake process).
"""

import contextlib
import io
import json
import os
import tarfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sharflow.core.errors import SharflowError
from sharflow.io import containers, object_cache, storage
from testkit import (
    DEMO,
    demo_config,
    prepare_demo,
    read_jsonl,
    run_command,
    snakemake_cmd,
    upload_demo,
    write_all,
    write_jsonl,
)

SHARD_FILES = ("cuts", "recording", "target_audio", "context_audio")


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _clips() -> list[dict]:
    return [r for r in read_jsonl(DEMO / "manifest.json") if "offset" not in r]


def emilia_like(folder: Path, n_tars: int = 20, n_parquet: int = 3) -> dict:
    """The demo's whole-file clips as Emilia ships them (`n_tars` WebDataset tars, each sample's JSON
    and FLAC) and as the Hub does (`n_parquet` Parquet files in row groups of 4, the audio inside):
    {"tars": [paths], "parquet": [paths], "clips": records}."""
    clips = _clips()
    tars, parquet = [], []
    for t in range(n_tars):
        tars.append(folder / "wds" / f"EN-B{t:06d}.tar")
        tars[-1].parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tars[-1], "w", format=tarfile.USTAR_FORMAT) as tar:
            for r in clips[t::n_tars]:
                key = r["audio_filepath"].rsplit(".", 1)[0]
                meta = {"text": r["text"], "duration": r["duration"], "speaker": r["speaker"]}
                _add(tar, f"{key}.json", json.dumps(meta).encode())
                _add(tar, f"{key}.flac", (DEMO / "audio" / r["audio_filepath"]).read_bytes())
    for p in range(n_parquet):
        rows = clips[p::n_parquet]
        table = pa.table(
            {
                "audio": [
                    {"bytes": (DEMO / "audio" / r["audio_filepath"]).read_bytes(), "path": ""} for r in rows
                ],
                "text": [r["text"] for r in rows],
                "speaker": [r["speaker"] for r in rows],
            }
        )
        parquet.append(folder / "hub" / f"train-{p:05d}.parquet")
        parquet[-1].parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, parquet[-1], row_group_size=4, use_dictionary=False)
    return {"tars": tars, "parquet": parquet, "clips": clips}


def prepare(out: Path, manifest: str, root: str, form: str) -> tuple[list[dict], dict]:
    """prepare (testkit.prepare_demo) of a corpus in `form`: (prepared records, stats)."""
    folder = prepare_demo(out, manifest=manifest, root=root, form=form)
    return read_jsonl(folder / "prepared.jsonl"), json.loads((folder / "stats.json").read_text())


def with_context(records: list[dict], path: Path) -> Path:
    """Each record with a context: the next record of its speaker (a real same-speaker clip), every
    record in the train split; written where the shar plan reads it."""
    by_speaker: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        by_speaker.setdefault(r["speaker"], []).append(i)
    out = []
    for i, r in enumerate(records):
        same = by_speaker[r["speaker"]]
        c = records[same[(same.index(i) + 1) % len(same)]]
        out.append(
            {
                **r,
                "split": "train",
                "context_audio_filepath": c["audio_filepath"],
                "context_audio_offset": 0.0,
                "context_audio_duration": c["duration"],
            }
        )
    write_jsonl(path, out)
    return path


def shard_bytes(folder: Path) -> dict[str, bytes]:
    """Every file a shar job wrote, by its path there: its bytes (a stats file's without its time)."""
    out = {}
    for p in sorted(q for q in folder.rglob("*") if q.is_file()):
        if p.name.endswith(".stats.json"):
            out[str(p.relative_to(folder))] = {**json.loads(p.read_text()), "seconds": None}
        else:
            out[str(p.relative_to(folder))] = p.read_bytes()
    return out


def s3_url(request_url: str) -> str:
    """The s3:// URL a request (path style, as to moto's server) was about."""
    return "s3://" + request_url.split("://", 1)[1].split("/", 1)[1]


def new_process() -> None:
    """What a later job's process starts from: no listing, no HEAD answer, no index in memory."""
    storage.forget_listings()
    containers._url_tar_index.cache_clear()
    containers._tar_index.cache_clear()
    containers._row_groups.cache_clear()
    containers._group_audio.cache_clear()


def test_a_shar_job_on_object_storage_fetches_only_the_members_it_reads(s3, tmp_path, monkeypatch):
    """20 tars and 3 Parquet files on the server. Prepare streams each tar once (its bytes, one GET,
    no copy) and reads the Parquet files by range; a shar job whose one shard draws from every tar
    fetches only its members, by range, at most 1.2x their bytes, and writes the same shard files as
    the job over the local corpus."""
    monkeypatch.setenv("SHARFLOW_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SHARFLOW_OBJECT_CACHE", str(tmp_path / "objects"))
    corpus = emilia_like(tmp_path / "corpus")
    url = s3.bucket("emilia")
    s3.upload_tree(tmp_path / "corpus", url)
    sizes = {f"{url}/wds/{t.name}": t.stat().st_size for t in corpus["tars"]}
    new_process()

    with storage.RequestCount() as read:
        records, stats = prepare(tmp_path / "p-wds", "wds/EN-B{000000..000019}.tar", url, "webdataset")
    assert stats["records_in"] == len(corpus["clips"]) == stats["records_out"] > 40
    gets = [(u, span) for op, u, span in read.requests if op == "GetObject"]
    assert sorted(u.split("/emilia/")[1] for u, _ in gets) == sorted(f"wds/{t.name}" for t in corpus["tars"])
    assert all(span == "" for _, span in gets)  # each tar one stream, front to back
    # its bytes read once (all but the end-of-archive padding): the audio headers were probed as they came
    data = 0
    for t in corpus["tars"]:
        with tarfile.open(t) as archive:
            data += sum(m.size for m in archive if m.isfile())
    assert data < read.bytes <= sum(sizes.values())
    assert "HeadObject" not in read.by_operation  # the listing gave every version
    assert not (tmp_path / "objects").exists()  # and nothing was copied

    # the local corpus, prepared and sharded as the reference
    local, _ = prepare(
        tmp_path / "p-local", "wds/EN-B{000000..000019}.tar", str(tmp_path / "corpus"), "webdataset"
    )
    assert local == records  # the same records, the audio's headers probed from the stream
    ctx = with_context(records, tmp_path / "with_context.jsonl")
    write_all(tmp_path / "local-shar", ctx, shard_size=len(records), root=tmp_path / "corpus")

    new_process()  # the shar job is a later process: the indexes prepare kept, no listing
    with storage.RequestCount() as job:
        plan, stats, _ = write_all(tmp_path / "s3-shar", ctx, shard_size=len(records), root=url)
    assert plan["num_shards"] == 1 and json.loads(Path(stats[0]).read_text())["cuts"] == len(records)
    # every tar is read from: the shard draws from all 20
    tars_read = {u.rsplit("/", 1)[1] for op, u, _ in job.requests if op == "GetObject"}
    assert tars_read == {t.name for t in corpus["tars"]}
    assert set(job.by_operation) == {"GetObject"}  # no HEAD, no listing: the indexes name the versions
    # what the job reads: each record's target and context member (a clip may be both, for two cuts)
    needed = 0
    for r in read_jsonl(ctx):
        for key in ("audio_filepath", "context_audio_filepath"):
            tar, member = f"{url}/{r[key]}".split("#")
            needed += containers.tar_index(tar)[member][1]
    for _, u, span in job.requests:
        assert span.startswith("bytes="), f"a whole-object GET of {u}"
        first, last = map(int, span.removeprefix("bytes=").split("-"))
        assert last - first + 1 < sizes[s3_url(u)], f"{span} of {u} is the whole tar"
    assert 0 < job.bytes <= 1.2 * needed, (job.bytes, needed)
    local_files, s3_files = shard_bytes(tmp_path / "local-shar"), shard_bytes(tmp_path / "s3-shar")
    assert local_files.keys() == s3_files.keys() and local_files == s3_files

    # Parquet: footers and row groups by range, never a whole file
    psizes = {f"{url}/hub/{p.name}": p.stat().st_size for p in corpus["parquet"]}
    new_process()
    with storage.RequestCount() as read:
        rows, stats = prepare(tmp_path / "p-hub", "hub", url, "parquet_audio")
    assert stats["records_out"] == len(corpus["clips"])
    ctx = with_context(rows[:8], tmp_path / "hub_context.jsonl")
    new_process()
    with storage.RequestCount() as job:
        write_all(tmp_path / "hub-shar", ctx, shard_size=8, root=url)
    for count in (read, job):
        for op, u, span in count.requests:
            if op == "GetObject":
                first, last = map(int, span.removeprefix("bytes=").split("-"))
                assert span and last - first + 1 < psizes[s3_url(u)], f"a whole-file GET of {u}"
    assert job.bytes < sum(psizes.values()) / 2, (job.bytes, sum(psizes.values()))


def _cut_tar(folder: Path, complete: int = 5) -> tuple[Path, list[str]]:
    """A tar of `complete` whole samples, then one cut inside its audio (a download cut short); the
    complete samples' keys."""
    clips = _clips()
    folder.mkdir(parents=True, exist_ok=True)
    whole = folder / "whole.tar"
    keys = []
    with tarfile.open(whole, "w", format=tarfile.USTAR_FORMAT) as tar:
        for r in clips[: complete + 1]:
            key = r["audio_filepath"].rsplit(".", 1)[0]
            keys.append(key)
            _add(tar, f"{key}.json", json.dumps({k: r[k] for k in ("text", "duration", "speaker")}).encode())
            _add(tar, f"{key}.flac", (DEMO / "audio" / r["audio_filepath"]).read_bytes())
    data = whole.read_bytes()
    whole.unlink()
    (folder / "cut.tar").write_bytes(data[: data.rindex(b"fLaC") + 2000])
    return folder / "cut.tar", keys[:complete]


@pytest.mark.parametrize("where", ["local", "object storage"])
def test_a_tar_cut_short_prepares_every_complete_sample_and_rejects_only_the_cut_one(
    where, s3, tmp_path, monkeypatch
):
    monkeypatch.setenv("SHARFLOW_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SHARFLOW_OBJECT_CACHE", str(tmp_path / "objects"))
    _, complete = _cut_tar(tmp_path / "corpus" / "wds")
    root = str(tmp_path / "corpus")
    if where == "object storage":
        root = s3.bucket("cut-short")
        s3.upload_tree(tmp_path / "corpus", root)
    new_process()
    records, stats = prepare(tmp_path / "p", "wds/cut.tar", root, "webdataset")
    assert [r["audio_filepath"] for r in records] == [f"wds/cut.tar#{k}.flac" for k in complete]
    assert stats["records_in"] == 6 == stats["records_out"] + stats["rejected_total"]
    assert stats["rejected"] == {"truncated_container": 1}
    (reject,) = read_jsonl(next((tmp_path / "p" / "prepare" / "rejected").glob("truncated_container*.jsonl")))
    assert "the tar ends inside" in reject["detail"] and reject["sample"] == 6

    # the index kept says it is cut, holds the members before the cut, and no later job scans again
    container = f"{root}/wds/cut.tar"
    new_process()
    scans = []
    monkeypatch.setattr(containers, "_scan", lambda *a: scans.append(a) or pytest.fail("scanned again"))
    index = containers.tar_index(container)
    assert index.truncated and len(index) == 2 * len(complete) + 1  # the cut sample's JSON is whole
    with storage.RequestCount() as n:
        for r in records:
            path = f"{root}/{r['audio_filepath']}"
            with containers.open_audio(path) as f:
                assert f.read(4) == b"fLaC"
    assert scans == [] and set(n.by_operation) <= {"GetObject"}
    with pytest.raises(containers.MemberError, match="cut short before it"):
        containers.open_audio(f"{container}#never-there.flac")


def test_adjacent_members_in_reading_order_are_fetched_in_one_request(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("SHARFLOW_CACHE_DIR", str(tmp_path / "cache"))
    corpus = emilia_like(tmp_path / "corpus", n_tars=2, n_parquet=0)
    url = s3.bucket("adjacent")
    s3.upload_tree(tmp_path / "corpus", url)
    tar = f"{url}/wds/{corpus['tars'][0].name}"
    new_process()
    index = containers.tar_index(tar)
    audio = sorted((name for name in index if name.endswith(".flac")), key=lambda name: index[name][0])
    assert len(audio) >= 10
    forward = [containers.address(tar, name) for name in audio[:6]]  # in the tar's order (by offset)
    scattered = [containers.address(tar, name) for name in audio[::2][:5]]  # a sample skipped each time
    with storage.RequestCount() as n, containers.prefetched(forward):
        got = [containers.open_audio(p).read() for p in forward]
    # six members a JSON member apart: one GET; each read came from it
    assert n.by_operation == {"GetObject": 1}
    assert n.bytes <= 1.2 * sum(index[name][1] for name in audio[:6])
    assert [len(g) for g in got] == [index[name][1] for name in audio[:6]] and len(set(got)) == 6
    with storage.RequestCount() as n, containers.prefetched(scattered):
        pass
    assert n.by_operation == {"GetObject": 5}  # a whole sample between: not worth fetching for nothing
    assert not containers._PREFETCHED  # what a block fetched is let go after it
    # a GET of the same members outside any block: one each, the same bytes
    with storage.RequestCount() as n:
        assert [containers.open_audio(p).read() for p in forward] == got
    assert n.by_operation == {"GetObject": 6}


class CacheWatch:
    """The bytes of the files under a folder, summed every few milliseconds in a thread: the most it
    held while the block ran (`peak`), a measure apart from the cache's own ledger."""

    def __init__(self, folder: Path):
        self.folder, self.peak, self._stop = folder, 0, threading.Event()

    def _run(self):
        while not self._stop.is_set():
            sizes = {}
            for p in self.folder.rglob("*"):
                try:
                    if (
                        p.is_file()
                        and not p.name.startswith(object_cache.LEDGER)
                        and p.name != object_cache.LOCK
                    ):
                        sizes[p] = p.stat().st_size
                except FileNotFoundError:
                    pass
            # a walk is no snapshot: a file counted, then evicted while another was fetched and counted,
            # would sum two files that never lay there together; only those still there are summed
            self.peak = max(self.peak, sum(size for p, size in sizes.items() if p.exists()))
            time.sleep(0.002)

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def test_jobs_on_a_cache_bounded_below_the_corpus_finish_within_it_and_write_the_same_bytes(
    s3, with_context, demo_shards, tmp_path, monkeypatch
):
    """The demo's loose files on the server (4.6 MB), the object cache bounded at 1.5 MB: prepare, then
    the shar jobs in two worker processes that share the cache (evicting what the other fetched, never
    what it holds). The cache never holds more than its bound (the ledger's peak, and the files
    summed every few ms: file bytes, the tolerance of both is the file system's block rounding, not
    counted), and every output equals the unbounded local run's, byte for byte."""
    demo = upload_demo(s3, "bounded")
    bound = 1_500_000
    corpus = sum(p.stat().st_size for p in (DEMO / "audio").rglob("*") if p.is_file())
    assert corpus > 3 * bound
    cache = tmp_path / "objects"
    monkeypatch.setenv("SHARFLOW_OBJECT_CACHE", str(cache))
    monkeypatch.setenv("SHARFLOW_OBJECT_CACHE_SIZE", str(bound))
    new_process()
    with CacheWatch(cache) as watch:
        remote = prepare_demo(tmp_path / "remote", manifest=demo["manifest"], root=demo["audio_root"])
        local = prepare_demo(tmp_path / "local")
        assert (remote / "prepared.jsonl").read_bytes() == (local / "prepared.jsonl").read_bytes()
        write_all(tmp_path / "shar", with_context[0], workers=2, root=demo["audio_root"])
    assert shard_bytes(tmp_path / "shar") == shard_bytes(demo_shards[0])
    assert 0 < watch.peak <= bound and 0 < object_cache.peak(cache) <= bound, (
        watch.peak,
        object_cache.peak(cache),
    )
    kept = sum(p.stat().st_size for p in cache.rglob("*.flac"))
    assert kept <= bound < corpus  # copies were evicted: the corpus never fit
    assert not list(cache.rglob(object_cache.PART + "*"))  # and no partial download is left


def test_the_cache_evicts_the_least_recently_used_copy_that_no_reader_holds(tmp_path, monkeypatch):
    root = tmp_path / "objects"
    monkeypatch.setenv("SHARFLOW_OBJECT_CACHE_SIZE", "3K")
    assert object_cache.bound() == 3072 and object_cache.parse_size("1.5G") == 3 << 29
    with pytest.raises(SharflowError, match="SHARFLOW_OBJECT_CACHE_SIZE='lots'"):
        monkeypatch.setenv("SHARFLOW_OBJECT_CACHE_SIZE", "lots")
        object_cache.bound()
    monkeypatch.setenv("SHARFLOW_OBJECT_CACHE_SIZE", "3K")
    copies = []
    for i in range(3):
        copies.append(root / "b" / f"{i}.bin")
        part = root / "b" / f"{object_cache.PART}{i}"
        part.parent.mkdir(parents=True, exist_ok=True)
        object_cache.reserve(root, part, 1024)
        part.write_bytes(bytes(1024))
        part.rename(copies[-1])
        object_cache.settle(root, part)
        os.utime(copies[-1], ns=(i * 10**9, i * 10**9))  # 0 is the least recently used
    held = object_cache.hold(copies[0])  # a reader holds the oldest
    object_cache.reserve(root, root / "b" / f"{object_cache.PART}x", 1024)
    # room made down to 90 % of the bound (2,764 bytes): the oldest copies no one holds went
    assert copies[0].exists() and not copies[1].exists() and not copies[2].exists()
    assert object_cache.peak(root) == 3072
    held.close()
    object_cache.settle(root, root / "b" / f"{object_cache.PART}x")
    with pytest.raises(object_cache.CacheFull, match="larger than the object cache's bound"):
        object_cache.reserve(root, root / "b" / f"{object_cache.PART}y", 4096)
    assert object_cache.hold(root / "b" / "none.bin") is None  # not there: not held


def test_a_dry_run_learns_every_containers_version_from_listings_not_a_head_each(s3, tmp_path):
    """A real `snakemake -n` over 20 tars (a brace pattern) and 3 Parquet files (a folder) on the
    server: every request its processes send (SHARFLOW_REQUEST_LOG) is a listing or a bucket's HEAD;
    the objects' ETags, which prepare's params and the plan's key hold, come with the listings."""
    corpus = emilia_like(tmp_path / "corpus")
    url = s3.bucket("parse")
    s3.upload_tree(tmp_path / "corpus", url)
    config = demo_config()
    config["datasets"] = {
        "emilia": {"format": "webdataset", "manifest": "wds/EN-B{000000..000019}.tar", "audio_root": url},
        "hub": {"format": "parquet_audio", "manifest": "hub", "audio_root": url},
    }
    log = tmp_path / "requests.tsv"
    env = {**os.environ, storage.REQUEST_LOG: str(log)}
    proc = run_command(snakemake_cmd(tmp_path / "work", config, "-n"), env=env, timeout=600)
    assert "prepare" in proc.stdout
    sent = [line.split("\t")[0] for line in log.read_text().splitlines()]
    assert "HeadObject" not in sent and "GetObject" not in sent
    assert sent.count("ListObjectsV2") == 2  # one listing a dataset (a request per 1,000 objects)
    assert len(corpus["tars"]) + len(corpus["parquet"]) > 2 * len(sent)


def test_a_tar_replaced_since_prepare_fails_its_reader_loudly_and_the_rerun_reads_the_new_one(
    s3, tmp_path, monkeypatch
):
    monkeypatch.setenv("SHARFLOW_CACHE_DIR", str(tmp_path / "cache"))
    corpus = emilia_like(tmp_path / "corpus", n_tars=2, n_parquet=0)
    url = s3.bucket("replaced")
    s3.upload_tree(tmp_path / "corpus", url)
    new_process()
    records, _ = prepare(tmp_path / "p1", "wds", url, "webdataset")
    first = f"{url}/{records[0]['audio_filepath']}"
    tar = first.split("#")[0]
    old_etag = containers.tar_index(tar).etag
    # the tar rewritten with its samples in another order: every member at another offset
    other = tmp_path / "other.tar"
    with tarfile.open(corpus["tars"][0]) as src, tarfile.open(other, "w", format=tarfile.USTAR_FORMAT) as out:
        for info in reversed(src.getmembers()):
            out.addfile(info, src.extractfile(info))
    bucket, key = storage.split_url(tar)
    storage.client().upload_file(str(other), bucket, key)
    new_process()
    with pytest.raises(
        storage.StorageError, match=r"replaced since sharflow read it.*Run the workflow again"
    ):
        containers.open_audio(first)
    assert containers.kept_tar_index((tar,)) is None  # the stale index is dropped
    # the rerun: the parse lists the new ETag (prepare's param changed), prepare indexes the new tar
    new_process()
    prepare(tmp_path / "p2", "wds", url, "webdataset")
    index = containers.tar_index(tar)
    assert index.etag != old_etag and index.etag == storage.head(tar).etag
    with containers.open_audio(first) as f, open(DEMO / "audio" / first.split("#")[1], "rb") as want:
        assert f.read() == want.read()


def test_a_kept_index_is_read_in_place_and_finds_every_member_and_no_other(tmp_path, monkeypatch):
    """Names that sort around each other's prefixes, quotes, tabs, newlines and non-ASCII: each found
    by the binary search of the kept file, a name not there is not, and the index equals the dict."""
    monkeypatch.setenv("SHARFLOW_CACHE_DIR", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    names = [
        "a",
        "a.flac",
        "a.json",
        "ab",
        'quote".flac',
        "tab\t.flac",
        "new\nline.flac",
        "é/ü.mp3",
        "z" * 300,
    ]
    names += [
        f"EN_B{i:06d}/EN_B{i:06d}_W{j:04d}.{ext}"
        for i in range(20)
        for j in range(50)
        for ext in ("json", "mp3")
    ]
    members = containers.TarIndex(
        {name: (int(rng.integers(0, 2**40)), int(rng.integers(0, 2**24))) for name in names}
    )
    members.truncated, members.size, members.etag = True, 2**41, "etag-1"
    kept = containers._keep(("s3://b/x.tar",), members)
    assert isinstance(kept, containers.KeptIndex) and kept == dict(members) and len(kept) == len(names)
    assert (kept.truncated, kept.size, kept.etag) == (True, 2**41, "etag-1")
    for name in names:
        assert kept[name] == members[name] and name in kept
    for absent in ["", "a.fla", "ab.flac", "b", "EN_B000000/EN_B000000_W0000.flac", "zz", "é"]:
        assert absent not in kept and kept.get(absent) is None
    assert sorted(kept) == sorted(names)
    empty = containers._keep(("s3://b/empty.tar",), containers.TarIndex())
    assert len(empty) == 0 and "a" not in empty

    # a job holds the indexes of thousands of tars: none keeps a file open between lookups
    # (only the index files are counted: a background run's pools open and close descriptors too)
    def open_indexes():
        folder = str(Path(containers._index_file(("s3://b/0.tar",))).parents[1])  # tar-index/
        targets = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        return [t for t in targets if t.startswith(folder)]

    held = [containers._keep((f"s3://b/{i}.tar",), members) for i in range(50)]
    assert all(index["a.json"] == members["a.json"] for index in held)
    assert open_indexes() == []
