"""Quality metrics of one utterance: the signal measures, and a record's metrics from every measure.

The models' measures come from sharflow.models: DNSMOS P.835 (`dnsmos`) and Silero VAD (`vad`),
each batched over many records on a rank's device; each record's values depend on its audio alone.
Here, from the record's audio at its source rate (on a CPU worker, beside the device):

- bandwidth_hz: the highest frequency whose mean power is within 50 dB of the spectrum's peak
  (Blackman-Harris STFT, 512-point, 10 ms hop, power in dB with a 100 dB floor), as NeMo's
  speech-data-processor `EstimateBandwidth` estimates it; at the source sample rate.
- clipping_fraction: the fraction of samples at digital full scale (|x| >= 32767/32768).
- loudness_lufs: ITU-R BS.1770 integrated loudness (`pyloudnorm`); null when the clip is shorter
  than one 400 ms gating block or lies entirely below the -70 LUFS absolute gate.

and from the VAD's speech spans: speech_ratio (speech seconds / duration), leading_silence and
trailing_silence (seconds before the first and after the last speech; the whole duration without
speech), speaking_rate (characters of normalized_text, else text, after sharflow.quality.text's
normalization, per second of speech; null without speech). Values are rounded as the registry
says (sharflow.core.metrics.DIGITS).
"""

import math

import numpy as np

from sharflow.core.metrics import MEASURED, rounded
from sharflow.quality.text import normalize_text, reference_text

MODEL_RATE = 16000  # DNSMOS and the VAD run at 16 kHz
FULL_SCALE = 32767 / 32768  # the largest positive PCM16 value as a float sample


def bandwidth_hz(
    audio: np.ndarray,
    rate: int,
    n_fft: int = 512,
    threshold_db: float = -50.0,
    top_db: float = 100.0,
) -> float:
    """Highest frequency whose mean STFT power is within |threshold_db| dB of the peak (0 if silent)."""
    from scipy.signal.windows import blackmanharris

    hop = max(1, rate // 100)
    if len(audio) < n_fft:
        audio = np.pad(audio, (0, n_fft - len(audio)))
    frames = np.lib.stride_tricks.sliding_window_view(audio.astype(np.float64), n_fft)[::hop]
    power = np.mean(np.abs(np.fft.rfft(frames * blackmanharris(n_fft, sym=False), axis=1)) ** 2, axis=0)
    db = 10.0 * np.log10(np.maximum(power, 1e-10) / n_fft)
    db = np.maximum(db, db.max() - top_db)
    above = np.flatnonzero(db - db.max() > threshold_db)
    return float(above[-1] * rate / n_fft) if len(above) and power.max() > 0 else 0.0


def clipping_fraction(audio: np.ndarray) -> float:
    """Fraction of samples at digital full scale."""
    return float(np.count_nonzero(np.abs(audio) >= FULL_SCALE) / max(1, len(audio)))


def loudness_lufs(audio: np.ndarray, rate: int) -> float | None:
    """BS.1770 integrated loudness, None when it is not measurable (too short, or all gated)."""
    import pyloudnorm

    meter = pyloudnorm.Meter(rate)
    if len(audio) < meter.block_size * rate:
        return None
    value = meter.integrated_loudness(audio.astype(np.float64))
    return float(value) if math.isfinite(value) else None


def signal_measures(audio: np.ndarray, rate: int) -> dict[str, float | None]:
    """bandwidth_hz, clipping_fraction and loudness_lufs of a clip at its source rate."""
    return {
        "bandwidth_hz": bandwidth_hz(audio, rate),
        "clipping_fraction": clipping_fraction(audio),
        "loudness_lufs": loudness_lufs(audio, rate),
    }


def speech_measures(spans: list[tuple[int, int]], num_samples: int, rate: int) -> dict[str, float]:
    """speech_ratio, leading/trailing_silence and speech_seconds of a clip from its speech spans."""
    speech = sum(e - s for s, e in spans)
    return {
        "speech_ratio": speech / num_samples,
        "leading_silence": (spans[0][0] if spans else num_samples) / rate,
        "trailing_silence": (num_samples - spans[-1][1] if spans else num_samples) / rate,
        "speech_seconds": speech / rate,
    }


def speaking_rate(record: dict, speech_seconds: float) -> float | None:
    """Characters of normalized_text (else text), as sharflow.quality.text normalizes it, per second of
    speech; None without speech."""
    return len(normalize_text(reference_text(record))) / speech_seconds if speech_seconds > 0 else None


def record_metrics(
    record: dict,
    *,
    signal: dict[str, float | None],
    dnsmos: dict[str, float],
    spans: list[tuple[int, int]],
    samples_16k: int,
) -> dict[str, float | None]:
    """Every metric of MEASURED (sharflow.core.metrics), rounded, for one record: its signal measures,
    its DNSMOS scores, and what follows from its VAD speech spans over its `samples_16k` samples."""
    vad = speech_measures(spans, samples_16k, MODEL_RATE)
    values = {
        **dnsmos,
        **signal,
        "speech_ratio": vad["speech_ratio"],
        "leading_silence": vad["leading_silence"],
        "trailing_silence": vad["trailing_silence"],
        "speaking_rate": speaking_rate(record, vad["speech_seconds"]),
    }
    return {name: rounded(name, values[name]) for name in MEASURED}
