"""sharflow.models.phoneme_dict: MagpieTTS's english_phoneme tokenizer built offline, as NeMo builds it.

NeMo's own files (scripts/tts_dataset_files/ in its repository) are not installed; what they give was
read from them by hand (2026-11-27, NeMo main): the lines quoted below are theirs, and so is the
tokenizer's vocabulary (NeMo's IPATokenizer over ipa_cmudict-0.7b_nv23.01.txt, the config of
magpietts_en.yaml), less À and É, which no English text reaches (docs: text).
"""

import pytest

from sharflow.models import phoneme_dict
from sharflow.models.tokenizers import Tokenizers, encode

# (ARPAbet of NeMo's cmudict-0.7b_nv22.10, the IPA line of its ipa_cmudict-0.7b_nv23.01.txt)
NEMO_LINES = {
    "ABSTRACT": ("AE0 B S T R AE1 K T", "æbˈstɹækt"),
    "ABSTRACT(1)": ("AE1 B S T R AE2 K T", "ˈæbˌstɹækt"),
    "CONSTITUTION": ("K AA2 N S T AH0 T UW1 SH AH0 N", "ˌkɑnstəˈtuʃən"),
    "TOMATO": ("T AH0 M EY1 T OW2", "təˈmeɪˌtoʊ"),
    "NVIDIA": ("EH0 N V IH1 D IY0 AH0", "ɛnˈvɪdiə"),
    "MUSTANG": ("M AH1 S T AE2 NG", "ˈmʌsˌtæŋ"),
    "ABUSE": ("AH0 B Y UW1 S", "əbˈjus"),
    "WORLD": ("W ER1 L D", "ˈwɝld"),
    "AEROSMITH": ("EH1 R OW0 S M IH2 TH", "ˈɛɹoʊsˌmɪθ"),
}
# NeMo's english_phoneme tokens, in its order, but À and É (between "}" and "æ")
NEMO_TOKENS = (
    list("!\"'(),-./0123456789:;?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abdefhijklmnopstuvwz{}")
    + list("æðŋɑɔəɚɛɝɡɪɹʃʊʌʒˈˌθ")
    + [" ", "<pad>", "<oov>"]
)


@pytest.mark.parametrize("word", list(NEMO_LINES))
def test_arpabet_becomes_nemos_ipa(word):
    arpabet, ipa = NEMO_LINES[word]
    assert phoneme_dict.to_ipa(arpabet.split()) == ipa


def test_the_dictionary_is_written_as_ipag2p_reads_it():
    lines = phoneme_dict.dictionary_lines([("tomato", [["T", "AH0", "M", "EY1", "T", "OW2"], ["T", "AH0"]])])
    assert lines == ["TOMATO  təˈmeɪˌtoʊ", "TOMATO(1)  tə"]


@pytest.fixture(scope="module")
def english(tmp_path_factory):
    return Tokenizers(None, str(tmp_path_factory.mktemp("cache"))).get("english_phoneme")


def test_english_phoneme_builds_here_with_nemos_vocabulary(english):
    from nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers import IPATokenizer

    assert isinstance(english, IPATokenizer)
    assert english.tokens == NEMO_TOKENS
    assert len(english.g2p.phoneme_dict) > 120_000  # the whole CMU dictionary, not a sample


def test_english_phoneme_reads_known_words_as_phonemes_every_time(english):
    """MagpieTTS reads a known word as letters one time in five (phoneme_probability 0.8); the measure
    reads it as phonemes every time, so the same text gives the same count (and letters are seen)."""
    text = "Hello there, the world of 3 mustangs. " * 20
    drawn = {english.tokens[i] for i in english.encode(text)}  # NeMo's own path: 120 draws at 0.8
    assert drawn & set("HELOTRWDFMUSANG")  # some words spelled out (missing them: 0.8^120, ~2e-12)
    counts = {encode(english, text).tokens for _ in range(5)}
    assert len(counts) == 1
    with english.set_phone_prob(1.0):
        spelled = "".join(english.tokens[i] for i in english.encode("Hello there, 3 mustangs."))
    assert spelled == "həˈloʊ ˈðɛɹ, 3 ˈmʌsˌtæŋz."
    assert encode(english, "Hello there, 3 mustangs.").skipped == ()
    assert encode(english, "smørrebrød").skipped == ("Ø", "Ø")  # a letter outside its vocabulary
