"""The ASR check's scoring: one text normalization, and cer / wer of a transcript against the text.

One text normalization, applied to the reference and to the transcript before scoring (and to the
text that `speaking_rate` counts): Unicode NFKC, case folded, every character that is not a letter,
a combining mark, a digit or an apostrophe becomes a space, apostrophes at the edges of words are
dropped, runs of spaces become one. `cer` and `wer` are jiwer's character and word error rates of
the normalized transcript against the normalized reference (normalized_text where the manifest has
one, the spoken form an ASR model writes, else text); both are null when the reference normalizes
to nothing. They can exceed 1 (insertions).
"""

import unicodedata

from sharflow.core.metrics import ASR_METRICS, rounded

ASR_FIELDS = ("asr_text", *ASR_METRICS)  # what the ASR check adds to a record
_KEPT_CATEGORIES = ("L", "M", "N")  # letters, combining marks, digits


def normalize_text(text: str) -> str:
    """The text as scored: NFKC, case folded, punctuation to spaces, inner apostrophes kept."""
    chars = [
        c if c == "'" or unicodedata.category(c)[0] in _KEPT_CATEGORIES else " "
        for c in unicodedata.normalize("NFKC", text).casefold()
    ]
    words = (w.strip("'") for w in "".join(chars).split())
    return " ".join(w for w in words if w)


def reference_text(record: dict) -> str:
    """What a record's audio says: its normalized_text (spoken form) if it has one, else its text."""
    return record.get("normalized_text") or record.get("text") or ""


def error_rates(reference: str, hypothesis: str) -> dict[str, float | None]:
    """{cer, wer} of a transcript against a reference, both normalized first (None: empty reference)."""
    import jiwer

    ref, hyp = normalize_text(reference), normalize_text(hypothesis)
    if not ref:
        return {"cer": None, "wer": None}
    return {"cer": float(jiwer.cer(ref, hyp)), "wer": float(jiwer.wer(ref, hyp))}


def asr_fields(record: dict, transcript: str) -> dict:
    """{asr_text, cer, wer} of a record's transcript, the rates rounded as the registry says."""
    rates = error_rates(reference_text(record), transcript)
    return {"asr_text": transcript, **{k: rounded(k, v) for k, v in rates.items()}}
