import json

import pytest

from sharflow.manifest import REASONS, Accepted, CheckSettings, Rejected, check_line
from testkit import write_tone


@pytest.fixture
def root(tmp_path):
    write_tone(tmp_path / "root" / "spk" / "a.wav", 2.0)
    write_tone(tmp_path / "root" / "long.flac", 6.0, 22050)
    write_tone(tmp_path / "root" / "empty.wav", 0.0)
    (tmp_path / "root" / "junk.wav").write_bytes(b"this is not audio at all" * 10)
    return tmp_path / "root"


def check(record, root, **kw):
    raw = (
        record
        if isinstance(record, bytes)
        else (record if isinstance(record, str) else json.dumps(record)).encode()
    )
    return check_line(raw, CheckSettings("demo", str(root), **kw))


def good(**kw):
    return {"audio_filepath": "spk/a.wav", "duration": 2.0, "text": "Hello.", "speaker": "s1", **kw}


def test_good_record_is_standardized(root):
    result = check(good(normalized_text="hello", cer=0.01), root)
    assert isinstance(result, Accepted)
    out = json.loads(result.line)
    assert out == {
        "audio_filepath": "spk/a.wav",
        "offset": 0.0,
        "duration": 2.0,
        "text": "Hello.",
        "speaker": "| Language:en Dataset:demo Speaker:s1 |",
        "normalized_text": "hello",
        "cer": 0.01,
        "source_audio": {"sampling_rate": 16000, "num_samples": 32000, "num_channels": 1},
    }


def test_segment_with_offset_inside_a_long_file(root):
    result = check(good(audio_filepath="long.flac", offset=2.5, duration=3.0), root)
    assert isinstance(result, Accepted)
    assert json.loads(result.line)["offset"] == 2.5


@pytest.mark.parametrize(
    "record, reason",
    [
        ("{not json", "malformed_json"),
        ("", "malformed_json"),
        (b"\xff\xfe{}", "malformed_json"),
        ("[1, 2]", "not_an_object"),
        ({"duration": 2.0, "text": "x", "speaker": "s"}, "missing_field"),
        (good(duration="2.0"), "bad_type"),
        (good(duration=True), "bad_type"),
        (good(audio_filepath=7), "bad_type"),
        (good(duration=0), "bad_duration"),
        (good(duration=-1.5), "bad_duration"),
        (good(offset=-0.1), "bad_duration"),
        (good(text="   "), "empty_text"),
        (good(speaker="two words"), "bad_speaker"),
        (good(speaker="| Language:en Speaker:x |"), "bad_speaker"),
        (good(audio_filepath="../outside.wav"), "path_escapes_root"),
        (good(audio_filepath="/etc/passwd"), "path_escapes_root"),
        (good(audio_filepath="spk/missing.wav"), "missing_audio"),
        (good(audio_filepath="junk.wav"), "unreadable_audio"),
        (good(audio_filepath="empty.wav"), "zero_length_audio"),
        (good(duration=2.5), "duration_mismatch"),
        (good(audio_filepath="long.flac", offset=4.0, duration=3.0), "duration_mismatch"),
    ],
)
def test_each_bad_record_gets_its_reason(root, record, reason):
    result = check(record, root)
    assert isinstance(result, Rejected), result
    assert result.reason == reason, result.detail
    assert result.reason in REASONS and result.detail


def test_tolerance_is_honoured(root):
    assert isinstance(check(good(duration=2.05), root), Accepted)
    assert isinstance(check(good(duration=2.05), root, duration_tolerance=0.01), Rejected)


def test_audio_only_datasets_may_skip_text(root):
    record = good()
    del record["text"]
    assert check(record, root).reason == "missing_field"
    out = json.loads(check(record, root, require_text=False).line)
    assert out["text"] == ""
