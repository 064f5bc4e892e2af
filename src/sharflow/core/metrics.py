"""The metric registry: every per-utterance quality metric, named once.

The quality stage measures MEASURED on every record (sharflow.quality.metrics) and ASR_METRICS with
the ASR check; the text stage measures TEXT_METRICS (sharflow.text), which the quality stage passes
on with its own; quality.filters may name any of FILTERABLE (the schema's list is filled from it,
sharflow.core.config); the catalog has a float32 column for each of CATALOG_METRICS; the report
draws one panel per metric with the threshold sides of SIDES; the docs' metrics table is generated
from METRICS (sharflow.report.reference).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """One metric: its name, what it is and how it is measured (for the docs), and the side a
    threshold usually goes on: `min` (higher is better), `max` (lower is better) or both."""

    name: str
    what: str
    how: str
    sides: tuple[str, ...]
    asr: bool = False  # measured only by the ASR check (quality.asr)
    text: bool = False  # measured by the text stage, from the record's text
    null_passes: bool = False  # a null (not measurable here) passes a threshold instead of failing it
    digits: int = 6  # written rounded to this many decimals


_DNSMOS = (
    "the `sig_bak_ovr.onnx` weights shipped in the `speechmos` package (onnxruntime on a CPU rank, the "
    "same graph in torch on a GPU rank), at 16 kHz: a clip shorter than 9.01 s is repeated until it "
    "fills a window, windows of 144,160 samples every 16,000, each mapped by the published polynomials, "
    "averaged; 4 decimals"
)
_VAD = "Silero VAD (JIT weights shipped in `silero-vad`, default thresholds) at 16 kHz"

METRICS: tuple[Metric, ...] = (
    Metric("dnsmos_sig", "DNSMOS P.835 speech signal quality (1-5)", _DNSMOS, ("min",), digits=4),
    Metric("dnsmos_bak", "DNSMOS P.835 background noise quality (1-5)", _DNSMOS, ("min",), digits=4),
    Metric("dnsmos_ovrl", "DNSMOS P.835 overall quality (1-5)", _DNSMOS, ("min",), digits=4),
    Metric("speech_ratio", "seconds of speech / duration", _VAD, ("min",)),
    Metric(
        "leading_silence",
        "seconds before the first speech",
        f"{_VAD}; the whole duration without speech",
        ("max",),
    ),
    Metric(
        "trailing_silence",
        "seconds after the last speech",
        f"{_VAD}; the whole duration without speech",
        ("max",),
    ),
    Metric(
        "bandwidth_hz",
        "highest frequency whose mean power is within 50 dB of the peak",
        "Blackman-Harris STFT (512 points, 10 ms hop) at the source rate, as NeMo's speech-data-processor "
        "`EstimateBandwidth`",
        ("min",),
    ),
    Metric(
        "clipping_fraction", "fraction of samples at digital full scale (|x| >= 32767/32768)", "", ("max",)
    ),
    Metric(
        "loudness_lufs",
        "ITU-R BS.1770 integrated loudness",
        "`pyloudnorm`; null when shorter than 400 ms or all below the -70 LUFS gate",
        ("min", "max"),
    ),
    Metric(
        "speaking_rate",
        "characters of `normalized_text` (else `text`), normalized as the ASR check does, per second "
        "of speech",
        "null without speech",
        ("min", "max"),
    ),
    Metric(
        "tokenizer_dropped_chars",
        "symbols of `normalized_text` the cut's tokenizers skip (the most any one of them skips); 0: the "
        "model reads all of it",
        "NeMo's own tokenizers of `training.tokenizer` (without it, NeMo's char tokenizer of each language "
        "by its MagpieTTS name), built as MagpieTTS builds them, their skip warnings counted; null (passes "
        "any threshold) where none of the cut's `tokenizer_names` can be built here (phoneme tokenizers "
        "without their dictionaries)",
        ("max",),
        text=True,
        null_passes=True,
    ),
    Metric(
        "cer",
        "character error rate of the ASR transcript against the record's text",
        "jiwer, after one text normalization (docs: quality); null when the text normalizes to nothing",
        ("max",),
        asr=True,
    ),
    Metric(
        "wer",
        "word error rate of the ASR transcript against the record's text",
        "jiwer, after the same normalization",
        ("max",),
        asr=True,
    ),
)

MEASURED: tuple[str, ...] = tuple(m.name for m in METRICS if not (m.asr or m.text))  # every record's audio
TEXT_METRICS: tuple[str, ...] = tuple(m.name for m in METRICS if m.text)  # every record's text
ASR_METRICS: tuple[str, ...] = tuple(m.name for m in METRICS if m.asr)  # with the ASR check
FILTERABLE: tuple[str, ...] = MEASURED + TEXT_METRICS + ASR_METRICS  # what quality.filters may name
# The catalog's metric columns, in its published order: cer and wer first (a manifest may bring them
# without the quality stage), then the measured ones.
CATALOG_METRICS: tuple[str, ...] = ASR_METRICS + MEASURED + TEXT_METRICS
NULL_PASSES: frozenset[str] = frozenset(m.name for m in METRICS if m.null_passes)
SIDES: dict[str, tuple[str, ...]] = {m.name: m.sides for m in METRICS}
DIGITS: dict[str, int] = {m.name: m.digits for m in METRICS}


def rounded(name: str, value: float | None) -> float | None:
    """A metric's value as it is written: rounded to its DIGITS (None stays None)."""
    return None if value is None else round(float(value), DIGITS[name])
