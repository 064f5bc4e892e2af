"""Quality metrics of one utterance: DNSMOS P.835, Silero VAD, and signal measures.

Every metric is computed from one record's audio alone (no batching across records), in one
thread per rank, so a record's values do not depend on which rank or part measured it.

- dnsmos_sig / dnsmos_bak / dnsmos_ovrl: DNSMOS P.835 (the `sig_bak_ovr.onnx` weights shipped in
  the `speechmos` package) on the 16 kHz signal, run with onnxruntime. Input pipeline: a clip
  shorter than the model's 9.01 s window is repeated until it fills one; windows of exactly 144,160
  samples start every 16,000 samples while a whole window fits; each window's raw (sig, bak, ovrl)
  goes through the published polynomial mapping and the clip's score is the mean over windows.
  Repeating a short clip makes many windows (a 4 s clip is tiled to 16 s: 7 windows, ~0.5 s of
  one CPU thread each); `max_windows` > 0 keeps only the first ones, trading fidelity to the
  published pipeline for speed on CPU.
- speech_ratio / leading_silence / trailing_silence: Silero VAD (the JIT weights shipped in the
  `silero-vad` package, its default thresholds) on the 16 kHz signal: speech seconds / duration,
  seconds before the first and after the last speech segment (the whole duration when there is no
  speech).
- bandwidth_hz: the highest frequency whose mean power is within 50 dB of the spectrum's peak
  (Blackman-Harris STFT, 512-point, 10 ms hop, power in dB with a 100 dB floor), as NeMo's
  speech-data-processor `EstimateBandwidth` estimates it; at the source sample rate.
- clipping_fraction: the fraction of samples at digital full scale (|x| >= 32767/32768).
- loudness_lufs: ITU-R BS.1770 integrated loudness (`pyloudnorm`); null when the clip is shorter
  than one 400 ms gating block or lies entirely below the -70 LUFS absolute gate.
- speaking_rate: characters of normalized_text (else text), after sharflow.quality.text's text
  normalization (case folded, punctuation dropped, single spaces), per second of detected speech;
  null when no speech is detected.
"""

import math
from dataclasses import dataclass
from importlib.resources import files

import numpy as np

from sharflow.core.metrics import MEASURED
from sharflow.quality.text import normalize_text, reference_text

MODEL_RATE = 16000
FULL_SCALE = 32767 / 32768  # the largest positive PCM16 value as a float sample
DIGITS = 6  # metrics are written rounded to this many decimals


# ---- DNSMOS -------------------------------------------------------------------------------------


class Dnsmos:
    """DNSMOS P.835 over onnxruntime: CUDA provider on a cuda device when the build has it, else CPU."""

    WINDOW = 144_160  # 9.01 s at 16 kHz: the model's fixed input length
    HOP = 16_000
    # The published mapping of raw model outputs to MOS (np.poly1d order: x², x, 1)
    SIG = (-0.08397278, 1.22083953, 0.0052439)
    BAK = (-0.13166888, 1.60915514, -0.39604546)
    OVRL = (-0.06766283, 1.11546468, 0.04602535)

    def __init__(self, device: str = "cpu", threads: int = 1, max_windows: int = 0):
        import onnxruntime as ort

        self.max_windows = max_windows
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        weights = files("speechmos") / "dnsmos_models" / "sig_bak_ovr.onnx"
        providers = self.providers(device, ort.get_available_providers())
        self.session = ort.InferenceSession(str(weights), opts, providers=providers)
        self.provider = self.session.get_providers()[0]
        self._input = self.session.get_inputs()[0].name

    @staticmethod
    def providers(device: str, available: list[str]) -> list:
        """onnxruntime's providers for a rank's device: CUDA on device `cuda:N` where this onnxruntime has
        it (onnxruntime-gpu), with CPU behind it; else CPU alone."""
        if device.startswith("cuda") and "CUDAExecutionProvider" in available:
            index = int(device.partition(":")[2] or 0)
            return [("CUDAExecutionProvider", {"device_id": index}), "CPUExecutionProvider"]
        return ["CPUExecutionProvider"]

    @classmethod
    def windows(cls, audio: np.ndarray, max_windows: int = 0) -> list[np.ndarray]:
        """The float32 windows of a 16 kHz clip, a short clip repeated until it fills one (the
        first `max_windows` of them when > 0)."""
        audio = np.asarray(audio, dtype=np.float32)
        while len(audio) < cls.WINDOW:
            audio = np.concatenate([audio, audio])
        starts = range(0, len(audio) - cls.WINDOW + 1, cls.HOP)
        return [audio[s : s + cls.WINDOW] for s in starts[: max_windows or None]]

    def __call__(self, audio: np.ndarray) -> dict[str, float]:
        """{dnsmos_sig, dnsmos_bak, dnsmos_ovrl} of a non-empty 16 kHz clip in [-1, 1]."""
        # one window per run: a batch of windows costs more time and memory than the windows alone
        raw = np.concatenate(
            [self.session.run(None, {self._input: w[None]})[0] for w in self.windows(audio, self.max_windows)]
        ).astype(np.float64)
        return {
            "dnsmos_sig": float(np.mean(np.polyval(self.SIG, raw[:, 0]))),
            "dnsmos_bak": float(np.mean(np.polyval(self.BAK, raw[:, 1]))),
            "dnsmos_ovrl": float(np.mean(np.polyval(self.OVRL, raw[:, 2]))),
        }


# ---- Silero VAD ---------------------------------------------------------------------------------


class Vad:
    """Silero VAD (JIT weights from the silero-vad package) on CPU, with its default thresholds."""

    FRAME = 512  # samples per VAD decision at 16 kHz

    def __init__(self):
        import torch

        threads = torch.get_num_threads()
        from silero_vad import load_silero_vad  # importing it sets torch to one thread: put it back

        torch.set_num_threads(threads)
        self.model = load_silero_vad()

    def speech(self, audio: np.ndarray) -> list[tuple[int, int]]:
        """(start, end) sample spans of speech in a 16 kHz clip."""
        import torch
        from silero_vad import get_speech_timestamps_from_probs

        with torch.inference_mode():
            probs = self.model.audio_forward(torch.from_numpy(audio)[None], MODEL_RATE)[0]
        spans = get_speech_timestamps_from_probs(
            probs.tolist(), sampling_rate=MODEL_RATE, audio_length_samples=len(audio)
        )
        return [(int(s["start"]), int(s["end"])) for s in spans]

    def __call__(self, audio: np.ndarray) -> dict[str, float]:
        return speech_measures(self.speech(audio), len(audio), MODEL_RATE)


def speech_measures(spans: list[tuple[int, int]], num_samples: int, rate: int) -> dict[str, float]:
    """speech_ratio, leading/trailing_silence and speech_seconds of a clip from its speech spans."""
    speech = sum(e - s for s, e in spans)
    return {
        "speech_ratio": speech / num_samples,
        "leading_silence": (spans[0][0] if spans else num_samples) / rate,
        "trailing_silence": (num_samples - spans[-1][1] if spans else num_samples) / rate,
        "speech_seconds": speech / rate,
    }


# ---- signal measures ----------------------------------------------------------------------------


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


def speaking_rate(record: dict, speech_seconds: float) -> float | None:
    """Characters of normalized_text (else text), as sharflow.models.asr normalizes it, per second of speech;
    None without speech."""
    return len(normalize_text(reference_text(record))) / speech_seconds if speech_seconds > 0 else None


# ---- one utterance ------------------------------------------------------------------------------


@dataclass
class Meters:
    """The models a rank loads once and applies to each of its records."""

    dnsmos: Dnsmos
    vad: Vad

    @classmethod
    def load(cls, device: str = "cpu", dnsmos_max_windows: int = 0) -> "Meters":
        return cls(Dnsmos(device, max_windows=dnsmos_max_windows), Vad())


def measure(meters: Meters, record: dict, audio: np.ndarray, rate: int, audio_16k: np.ndarray) -> dict:
    """Every metric of MEASURED (sharflow.core.metrics) for one record, from its audio at the source
    rate and at 16 kHz."""
    vad = meters.vad(audio_16k)
    values = {
        **meters.dnsmos(audio_16k),
        "speech_ratio": vad["speech_ratio"],
        "leading_silence": vad["leading_silence"],
        "trailing_silence": vad["trailing_silence"],
        "bandwidth_hz": bandwidth_hz(audio, rate),
        "clipping_fraction": clipping_fraction(audio),
        "loudness_lufs": loudness_lufs(audio, rate),
        "speaking_rate": speaking_rate(record, vad["speech_seconds"]),
    }
    return {k: None if values[k] is None else round(float(values[k]), DIGITS) for k in MEASURED}
