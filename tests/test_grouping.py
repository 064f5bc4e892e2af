import pytest

from sharflow.context.grouping import group_key_function


def rec(path, speaker="| Language:en Dataset:d Speaker:92 |"):
    return {"audio_filepath": path, "speaker": speaker}


def test_default_groups_by_speaker_id():
    assert group_key_function()(rec("a.wav")) == "92"


def test_libritts_is_speaker_by_chapter():
    key = group_key_function("libritts")
    assert key(rec("train-clean-100/19/198/19_198_000000_000002.wav")) == "19_198"
    assert key(rec("train-clean-100/19/227/19_227_000001_000000.wav")) == "19_227"


def test_hifitts_is_speaker_by_book_by_chapter():
    key = group_key_function("hifitts")
    assert (
        key(rec("audio/92_clean/10425/thousandnights8_04_anonymous_0001.flac"))
        == "92/10425/thousandnights8_04"
    )


def test_hifitts2_drops_the_last_underscore_part():
    key = group_key_function("hifitts2")
    assert key(rec("x/book_ch03_seg_0012.flac")) == "92/book_ch03_seg"


def test_regex_over_path_or_speaker():
    key = group_key_function(regex=r"^(\w+)/session(\d+)/")
    assert key(rec("alice/session2/u1.wav")) == "alice/2"
    assert key(rec("odd.wav")).startswith("unmatched/")
    by_speaker = group_key_function(regex=r"Speaker:(\w+?)_", field="speaker")
    assert by_speaker(rec("a.wav", "| Language:en Dataset:d Speaker:bob_happy |")) == "bob"


def test_unknown_preset_is_refused():
    with pytest.raises(ValueError, match="unknown grouping preset"):
        group_key_function("vctk")
