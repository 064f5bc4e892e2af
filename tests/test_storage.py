"""Object storage against a real S3 API (moto's server, the `s3` fixture): corpora in, Shar out.

The workflow run that reads the demo from the server and publishes to it is the Slurm run
(test_slurm): it overlaps the suite, and its outputs are compared byte for byte with a local run's.
"""

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from botocore.exceptions import ClientError

from sharflow.core.errors import SharflowError
from sharflow.io import storage
from sharflow.io.audio import PathEscapeError, read_span, resolve_audio_path
from sharflow.publish import PublishSettings, publish, published_files
from sharflow.publish import job as publish_job
from sharflow.publish.job import RECORD
from sharflow.publish.objects import MIB, file_digest, upload
from testkit import DEMO, REPO, S3_SECRET, prepare_demo, random_files, upload_demo


def test_paths_under_a_url_root_are_folded_and_may_not_leave_it():
    root = "s3://corpus/audio"
    assert resolve_audio_path(root, "a/x.flac") == ("s3://corpus/audio/a/x.flac", "a/x.flac")
    assert resolve_audio_path(root + "/", "a/./b/../x.flac") == ("s3://corpus/audio/a/x.flac", "a/x.flac")
    assert resolve_audio_path(root, "s3://corpus/audio/x.flac") == ("s3://corpus/audio/x.flac", "x.flac")
    for escaping in (
        "../x.flac",
        "a/../../x.flac",
        "/etc/passwd",
        "s3://corpus/audio2/x.flac",
        "s3://other/audio/x.flac",
        "",
        ".",
    ):
        with pytest.raises(PathEscapeError):
            resolve_audio_path(root, escaping)


def test_a_url_of_another_scheme_or_without_a_bucket_is_refused_by_name():
    for url in ("gs://bucket/x", "s3://ab/x", "pipe:aws s3 cp s3://bucket/x -"):
        with pytest.raises(storage.StorageError, match="s3://"):
            storage.split_url(url)


def test_errors_of_the_store_say_what_to_do(s3):
    s3.bucket("errors")
    with pytest.raises(FileNotFoundError, match=r"s3://errors/none\.flac"):
        storage.head("s3://errors/none.flac")
    with pytest.raises(storage.StorageError, match="bucket 'nobucket' does not exist"):
        storage.head("s3://nobucket/x.flac")
    denied = ClientError(
        {"Error": {"Code": "AccessDenied"}, "ResponseMetadata": {"HTTPStatusCode": 403}}, "Get"
    )
    message = str(storage.storage_error("s3://errors/x.flac", denied))
    assert "access denied" in message and "AWS_ACCESS_KEY_ID" in message and "s3://errors/x.flac" in message
    # a wrong endpoint: one clear error, in a fresh process (the client is made once per process)
    probe = "from sharflow.io import storage; storage.head('s3://errors/x.flac')"
    env = {**os.environ, "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_MAX_ATTEMPTS": "1"}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "cannot be reached" in done.stderr and "AWS_ENDPOINT_URL" in done.stderr
    assert s3.endpoint not in done.stderr and "http://127.0.0.1:9" in done.stderr


def test_urls_are_told_from_paths_and_folded_lexically():
    assert storage.is_url("s3://b/k") and storage.is_url("gs://b") and not storage.is_url("/data/a.flac")
    assert not storage.is_url(Path("s3:/b/k"))
    assert storage.split_url("s3://bucket/a/b.flac") == ("bucket", "a/b.flac")
    assert storage.split_url("s3://bucket") == ("bucket", "")
    assert storage.split_url("s3://abc/a://b") == ("abc", "a://b")  # the shortest bucket name; one scheme
    assert storage.normalize_url("s3://bucket/a/./b/../c.flac") == "s3://bucket/a/c.flac"
    assert storage.normalize_url("s3://bucket/a/..") == "s3://bucket"
    assert storage.normalize_url("s3://bucket") == "s3://bucket"
    assert storage.normalize_url("s3://bucket/../../x") == "s3://bucket/x"  # never above the bucket
    assert storage.normalize_url("s3://bucket/Xa/./b") == "s3://bucket/Xa/b"
    assert storage.normalize_url("s3://bucket/a/./s3://b") == "s3://bucket/a/s3:/b"  # one scheme, the first
    with pytest.raises(storage.StorageError) as e:
        storage.split_url("gs://bucket/x")
    assert str(e.value) == (
        "gs://bucket/x: sharflow reads and writes s3:// URLs only; an AIStore or other S3-compatible "
        "store is reached as s3:// with AWS_ENDPOINT_URL"
    )
    with pytest.raises(storage.StorageError) as e:
        storage.split_url("s3://ab/x")
    assert str(e.value) == "s3://ab/x: no bucket name (s3://bucket/key)"


def test_each_failure_of_a_request_is_one_message_that_says_what_to_do(s3, monkeypatch):
    """storage_error, class by class, word for word (what a user reads when a run stops on it)."""
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError, PartialCredentialsError

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    assert storage.endpoint() == "AWS S3"
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://store:9000")
    assert storage.endpoint() == "http://store:9000"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://s3-only:9000")
    assert storage.endpoint() == "http://s3-only:9000"
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    url, where = "s3://errors/x.flac", "s3://errors/x.flac (endpoint http://store:9000)"

    def error(code, status=400):
        return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Get")

    no_credentials = (
        f"{where}: no credentials. Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the "
        "environment of the run; sharflow takes none from its config"
    )
    assert str(storage.storage_error(url, NoCredentialsError())) == no_credentials
    assert (
        str(storage.storage_error(url, PartialCredentialsError(provider="env", cred_var="x")))
        == no_credentials
    )
    unreachable = storage.storage_error(url, EndpointConnectionError(endpoint_url="http://store:9000"))
    assert str(unreachable) == (
        f"{where}: the object store cannot be reached (EndpointConnectionError: Could not connect to the "
        'endpoint URL: "http://store:9000"). Check AWS_ENDPOINT_URL and the network'
    )
    denied = (
        f"{where}: access denied (%s). Check the credentials in the environment (AWS_ACCESS_KEY_ID, "
        "AWS_SECRET_ACCESS_KEY or AWS_PROFILE) and the bucket's policy"
    )
    for code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
        found = storage.storage_error(url, error(code))
        assert type(found) is storage.StorageError and str(found) == denied % code
    assert str(storage.storage_error(url, error("Whatever", 403))) == denied % "Whatever"
    assert str(storage.storage_error(url, error("SlowDown", 503))) == (
        f"{where}: the request failed (SlowDown: {error('SlowDown', 503)})"
    )
    assert str(storage.storage_error(url, error("", 500))).startswith(f"{where}: the request failed (500: ")
    bare = ClientError({"ResponseMetadata": {"HTTPStatusCode": 500}}, "Get")  # a reply without an error code
    assert str(storage.storage_error(url, bare)) == f"{where}: the request failed (500: {bare})"
    no_status = ClientError({"Error": {"Code": "SlowDown"}}, "Get")
    assert (
        str(storage.storage_error(url, no_status)) == f"{where}: the request failed (SlowDown: {no_status})"
    )
    missing_bucket = f"{where}: bucket 'errors' does not exist. Create it or fix the URL"
    assert str(storage.storage_error(url, error("NoSuchBucket", 404))) == missing_bucket
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)  # the real store: is the bucket there?
    storage.bucket_exists.cache_clear()
    s3.bucket("errors")
    for code in ("404", "NotFound", "NoSuchKey"):
        found = storage.storage_error(url, error(code, 404))
        assert type(found) is FileNotFoundError and str(found) == f"no object at {url}"
        found = storage.storage_error("s3://nobucket-x/x.flac", error(code, 404))
        assert type(found) is storage.StorageError and "bucket 'nobucket-x' does not exist" in str(found)
    assert storage.bucket_exists("s3://errors/any") and not storage.bucket_exists("s3://nobucket-y/any")


def test_sizes_stamps_and_existence_of_files_and_objects_alike(s3, tmp_path, monkeypatch):
    url = s3.bucket("sizes") + "/a.bin"
    bucket, key = storage.split_url(url)
    storage.client().put_object(Bucket=bucket, Key=key, Body=b"12345")
    local = tmp_path / "a.bin"
    local.write_bytes(b"1234567")
    assert (storage.size(url), storage.size(str(local))) == (5, 7)
    info = storage.head(url)
    assert storage.stamp(url) == [5, info.etag] and not info.etag.startswith('"')
    assert storage.stamp(str(local)) == [7, os.stat(local).st_mtime_ns]
    assert storage.exists(url) and storage.exists(str(local))
    assert not storage.exists(url + ".none") and not storage.exists(str(tmp_path / "none"))
    assert not storage.exists(str(tmp_path))  # a folder is not a file that can be opened
    assert storage.local_file(str(local)) == str(local)
    monkeypatch.setenv("SHARFLOW_OBJECT_CACHE", str(tmp_path / "objects"))
    # a download's partial file lies beside the copy (renamed in place), not in the system's
    # temporary folder, which may be another file system (here it does not exist)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-folder"))
    copy = Path(storage.local_file(url))
    assert copy.read_bytes() == b"12345" and copy.suffix == ".bin"
    digest = hashlib.sha256(url.encode()).hexdigest()  # a name per URL and version
    assert copy == tmp_path / "objects" / "sizes" / digest[:2] / f"{digest[2:24]}-{info.etag[:40]}.bin"
    assert list(copy.parent.iterdir()) == [copy]  # no partial file left
    storage.client().put_object(Bucket=bucket, Key="b.suffix-of-twenty-one", Body=b"1")
    assert Path(storage.local_file(f"s3://{bucket}/b.suffix-of-twenty-one")).suffix == ".suffix-of-twent"
    monkeypatch.delenv("SHARFLOW_OBJECT_CACHE")
    monkeypatch.setenv("SHARFLOW_CACHE_DIR", str(tmp_path / "cache"))
    assert storage.object_cache() == tmp_path / "cache" / "objects"
    with storage.RequestCount() as n:
        storage.client().head_object(Bucket=bucket, Key=key)
        storage.client().list_objects_v2(Bucket=bucket)
        storage.client().head_object(Bucket=bucket, Key=key)
    storage.client().head_object(Bucket=bucket, Key=key)  # after the block: not counted
    assert (n.total, n.by_operation) == (3, {"HeadObject": 2, "ListObjectsV2": 1})


def test_an_object_is_downloaded_once_and_again_when_it_changes(s3, tmp_path):
    url = s3.bucket("changing") + "/a/x.flac"
    bucket, key = storage.split_url(url)
    sf.write(tmp_path / "one.flac", np.linspace(-0.5, 0.5, 8000), 16000, subtype="PCM_16")
    sf.write(tmp_path / "two.flac", np.linspace(0.5, -0.5, 12000), 16000, subtype="PCM_16")
    storage.client().upload_file(str(tmp_path / "one.flac"), bucket, key)
    first = storage.local_file(url)
    assert Path(first).read_bytes() == (tmp_path / "one.flac").read_bytes()
    assert storage.local_file(url) == first and storage.stamp(url)[0] == os.path.getsize(first)
    samples, _, _ = read_span(url, 0.1, 0.2)
    np.testing.assert_array_equal(samples, read_span(str(tmp_path / "one.flac"), 0.1, 0.2)[0])
    stamp = storage.stamp(url)
    storage.client().upload_file(str(tmp_path / "two.flac"), bucket, key)
    storage.head.cache_clear()  # a later job (another process) asks again
    second = storage.local_file(url)
    assert second != first and Path(second).read_bytes() == (tmp_path / "two.flac").read_bytes()
    assert storage.stamp(url) != stamp  # keys of measures change, as for a local file replaced
    # replaced between this process's HEAD and its GET: the GET fails (If-Match), naming the object
    storage.client().put_object(Bucket=bucket, Key=key, Body=b"three")
    Path(second).unlink()
    with pytest.raises(storage.StorageError, match=f"^{url} \\(endpoint .*PreconditionFailed"):
        storage.local_file(url)
    assert list(Path(second).parent.iterdir()) == [Path(first)]  # and leaves no partial file


def test_prepare_reads_a_corpus_from_object_storage_as_from_a_folder(s3, tmp_path):
    demo = upload_demo(s3, "prepare-corpus")
    local = prepare_demo(tmp_path / "local")
    remote = prepare_demo(tmp_path / "remote", manifest=demo["manifest"], root=demo["audio_root"])
    assert (remote / "prepared.jsonl").read_bytes() == (local / "prepared.jsonl").read_bytes()
    assert json.loads((remote / "stats.json").read_text())["records_out"] == 56
    with pytest.raises(SharflowError, match="bucket of audio_root"):
        prepare_demo(tmp_path / "nobucket", manifest=demo["manifest"], root="s3://nobucket/audio")


def test_an_escaping_or_missing_object_is_rejected_with_its_reason(s3, tmp_path):
    demo = upload_demo(s3, "reject-corpus")
    bucket, _ = storage.split_url(demo["manifest"])
    lines = [json.loads(line) for line in (DEMO / "manifest.json").read_text().splitlines()[:3]]
    lines[1]["audio_filepath"] = "../manifest.json"
    lines[2]["audio_filepath"] = "slt/none.flac"
    body = "".join(json.dumps(r) + "\n" for r in lines).encode()
    storage.client().put_object(Bucket=bucket, Key="demo/bad.json", Body=body)
    out = prepare_demo(tmp_path, manifest=f"s3://{bucket}/demo/bad.json", root=demo["audio_root"])
    stats = json.loads((out / "stats.json").read_text())
    assert stats["records_out"] == 1 and stats["rejected"] == {"missing_audio": 1, "path_escapes_root": 1}


def _versions(bucket: str, prefix: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    pages = storage.client().get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix)
    for page in pages:
        for v in page.get("Versions", ()):
            out.setdefault(v["Key"], []).append(v)
    return out


def test_the_etag_of_a_file_is_known_before_it_is_uploaded(s3, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = s3.bucket("etags")
    # one PUT below the part size; 11 MiB + 7: three parts, 10 MiB: two, 5 MiB: one
    files = random_files(Path("f"), 2, 4 * MIB, seed=1) + random_files(Path("g"), 1, 11 * MIB + 7, seed=2)
    files += random_files(Path("h"), 1, 10 * MIB, seed=3) + random_files(Path("i"), 1, 5 * MIB, seed=4)
    files += random_files(Path("e"), 1, 0)
    stats = publish(PublishSettings(url, part_mb=5, workers=2), files, "published.json")
    assert stats["uploaded"] == 6 and stats["requests_by_operation"]["UploadPart"] == 3 + 2 + 1
    contents = storage.client().list_objects_v2(Bucket="etags")["Contents"]
    listed = {o["Key"]: o["ETag"].strip('"') for o in contents}
    assert [listed[f] for f in files] == [file_digest(f, 5 * MIB).etag for f in files]
    assert len(set(listed.values())) == 7 and sum("-" in listed[f] for f in files) == 3  # files + record
    # publish.workers changes only how many uploads run at once: one at a time gives the same record
    publish(PublishSettings(f"{url}/one", part_mb=5, workers=1), files, "one.json")
    record = storage.client().get_object(Bucket="etags", Key=RECORD)["Body"].read()
    one = json.loads(storage.client().get_object(Bucket="etags", Key=f"one/{RECORD}")["Body"].read())
    assert json.loads(record)["objects"] == one["objects"]


def test_a_rerun_uploads_only_what_is_missing_or_changed_and_the_record_last(s3, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = s3.bucket("republish", versioned=True) + "/run"
    files = random_files(Path("set"), 20, 3000)
    settings = PublishSettings(url, part_mb=5, workers=4)
    first = publish(settings, files, "published.json")
    assert (first["uploaded"], first["already_there"]) == (20, 0)
    again = publish(settings, files, "published.json")
    assert (again["uploaded"], again["requests"]) == (0, 2)  # a listing, and the open uploads: nothing else
    Path(files[3]).write_bytes(b"changed")
    storage.client().delete_object(Bucket="republish", Key=f"run/{files[7]}")  # a lost object
    third = publish(settings, files, "published.json")
    assert third["uploaded"] == 2 and third["already_there"] == 18
    versions = _versions("republish", "run/")
    twice = {f"run/{files[3]}": 2, f"run/{files[7]}": 2, f"run/{RECORD}": 2}  # changed, lost, the record
    assert {k: len(v) for k, v in versions.items() if len(v) > 1} == twice
    record = json.loads(storage.client().get_object(Bucket="republish", Key=f"run/{RECORD}")["Body"].read())
    assert sorted(record["objects"]) == sorted(files) and record["objects"][files[3]]["size"] == 7
    latest = {k: next(v for v in vs if v["IsLatest"]) for k, vs in versions.items()}
    assert all(v["LastModified"] <= latest[f"run/{RECORD}"]["LastModified"] for v in latest.values())


def test_a_file_rebuilt_at_its_size_is_sent_again_and_a_missing_record_is_written_with_nothing_to_send(
    s3, tmp_path, monkeypatch
):
    """A shard rebuilt with other bytes of the same size is not taken for the published one; a publish
    killed after its last upload and before its record is completed by a rerun with nothing to upload."""
    monkeypatch.chdir(tmp_path)
    url = s3.bucket("rebuilt") + "/run"
    files = random_files(Path("set"), 3, 2000)
    settings = PublishSettings(url, part_mb=5, workers=2)
    publish(settings, files, "published.json")
    data = Path(files[1]).read_bytes()
    Path(files[1]).write_bytes(bytes(reversed(data)))  # same size, other bytes
    assert os.path.getsize(files[1]) == len(data) and bytes(reversed(data)) != data
    again = publish(settings, files, "published.json")
    assert again["uploaded"] == 1
    assert storage.client().get_object(Bucket="rebuilt", Key=f"run/{files[1]}")["Body"].read() != data
    storage.client().delete_object(Bucket="rebuilt", Key=f"run/{RECORD}")  # killed before the record
    rerun = publish(settings, files, "published.json")
    assert rerun["uploaded"] == 0
    record = json.loads(storage.client().get_object(Bucket="rebuilt", Key=f"run/{RECORD}")["Body"].read())
    assert record["objects"][files[1]]["sha256"] == file_digest(files[1], 5 * MIB).sha256


def test_a_run_publishes_every_planned_shard_file_its_verify_record_and_the_datasets_tables(
    tmp_path, monkeypatch
):
    """published_files: per Shar set (datasets, then held-out splits) each field's file of every shard
    the plan promises (two generations: 0-1 and 10), its verify record; a dataset's catalog, buckets
    and card (a split's are its dataset's); a test split's evaluation files; then the hand-off files.
    In an indexed set (the demo's) each file is followed by its index; an unindexed one (the split's
    here, as sharflow made sets before indexes) has gzipped cuts."""
    monkeypatch.chdir(tmp_path)
    plan = {"generations": [{"first": 0, "shards": 2}, {"first": 10, "shards": 1}]}
    for folder, indexed in (("results/demo", True), ("results/demo/test_seen", False)):
        Path(folder).mkdir(parents=True)
        Path(folder, "shard_plan.json").write_text(json.dumps({**plan, "indexed": indexed}))
    Path("results/demo/test_seen/evaluation/audio").mkdir(parents=True)
    for name in ("manifest.json", "audio/b.wav", "audio/a.wav"):
        Path("results/demo/test_seen/evaluation", name).write_bytes(b"x")
    files = published_files(["results/demo"], ["results/demo/test_seen"], ["c1"], ["results/input_cfg.yaml"])
    fields = ("cuts/cuts.{}.jsonl.gz", "target_audio/recording.{}.tar", "context_audio/recording.{}.tar")
    codes = ("codes_c1/target_codes/codes.{}.tar", "codes_c1/context_codes/codes.{}.tar")
    shards = ("000000", "000001", "000010")

    def shar(root, indexed=False):
        files = [f"{root}/shar/{pattern.format(s)}" for pattern in (*fields, *codes) for s in shards]
        if indexed:
            plain = [path.replace(".jsonl.gz", ".jsonl") for path in files]
            return [f for path in plain for f in (path, path + ".idx")]
        return files

    assert files == [
        *shar("results/demo", indexed=True),
        "results/demo/verify.json",
        "results/demo/catalog.parquet",
        "results/demo/buckets.yaml",
        "results/demo/DATASET.md",
        *shar("results/demo/test_seen"),
        "results/demo/test_seen/verify.json",
        *(f"results/demo/test_seen/evaluation/{n}" for n in ("audio/a.wav", "audio/b.wav", "manifest.json")),
        "results/input_cfg.yaml",
    ]


def test_a_file_that_leaves_the_run_by_a_symlink_is_refused_before_anything_is_sent(
    s3, tmp_path, monkeypatch
):
    """A file listed for publishing that is a symlink out of the run's results (an evaluation folder
    holding a link to a private file) stops the publish by name before its first request; results/
    itself on scratch (a symlink) and a link between the run's own files are the run's."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "scratch").mkdir()
    Path("results").symlink_to(tmp_path / "scratch")
    files = random_files(Path("results/set"), 2, 100)
    Path("results/set/alias.bin").symlink_to(Path(files[0]).resolve())
    secret = tmp_path / "private.key"
    secret.write_bytes(b"not the run's")
    Path("results/set/escape.bin").symlink_to(secret)
    url = s3.bucket("escapes") + "/run"
    with (
        storage.RequestCount() as requests,
        pytest.raises(SharflowError, match=r"escape\.bin.*outside the run"),
    ):
        publish(PublishSettings(url), [*files, "results/set/escape.bin"], "published.json")
    assert requests.total == 0 and "Contents" not in storage.client().list_objects_v2(Bucket="escapes")
    stats = publish(PublishSettings(url), [*files, "results/set/alias.bin"], "published.json")
    assert stats["uploaded"] == 3


def _record_holds(bucket: str, prefix: str) -> bool | None:
    """Whether the bucket's publish record promises only objects the bucket holds as it describes
    them (size and ETag); None when there is no record."""
    client = storage.client()
    try:
        body = client.get_object(Bucket=bucket, Key=f"{prefix}/{RECORD}")["Body"].read()
    except ClientError:
        return None
    for rel, obj in json.loads(body)["objects"].items():
        head = client.head_object(Bucket=bucket, Key=f"{prefix}/{rel}")
        if (head["ContentLength"], head["ETag"].strip('"')) != (obj["size"], obj["etag"]):
            return False
    return True


@pytest.mark.parametrize("fails_at", ["first upload", "second upload", "the record"])
def test_a_publish_that_fails_at_any_point_leaves_no_false_record_and_a_rerun_completes_it(
    s3, tmp_path, monkeypatch, fails_at
):
    """A published set changes (two files rebuilt); the publish fails before its first upload, between
    uploads, or while writing its record. No reader then finds a record promising an object the bucket
    does not hold as described, and a rerun completes the set and its record."""
    monkeypatch.chdir(tmp_path)
    bucket = f"fails-{fails_at.replace(' ', '-')}"
    url = s3.bucket(bucket) + "/run"
    files = random_files(Path("set"), 4, 1000)
    settings = PublishSettings(url, part_mb=5, workers=1)
    publish(settings, files, "published.json")
    assert _record_holds(bucket, "run") is True
    for f in files[:2]:
        Path(f).write_bytes(os.urandom(1000))
    real_upload, real_put = publish_job.upload, storage.client().put_object
    calls = []

    def upload(*args, **kwargs):
        calls.append(args[0])
        if fails_at == "first upload" or (fails_at == "second upload" and len(calls) == 2):
            raise OSError("killed")
        return real_upload(*args, **kwargs)

    def put_object(**kwargs):
        if kwargs["Key"].endswith(RECORD):
            raise OSError("killed")
        return real_put(**kwargs)

    with monkeypatch.context() as m:
        m.setattr(publish_job, "upload", upload)
        if fails_at == "the record":
            client = storage.client()
            m.setattr(client, "put_object", put_object)
            m.setattr(storage, "client", lambda: client)
        with pytest.raises(OSError, match="killed"):
            publish(settings, files, "published.json")
    assert _record_holds(bucket, "run") is None  # withdrawn before the set changed, not yet rewritten
    again = publish(settings, files, "published.json")
    assert again["uploaded"] == {"first upload": 2, "second upload": 1, "the record": 0}[fails_at]
    assert _record_holds(bucket, "run") is True


@pytest.mark.parametrize("prefix", ["", "run", "run/"])
def test_only_the_runs_own_killed_uploads_are_aborted_and_each_object_carries_its_sha256(
    s3, tmp_path, monkeypatch, prefix
):
    """In process, so that the code under test is the code this session imports: the multipart uploads a
    killed run left open to its own files' keys are aborted and counted; another writer's, in the same
    bucket, survive: outside the URL's prefix, under a sibling prefix (`run-v2` beside `run`), and under
    the prefix itself at a key the run does not publish (at a bucket's root, every other key). Every
    object's metadata holds its file's SHA-256, one PUT or uploaded in parts."""
    monkeypatch.chdir(tmp_path)
    bucket = f"left-open-{len(prefix)}"
    url = s3.bucket(bucket) + (f"/{prefix}" if prefix else "")
    base = prefix.strip("/") + "/" if prefix else ""
    client = storage.client()
    files = random_files(Path("set"), 2, 1000) + random_files(Path("big"), 1, 6 * MIB, seed=3)
    ours = [f"{base}{files[0]}", f"{base}{files[2]}"]  # a killed run's: one small file, one in parts
    others = [
        "elsewhere/other.tar",
        f"run-v2/{files[0]}",
        f"{base}set/someone-elses.tar",
        f"{base}x{files[1]}",
    ]
    others = sorted({k for k in others if k not in ours})
    for key in [*ours, *others]:
        client.create_multipart_upload(Bucket=bucket, Key=key)
    stats = publish(PublishSettings(url, part_mb=5, workers=1), files, "published.json")
    assert stats["aborted_multipart"] == 2
    left = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert sorted(u["Key"] for u in left) == others
    for f in files:
        head = client.head_object(Bucket=bucket, Key=f"{base}{f}")
        assert head["Metadata"]["sha256"] == file_digest(f, 5 * MIB).sha256


def test_a_publish_to_a_buckets_root_says_what_it_sent_and_what_it_cost_request_by_request(
    s3, tmp_path, monkeypatch, caplog
):
    """The stats, the log line, the record in the bucket and the local one, word for word: two small
    files (one PUT each) and one in two parts, at the bucket's root; then a rerun that sends nothing
    and does not rewrite an unchanged record."""
    monkeypatch.chdir(tmp_path)
    url = s3.bucket("rootpub")
    files = random_files(Path("set"), 2, 1000) + random_files(Path("big"), 1, 6 * MIB, seed=3)
    settings = PublishSettings(url + "/", part_mb=5, workers=2)
    with caplog.at_level(logging.INFO, logger="sharflow.publish.job"):
        stats = publish(settings, files, "published.json")
    assert stats == {
        "url": url + "/",
        "files": 3,
        "uploaded": 3,
        "uploaded_bytes": 2000 + 6 * MIB,
        "already_there": 0,
        "aborted_multipart": 0,
        "requests": 9,
        "requests_by_operation": {
            "CompleteMultipartUpload": 1,
            "CreateMultipartUpload": 1,
            "ListMultipartUploads": 1,
            "ListObjectsV2": 1,
            "PutObject": 3,
            "UploadPart": 2,
        },
    }
    assert caplog.messages == [
        f"published 3 file(s) under {url}/: 3 uploaded (6.3 MB), 0 already there; 9 requests"
    ]
    digests = {f: file_digest(f, 5 * MIB) for f in files}
    objects = {f: {"size": d.size, "etag": d.etag, "sha256": d.sha256} for f, d in digests.items()}
    record = {"format": 1, "url": url + "/", "objects": objects}
    head = storage.client().head_object(Bucket="rootpub", Key=RECORD)  # at the root: no prefix
    body = storage.client().get_object(Bucket="rootpub", Key=RECORD)["Body"].read()
    assert head["ContentType"] == "application/json"
    assert body == (json.dumps(record, indent=1, sort_keys=True) + "\n").encode()
    assert digests[files[2]].etag.endswith("-2")  # two parts
    for f in files:
        assert storage.client().head_object(Bucket="rootpub", Key=f)["ETag"].strip('"') == digests[f].etag
    local = json.loads(Path("published.json").read_text())
    assert local == {
        **record,
        "record": f"{url}/{RECORD}",
        "part_size": 5 * MIB,
        "digests": {
            f: [os.path.getsize(f), os.stat(f).st_mtime_ns, d.etag, d.sha256] for f, d in digests.items()
        },
        "stats": stats,
    }
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="sharflow.publish.job"):
        again = publish(settings, files, "published.json")
    assert {k: again[k] for k in ("uploaded", "already_there", "requests", "requests_by_operation")} == {
        "uploaded": 0,
        "already_there": 3,
        "requests": 2,
        "requests_by_operation": {"ListMultipartUploads": 1, "ListObjectsV2": 1},
    }
    assert caplog.messages == [
        f"published 3 file(s) under {url}/: 0 uploaded (0.0 MB), 3 already there; 2 requests"
    ]
    Path("published.json").write_text("{not json")  # a local record that cannot be read: digests read again
    assert publish(settings, files, "published.json")["uploaded"] == 0
    other = PublishSettings(url, part_mb=6, workers=1)  # another part size: the big file's ETag differs
    assert publish(other, files, "published.json")["uploaded"] == 1


@pytest.mark.parametrize("abort_fails", [False, True])
def test_a_multipart_upload_that_fails_is_aborted_and_its_own_error_reported(
    s3, tmp_path, monkeypatch, abort_fails
):
    monkeypatch.chdir(tmp_path)
    bucket = f"part-fails-{int(abort_fails)}"
    s3.bucket(bucket)
    [big] = random_files(Path("big"), 1, 11 * MIB, seed=5)
    digest = file_digest(big, 5 * MIB)
    client, sent = storage.client(), []
    real_part, real_abort = client.upload_part, client.abort_multipart_upload

    def upload_part(**kwargs):
        sent.append(kwargs["PartNumber"])
        if len(sent) == 2:
            raise OSError("connection reset")
        return real_part(**kwargs)

    def abort_multipart_upload(**kwargs):
        if abort_fails:
            raise RuntimeError("abort refused")
        return real_abort(**kwargs)

    monkeypatch.setattr(client, "upload_part", upload_part)
    monkeypatch.setattr(client, "abort_multipart_upload", abort_multipart_upload)
    with pytest.raises(OSError, match="connection reset"):
        upload(big, bucket, "run/big.tar", digest, 5 * MIB)
    assert sent == [1, 2]
    left = [u["Key"] for u in client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]
    assert left == (["run/big.tar"] if abort_fails else [])  # aborted; else the next run aborts it


def test_a_store_that_gives_other_etags_is_not_sent_the_same_bytes_again(s3, tmp_path, monkeypatch):
    """A store whose ETags are not MD5s (KMS): the record holds the ETag the store gave each upload;
    a rerun takes an object with that ETag for the same bytes; a listing names only what is under the
    URL; a file listed but missing is one clear error."""
    monkeypatch.chdir(tmp_path)
    url = s3.bucket("kms") + "/run"
    files = random_files(Path("set"), 2, 1000)
    storage.client().put_object(Bucket="kms", Key="elsewhere/x", Body=b"x")
    assert set(storage.listing("kms", "run/")) == set() and set(storage.listing("kms", "")) == {"elsewhere/x"}
    real_listing, real_upload = publish_job.listing, publish_job.upload

    def kms_etag(key: str) -> str:
        return "kms-" + hashlib.sha256(key.encode()).hexdigest()[:16]

    def kms_listing(bucket, prefix):
        return {k: (size, kms_etag(k)) for k, (size, _) in real_listing(bucket, prefix).items()}

    def kms_upload(path, bucket, key, digest, part_size):
        real_upload(path, bucket, key, digest, part_size)
        return kms_etag(key)

    monkeypatch.setattr(publish_job, "listing", kms_listing)
    monkeypatch.setattr(publish_job, "upload", kms_upload)
    settings = PublishSettings(url, part_mb=5, workers=1)
    assert publish(settings, files, "published.json")["uploaded"] == 2
    assert publish(settings, files, "published.json")["uploaded"] == 0  # recognized by the record
    record = json.loads(storage.client().get_object(Bucket="kms", Key=f"run/{RECORD}")["Body"].read())
    assert {f: o["etag"] for f, o in record["objects"].items()} == {f: kms_etag(f"run/{f}") for f in files}
    Path(files[0]).unlink()
    with pytest.raises(SharflowError) as e:
        publish(settings, files, "published.json")
    assert str(e.value) == f"{files[0]}: listed for publishing but missing; rerun the workflow to make it"


def test_keys_and_urls_under_a_publish_url_whatever_its_slashes():
    for url, key, record in (
        ("s3://bucket/runX/", "runX/a/b.tar", "s3://bucket/runX/sharflow_published.json"),
        ("s3://bucket//x//", "x/a/b.tar", "s3://bucket//x/sharflow_published.json"),
        ("s3://bucket", "a/b.tar", "s3://bucket/sharflow_published.json"),
    ):
        target = publish_job._Target(url)
        assert (target.bucket, target.key("a/b.tar"), target.url(RECORD)) == ("bucket", key, record)


@pytest.mark.parametrize("other", ["format", "part_size"])
def test_a_local_record_of_another_format_or_part_size_is_not_trusted(s3, tmp_path, monkeypatch, other):
    """The digests of a local record written by another format or for another part size are read
    again, not taken (a record with a bogus ETag for an unchanged file shows which)."""
    monkeypatch.chdir(tmp_path)
    url = s3.bucket(f"last-{other.replace('_', '-')}") + "/run"
    files = random_files(Path("set"), 2, 1000)
    settings = PublishSettings(url, part_mb=5, workers=1)

    def tamper(**changes) -> None:
        """Digests that are not the files' (shows whether they are taken), and the record's `changes`."""
        local = json.loads(Path("published.json").read_text())
        for digest in local["digests"].values():
            digest[2:] = ["0" * 32, "f" * 64]
        Path("published.json").write_text(json.dumps({**local, **changes}))

    publish(settings, files, "published.json")
    tamper()
    assert publish(settings, files, "published.json")["uploaded"] == 2  # trusted: same format and size
    publish(settings, files, "published.json")
    tamper(**{other: json.loads(Path("published.json").read_text())[other] + 1})
    assert publish(settings, files, "published.json")["uploaded"] == 0  # read again: the same bytes


def test_publishing_to_a_missing_bucket_is_one_clear_error_and_publishes_nothing(s3, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    files = random_files(Path("set"), 2, 100)
    with pytest.raises(storage.StorageError, match=r"s3://no-such-bucket/run .*does not exist"):
        publish(PublishSettings("s3://no-such-bucket/run"), files, "published.json")
    assert not Path("published.json").exists()


_PUBLISHER = """
import sys
from sharflow.publish import PublishSettings, publish, published_files
files = sys.argv[2:]
publish(PublishSettings(sys.argv[1], part_mb=5, workers=1), files, "published.json")
"""


def test_a_publisher_killed_midway_is_completed_by_a_rerun_nothing_twice_the_record_last(s3, tmp_path):
    """SIGKILL of the publishing process (a real client, a real server) while it uploads."""
    url = s3.bucket("killed", versioned=True) + "/set"
    os.chdir(tmp_path)
    try:
        files = random_files(Path("shards"), 120, 64 * 1024) + random_files(Path("big"), 3, 6 * MIB, seed=5)
        cmd = [sys.executable, "-c", _PUBLISHER, url, *files]
        proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(_versions("killed", "set/")) < 30:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        before = _versions("killed", "set/")
        assert 30 <= len(before) < len(files) and f"set/{RECORD}" not in before, "killed too late to test"
        done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        after = _versions("killed", "set/")
        assert set(after) == {f"set/{f}" for f in files} | {f"set/{RECORD}"}
        assert all(len(v) == 1 for v in after.values()), "an object was published twice"
        assert {k: v[0]["VersionId"] for k, v in before.items()} == {
            k: after[k][0]["VersionId"] for k in before
        }
        record_time = after[f"set/{RECORD}"][0]["LastModified"]
        assert all(v[0]["LastModified"] <= record_time for v in after.values())
        assert not storage.client().list_multipart_uploads(Bucket="killed").get("Uploads")
    finally:
        os.chdir(REPO)


# ---- the workflow: the Slurm run read the demo from the server and published to it ---------------
def _get(url: str) -> bytes:
    bucket, key = storage.split_url(url)
    return storage.client().get_object(Bucket=bucket, Key=key)["Body"].read()


def test_a_run_from_object_storage_publishes_the_local_runs_shar_byte_for_byte(slurm_run, two_datasets, s3):
    from test_slurm import PUBLISHED

    work = slurm_run[0]
    local = two_datasets[0] / "results" / "demo" / "shar"
    record = json.loads(_get(f"{PUBLISHED}/{RECORD}"))
    published = sorted(p for p in record["objects"] if p.startswith("results/demo/shar/"))
    assert published == sorted(
        str(p.relative_to(work)) for p in (work / "results" / "demo" / "shar").rglob("*") if p.is_file()
    )
    assert len(published) == 12 * 5 * 2  # 12 shards: cuts, target and context audio, two code fields, each
    assert len([p for p in published if p.endswith(".idx")]) == 12 * 5  # with its index
    for rel in published:
        data = _get(f"{PUBLISHED}/{rel}")
        assert data == (local / Path(rel).relative_to("results/demo/shar")).read_bytes(), rel
        assert record["objects"][rel]["size"] == len(data)
    stats = json.loads((work / "results" / "published.json").read_text())["stats"]
    assert stats["uploaded"] == stats["files"] == len(record["objects"])
    assert stats["requests"] <= stats["files"] + 3  # a PUT each, the listings and the record


def test_nemo_reads_every_published_cut_from_object_storage(slurm_run, s3):
    import torch
    import yaml
    from lhotse import CutSet
    from nemo.collections.common.data.lhotse.dataloader import get_lhotse_dataloader_from_config
    from omegaconf import OmegaConf
    from test_slurm import PUBLISHED

    train = yaml.safe_load(_get(f"{PUBLISHED}/results/input_cfg.yaml"))
    (entry,) = train["input_cfg"]
    assert all(p.startswith(f"{PUBLISHED}/results/demo/shar/") for p in entry["shar_path"].values())

    class Audio(torch.utils.data.Dataset):
        def __getitem__(self, batch: CutSet):
            return [(c.id, len(c.target_audio.load_audio()[0]), c.context_codes.load().shape) for c in batch]

    config = {**train, "batch_size": 8, "num_workers": 0, "seed": 0, "shuffle": False, "force_finite": True}
    config.update(use_bucketing=False, shard_seed=0)
    loader = get_lhotse_dataloader_from_config(
        OmegaConf.create(config), global_rank=0, world_size=1, dataset=Audio()
    )
    seen = [item for batch in loader for item in batch]
    assert len(seen) == 56 == len({cut_id for cut_id, _, _ in seen})
    assert all(samples > 0 and shape[0] > 0 for _, samples, shape in seen)


def test_no_credential_appears_in_any_log(slurm_run, s3):
    work, output, _, _ = slurm_run
    assert S3_SECRET not in output and os.environ["AWS_SECRET_ACCESS_KEY"] == S3_SECRET
    logs = [
        p
        for p in work.rglob("*")
        if p.is_file() and (p.suffix in (".log", ".out", ".err") or "log" in p.parts)
    ]
    assert len(logs) > 20
    for path in logs:
        assert S3_SECRET.encode() not in path.read_bytes(), path
