import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharflow.prepare.manifest import REASONS, Accepted, CheckSettings, Rejected, check_line
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
    assert result.key == ("long.flac", 250000, 300000)  # the duplicate key: 10 µs steps
    assert result.duration == 3.0 and result.speaker == "| Language:en Dataset:demo Speaker:s1 |"


def test_text_is_written_as_it_is_not_escaped(root):
    result = check(good(text="Zoë sagt: «Grüß dich»", audio_filepath="spk/./a.wav", offset=0.000014), root)
    assert "Zoë sagt: «Grüß dich»" in result.line
    assert result.key == ("spk/a.wav", 1, 200000)


@pytest.mark.parametrize(
    "record, reason, detail, duration",
    [
        ("{not json", "malformed_json", "Expecting property name enclosed in double quotes.*", None),
        ("", "malformed_json", "blank line", None),
        (b"\xff\xfe{}", "malformed_json", "not valid UTF-8: 'utf-8' codec can't decode byte 0xff.*", None),
        ("[1, 2]", "not_an_object", "expected a JSON object, got list", None),
        ({"duration": 2.0, "text": "x", "speaker": "s"}, "missing_field", "missing audio_filepath", None),
        ({"audio_filepath": "a.wav"}, "missing_field", "missing duration, speaker, text", None),
        (good(duration="2.0"), "bad_type", r"duration = '2\.0' \(str\)", None),
        (good(duration=True), "bad_type", r"duration = True \(bool\)", None),
        (good(audio_filepath=7), "bad_type", r"audio_filepath = 7 \(int\)", None),
        (good(audio_filepath=""), "bad_type", r"audio_filepath = '' \(str\)", None),
        (good(offset="0"), "bad_type", r"offset = '0' \(str\)", None),
        (good(text=5), "bad_type", r"text = 5 \(int\)", None),
        (good(duration=0), "bad_duration", "duration = 0 is not a positive number", None),
        (good(duration=-1.5), "bad_duration", "duration = -1.5 is not a positive number", None),
        (good(offset=-0.1), "bad_duration", "offset = -0.1 is negative or not finite", 2.0),
        (good(text="   "), "empty_text", "text is empty", 2.0),
        (good(speaker="two words"), "bad_speaker", ".*two words.*", 2.0),
        (good(speaker="| Language:en Speaker:x |"), "bad_speaker", ".*Language:en Speaker:x.*", 2.0),
        (good(audio_filepath="../outside.wav"), "path_escapes_root", r".*\.\./outside\.wav.*", 2.0),
        (good(audio_filepath="/etc/passwd"), "path_escapes_root", ".*/etc/passwd.*", 2.0),
        (good(audio_filepath="spk/missing.wav"), "missing_audio", "no file at .*/root/spk/missing.wav", 2.0),
        (good(audio_filepath="junk.wav"), "unreadable_audio", ".*/root/junk.wav: .+", 2.0),
        (
            good(audio_filepath="empty.wav", duration=1e-3),
            "zero_length_audio",
            ".*/root/empty.wav holds no samples",
            1e-3,
        ),
        (
            good(duration=2.5),
            "duration_mismatch",
            r"offset 0\.0 \+ duration 2\.5 vs file duration 2\.0000 s "
            r"\(off by 0\.5000 s > tolerance 0\.1 s\)",
            2.5,
        ),
        (
            good(audio_filepath="long.flac", offset=4.0, duration=3.0),
            "duration_mismatch",
            r"offset 4\.0 \+ duration 3\.0 vs file duration 6\.0000 s "
            r"\(off by 1\.0000 s > tolerance 0\.1 s\)",
            3.0,
        ),
    ],
)
def test_each_bad_record_gets_its_reason_detail_and_duration(root, record, reason, detail, duration):
    """The reason, the detail a person reads (exact), and the duration counted in the rejected hours
    (None while the duration itself is not yet known to be good)."""
    import re

    result = check(record, root)
    assert isinstance(result, Rejected), result
    assert result.reason == reason, result.detail
    assert result.reason in REASONS
    assert re.fullmatch(detail, result.detail), result.detail
    assert result.duration == duration


def test_offset_zero_and_the_smallest_duration_pass_and_whitespace_text_is_empty(root):
    assert (
        json.loads(check(good(audio_filepath="long.flac", offset=0, duration=5e-324), root).line)["offset"]
        == 0
    )
    assert isinstance(check(good(text=" x "), root), Accepted)
    assert check(good(text="\t\n"), root).reason == "empty_text"
    assert check(good(offset=float("nan")), root).detail == "offset = nan is negative or not finite"
    assert check(good(duration=float("inf")), root).detail == "duration = inf is not a positive number"


def test_tolerance_is_honoured(root):
    assert isinstance(check(good(duration=2.05), root), Accepted)
    assert isinstance(check(good(duration=2.05), root, duration_tolerance=0.01), Rejected)


def test_audio_only_datasets_may_skip_text(root):
    record = good()
    del record["text"]
    assert check(record, root).reason == "missing_field"
    out = json.loads(check(record, root, require_text=False).line)
    assert out["text"] == ""


@pytest.mark.parametrize("has_offset", [False, True])
def test_duration_tolerance_at_the_value_and_one_ulp_either_side(tmp_path, has_offset):
    """A 2.000 s file; tolerance 0.125 s (exact in binary, so the mismatch is exactly the tolerance)."""
    import math

    write_tone(tmp_path / "a.wav", 2.0)
    settings = CheckSettings("d", str(tmp_path), duration_tolerance=0.125)

    def reason(duration, offset=None):
        record = {"audio_filepath": "a.wav", "duration": duration, "text": "t", "speaker": "s"}
        if offset is not None:
            record["offset"] = offset
        result = check_line(json.dumps(record).encode(), settings)
        return result.reason if isinstance(result, Rejected) else "accepted"

    if has_offset:  # a segment must end within the file + tolerance; starting early is fine
        assert reason(1.125, offset=1.0) == "accepted"  # ends at 2.125: off by exactly 0.125
        # one ulp of the end (offset + duration), not of the duration: that would round away
        assert reason(math.nextafter(2.125, 3) - 1.0, offset=1.0) == "duration_mismatch"
        assert reason(math.nextafter(2.125, 0) - 1.0, offset=1.0) == "accepted"
        assert reason(0.5, offset=0.25) == "accepted"
    else:  # a whole file: its duration must match the file's either way
        for edge, outside in ((2.125, math.inf), (1.875, 0.0)):
            assert reason(edge) == "accepted"
            assert reason(math.nextafter(edge, outside)) == "duration_mismatch"
            assert reason(math.nextafter(edge, 2.0)) == "accepted"


ABSENT = object()


def expected_reason(record: dict, tolerance: float = 0.1) -> str:
    """The reason a record is rejected, from the documented checks in order (docs: reject reasons),
    written plainly (the file a.wav is 2.000 s; nope.wav does not exist; ../x.wav leaves the root)."""
    import math

    if any(k not in record for k in ("audio_filepath", "duration", "text", "speaker")):
        return "missing_field"
    path, duration, offset, text = (
        record["audio_filepath"],
        record["duration"],
        record.get("offset", 0.0),
        record["text"],
    )
    number = (int, float)
    if not isinstance(path, str) or path == "":
        return "bad_type"
    for value in (duration, offset):
        if isinstance(value, bool) or not isinstance(value, number):
            return "bad_type"
    if not isinstance(text, str):
        return "bad_type"
    if not (math.isfinite(duration) and duration > 0) or not (math.isfinite(offset) and offset >= 0):
        return "bad_duration"
    if not text.strip():
        return "empty_text"
    if record["speaker"] == "has space":
        return "bad_speaker"
    if path.startswith(".."):
        return "path_escapes_root"
    if path != "a.wav":
        return "missing_audio"
    end_error = offset + duration - 2.0 if "offset" in record else abs(duration - 2.0)
    return "duration_mismatch" if end_error > tolerance else "accepted"


def field(values):
    return st.sampled_from([ABSENT, *values])


@settings(max_examples=300, deadline=None)
@given(
    field(["a.wav", "nope.wav", "../x.wav", "", 5]),
    field([0.0, -1.0, 0.5, 1.9, 1.95, 2.0, 2.05, 2.2, 3.5, float("inf"), "2", True]),
    field([0.0, -0.5, 0.1, 1.0, 1.5, float("nan"), "0"]),
    field(["a text", "", " ", 3]),
    field(["s1", 12, "has space"]),
)
def test_any_record_gets_the_reason_the_readme_gives(tmp_path_factory, path, duration, offset, text, speaker):
    root = tmp_path_factory.getbasetemp() / "manifest_property"
    if not (root / "a.wav").exists():
        write_tone(root / "a.wav", 2.0)
    record = {
        k: v
        for k, v in zip(
            ("audio_filepath", "duration", "offset", "text", "speaker"),
            (path, duration, offset, text, speaker),
            strict=True,
        )
        if v is not ABSENT
    }
    result = check_line(json.dumps(record).encode(), CheckSettings("d", str(root)))
    got = result.reason if isinstance(result, Rejected) else "accepted"
    assert got == expected_reason(record), record
    if got == "accepted":
        prepared = json.loads(result.line)
        assert prepared["duration"] == duration and prepared["offset"] == record.get("offset", 0.0)


def test_duration_from_file_gives_a_whole_file_record_the_files_exact_length(tmp_path):
    """prepare.duration_from_file: a whole-file record (no offset, or offset 0 within the tolerance)
    takes the file's length; a segment from 0, a later segment and the setting off keep the manifest's."""
    write_tone(tmp_path / "a.wav", 33_333 / 16000)  # 2.0833125 s: a manifest rounds it to 2.083
    exact = 33_333 / 16000

    def duration(record, **settings):
        record = {"audio_filepath": "a.wav", "text": "t", "speaker": "s", **record}
        result = check_line(json.dumps(record).encode(), CheckSettings("d", str(tmp_path), **settings))
        assert isinstance(result, Accepted), result
        assert json.loads(result.line)["duration"] == result.duration
        return result.duration, result.from_file

    on = {"duration_from_file": True, "duration_tolerance": 0.125}
    assert duration({"duration": 2.083}, **on) == (exact, True)
    assert duration({"duration": 2.083, "offset": 0.0}, **on) == (exact, True)
    assert duration({"duration": exact}, **on) == (exact, False)  # already the file's: nothing changed
    assert duration({"duration": 2.083}) == (2.083, False)  # off by default: the manifest's, as NeMo keeps it
    # offset 0, a duration just inside / just outside the tolerance: a whole file / a segment from its start
    assert duration({"duration": exact - 0.125, "offset": 0.0}, **on) == (exact, True)
    assert duration({"duration": exact - 0.126, "offset": 0.0}, **on) == (exact - 0.126, False)
    assert duration({"duration": 1.0, "offset": 0.5}, **on) == (1.0, False)  # a segment later in the file
