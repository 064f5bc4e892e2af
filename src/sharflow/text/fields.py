"""One record's text fields as NeMo reads them: a pure function of the record, the settings and the tools.

- `lang` (the cut's, where MagpieTTS reads it): the record's own, else its speaker's Language (the
  dataset's `language` for plain speaker ids).
- `tokenizer_names` (the cut's): the record's own, else the dataset's, else NeMo's tokenizer for the
  language (DEFAULT_TOKENIZERS, the first name of NeMo's LANGUAGE_TOKENIZER_MAP), else
  english_phoneme as NeMo falls back (counted, and warned about).
- `normalized_text`, what the model reads, and `normalized_text_source` (manifest, renormalized,
  normalizer or text), by the dataset's `normalized_text` policy (NORMALIZED_TEXT_POLICIES); `text`
  stays the manifest's. A manifest's own normalized_text is a claim: by default (`check_manifest`)
  one that still holds digits or symbols (`left_over`) is normalized again, and every spoken form kept
  with digits or symbols is counted by its source. A record whose text cannot get a clean spoken form
  (no normalizer for its language, or digits and symbols left in it) follows the dataset's
  `unnormalizable` policy.
- `tokenizer_dropped_chars`: what the most wasteful of the cut's tokenizers skips of
  normalized_text (null where none of them can be built here), the skipped symbols in
  `tokenizer_dropped` when there are any.
- `ipa` (opt-in) and `context_text` (a per-dataset value, never invented).
"""

import json
import unicodedata
from dataclasses import dataclass, field
from typing import Protocol

from sharflow.core.speakers import parse_speaker

# What MagpieTTS takes for a language (NeMo's LANGUAGE_TOKENIZER_MAP, first name; a test compares).
DEFAULT_TOKENIZERS: dict[str, str] = {
    "en": "english_phoneme",
    "de": "german_phoneme",
    "es": "spanish_phoneme",
    "fr": "french_chartokenizer",
    "it": "italian_phoneme",
    "vi": "vietnamese_phoneme",
    "zh": "mandarin_phoneme",
    "hi": "hindi_chartokenizer",
    "ja": "japanese_phoneme",
}
FALLBACK_TOKENIZER = (
    "english_phoneme"  # NeMo's for a cut without tokenizer_names or a language it has none for
)

NORMALIZED_TEXT_POLICIES: dict[str, str] = {
    "check_manifest": "a record's own normalized_text is kept unless digits or symbols are left in it; "
    "then it is normalized again (the manifest's moves to manifest_normalized_text); a record without one "
    "gets the normalizer's",
    "keep_manifest": "a record's own normalized_text is kept as it is, unchecked (corpora whose spoken "
    "forms are known to be clean); a record without one gets the normalizer's",
    "normalizer": "every record gets the normalizer's (a manifest's own moves to manifest_normalized_text)",
    "require_manifest": "a record must bring its own; one without is rejected (no normalizer is built)",
    "text": "a record's own is kept; one without reads its text as it is (no normalizer is built)",
}
UNNORMALIZABLE_POLICIES: dict[str, str] = {
    "pass": "keep what there is (the text, or the spoken form with what is left), counted in the stats",
    "reject": "reject the record (unnormalizable_text)",
}
REASONS: dict[str, str] = {
    "bad_text_field": "lang, tokenizer_names, normalized_text or context_text has the wrong type",
    "empty_normalized_text": "the manifest's normalized_text is empty or null (it would train on that)",
    "no_normalized_text": "normalized_text: require_manifest, and the record has none",
    "normalizes_to_nothing": "the normalizer's spoken form of the text holds no letter (nothing to say)",
    "unnormalizable_text": "no normalizer for the record's language, the normalizer failed on the text, or "
    "digits or symbols are left in its spoken form (unnormalizable: reject)",
    "tokenizer_reads_nothing": "one of the cut's tokenizers skips every character of what it reads",
}
SOURCES = ("manifest", "renormalized", "normalizer", "text")
_LEFT_OVER = frozenset("%‰#&@")  # punctuation that stands for words


class Tools(Protocol):
    """What the decision needs from the outside world (text.job gives the real ones)."""

    def spoken(self, text: str, language: str) -> str | None: ...  # None: no normalizer

    def dropped(self, text: str, names: list[str]) -> tuple[int | None, int | None, list[str]]: ...

    def ipa(self, text: str, language: str) -> str: ...


@dataclass(frozen=True)
class TextSettings:
    """A dataset's text settings (datasets.<name> in the config)."""

    require_text: bool = True
    normalized_text: str = "check_manifest"
    unnormalizable: str = "pass"
    tokenizer_names: tuple[str, ...] | None = None
    context_text: str | None = None
    ipa: bool = False

    @property
    def normalizes(self) -> bool:
        """Whether records of the dataset may need the normalizer."""
        return self.normalized_text in ("check_manifest", "keep_manifest", "normalizer")


@dataclass
class Decision:
    """A record's text fields (`record`), or why it is rejected; and what the stats count of it."""

    record: dict | None = None
    reason: str | None = None
    detail: str = ""
    # what the stats count: symbols_left:<source>, no_normalizer:<lang>, normalizer_failed:<lang>,
    # fallback_tokenizer:<lang>, unmeasured:<tokenizer name>
    notes: list[str] = field(default_factory=list)


class _Reject(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def left_over(spoken: str) -> str:
    """Digits and symbols left in a spoken form (characters of Unicode categories N and S, and
    punctuation that stands for words: % ‰ # & @), each once, in order."""
    seen = dict.fromkeys(c for c in spoken if unicodedata.category(c)[0] in "NS" or c in _LEFT_OVER)
    return "".join(seen)


def decide(record: dict, settings: TextSettings, tools: Tools) -> Decision:
    """The text fields of one record (see the module docstring), or its reject reason."""
    notes: list[str] = []
    try:
        out = dict(record)
        lang = _language(record)
        out["lang"] = lang
        out["tokenizer_names"] = _tokenizer_names(record, settings, lang, notes)
        text, source = _normalized_text(record, settings, lang, tools, notes, out)
        out["normalized_text"], out["normalized_text_source"] = text, source
        _context_text(out, settings)
        if settings.ipa and "ipa" not in record:
            out["ipa"] = tools.ipa(text, lang)
        _coverage(out, text, tools, notes)
    except _Reject as r:
        return Decision(reason=r.reason, detail=r.detail, notes=notes)
    return Decision(record=out, notes=notes)


def _language(record: dict) -> str:
    if "lang" not in record:
        return parse_speaker(record["speaker"]).language
    lang = record["lang"]
    if not isinstance(lang, str) or not lang.strip():
        raise _Reject("bad_text_field", f"lang = {json.dumps(lang)} is not a language code")
    return lang.strip()


def _tokenizer_names(record: dict, settings: TextSettings, lang: str, notes: list[str]) -> list[str]:
    names = record.get("tokenizer_names")
    if names is None:
        if settings.tokenizer_names:
            return list(settings.tokenizer_names)
        if lang not in DEFAULT_TOKENIZERS:
            notes.append(f"fallback_tokenizer:{lang}")
        return [DEFAULT_TOKENIZERS.get(lang, FALLBACK_TOKENIZER)]
    names = [names] if isinstance(names, str) else names
    if not (isinstance(names, list) and names and all(isinstance(n, str) and n for n in names)):
        raise _Reject(
            "bad_text_field",
            f"tokenizer_names = {json.dumps(record['tokenizer_names'])} is not a list of names",
        )
    return names


def _normalized_text(
    record: dict, settings: TextSettings, lang: str, tools: Tools, notes: list[str], out: dict
) -> tuple[str, str]:
    """(normalized_text, its source) by the dataset's policy; a manifest's own value replaced by the
    normalizer's moves to manifest_normalized_text."""
    text = record["text"]
    if not text.strip() and not settings.require_text:  # an audio-only dataset: nothing to read
        return text, "text"
    policy, has_own = settings.normalized_text, "normalized_text" in record
    if has_own and policy != "normalizer":
        own = record["normalized_text"]
        if own is not None and not isinstance(own, str):
            raise _Reject("bad_text_field", f"normalized_text = {json.dumps(own)} is not a string")
        if not (own or "").strip():
            raise _Reject("empty_normalized_text", f"normalized_text is {json.dumps(own)}; text: {text!r}")
        if not left_over(own):
            return own, "manifest"
        if policy != "check_manifest":  # trusted as it is: counted, kept
            notes.append("symbols_left:manifest")
            return own, "manifest"
        # normalized again from itself, not from text: it keeps the manifest's own readings ("the
        # nineties", "chapter", "Street") and expands only what is left (docs: text, measured)
        out.pop("normalized_text")
        out["manifest_normalized_text"] = own
        spoken, source = _spoken(own, lang, settings, tools, notes, "renormalized")
        if source != "normalizer":  # no normalizer for the language (unnormalizable: pass): kept as it is
            out.pop("manifest_normalized_text")
            notes.append("symbols_left:manifest")
            return own, "manifest"
        return spoken, "renormalized"
    if policy == "require_manifest":
        raise _Reject(
            "no_normalized_text", f"no normalized_text (normalized_text: require_manifest); text: {text!r}"
        )
    if policy == "text":
        return text, "text"
    if has_own:
        out.pop("normalized_text")
        out["manifest_normalized_text"] = record["normalized_text"]
    return _spoken(text, lang, settings, tools, notes)


def _spoken(
    text: str, lang: str, settings: TextSettings, tools: Tools, notes: list[str], source: str = "normalizer"
) -> tuple[str, str]:
    try:
        spoken = tools.spoken(text, lang)
        why, note = f"no normalizer for language {lang!r}", f"no_normalizer:{lang}"
    except Exception as e:  # a grammar that fails on one input: that record only
        spoken, why = None, f"the {lang!r} normalizer failed ({type(e).__name__}: {e})"
        note = f"normalizer_failed:{lang}"
    if spoken is None:
        notes.append(note)
        if settings.unnormalizable == "reject":
            raise _Reject("unnormalizable_text", f"{why}; text: {text!r}")
        return text, "text"
    spoken = spoken.strip()
    if not any(unicodedata.category(c)[0] == "L" for c in spoken):
        raise _Reject("normalizes_to_nothing", f"the spoken form {spoken!r} of {text!r} holds no letter")
    left = left_over(spoken)
    if left:
        notes.append(f"symbols_left:{source}")
        if settings.unnormalizable == "reject":
            raise _Reject("unnormalizable_text", f"{left!r} left in the spoken form {spoken!r} of {text!r}")
    return spoken, "normalizer"


def _context_text(out: dict, settings: TextSettings) -> None:
    if "context_text" in out:
        if not isinstance(out["context_text"], str):
            raise _Reject(
                "bad_text_field", f"context_text = {json.dumps(out['context_text'])} is not a string"
            )
    elif settings.context_text is not None:
        out["context_text"] = settings.context_text


def _coverage(out: dict, text: str, tools: Tools, notes: list[str]) -> None:
    dropped, tokens, symbols = tools.dropped(text, out["tokenizer_names"])
    if dropped is None:
        notes.extend(f"unmeasured:{name}" for name in out["tokenizer_names"])
    if tokens == 0 and text.strip():
        raise _Reject(
            "tokenizer_reads_nothing", f"the cut's tokenizers skip all of {text!r} ({''.join(symbols)})"
        )
    out["tokenizer_dropped_chars"] = dropped
    if symbols:
        out["tokenizer_dropped"] = symbols
