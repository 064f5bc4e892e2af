import pytest

from sharflow.core.speakers import Speaker, SpeakerFormatError, parse_speaker, standardize_speaker


def test_plain_ids_are_wrapped_with_language_and_dataset():
    assert standardize_speaker("awb", "en", "demo") == "| Language:en Dataset:demo Speaker:awb |"
    assert standardize_speaker(1034, "de", "ls") == "| Language:de Dataset:ls Speaker:1034 |"


def test_standard_strings_are_kept_with_their_dataset():
    s = "| Language:en Dataset:HiFiTTS Speaker:9136_other |"
    assert standardize_speaker(s, "fr", "demo") == s
    assert parse_speaker(s) == Speaker("en", "HiFiTTS", "9136_other")


@pytest.mark.parametrize(
    "value",
    [
        "",
        "two words",
        "a|b",
        "| Language:en Dataset:x |",
        "| Language:en Dataset:a b Speaker:c |",
        True,
        1.5,
        None,
        ["x"],
    ],
)
def test_unusable_speakers_are_refused(value):
    with pytest.raises(SpeakerFormatError):
        standardize_speaker(value, "en", "demo")


def test_a_speaker_of_the_wrong_type_is_named():
    for value, kind in ((1.5, "float"), (None, "NoneType"), (["x"], "list")):
        with pytest.raises(
            SpeakerFormatError, match=rf"^speaker must be a string or integer id, got {kind}$"
        ):
            standardize_speaker(value, "en", "demo")


def test_dataset_name_is_where_nemo_reads_it():
    # NeMo takes the dataset name as speaker.strip().split()[2].split(":")[-1]
    s = standardize_speaker("spk", "en", "my_set")
    assert s.strip().split()[2].split(":")[-1] == "my_set"
