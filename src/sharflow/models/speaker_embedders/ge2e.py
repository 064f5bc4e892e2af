"""GE2E speaker encoder with the pretrained weights shipped in the PyPI package `resemblyzer`.

The network (3-layer LSTM 40→256, linear 256→256, ReLU, L2 norm) and its front end are rebuilt
here so that resemblyzer's own import chain (webrtcvad → pkg_resources, gone from new setuptools)
is never imported; only its weights file is read. Front end as the weights were trained with:
16 kHz, volume raised to -30 dBFS (never lowered), power mel spectrogram (not log) with 40 bands,
25 ms Hann window, 10 ms hop. An utterance is cut into 1.6 s partial windows (1.3 per second, the
last kept if at least 75 % covered); its embedding is the L2-normalised mean of the partials'
embeddings.

The network runs over fixed-shape batches: every call's partials, of all its utterances in order,
in batches of exactly `batch_partials` rows (the last padded with silent partials). A row's result
does not depend on the other rows of a batch of a fixed shape, so an utterance's embedding is the
same bytes alone or among any others, at any position (checked on this machine's CPU, one and two
torch threads), and callers embed many records a forward pass: on a GPU, the LSTM runs one call a
batch in place of one a record (the mel front end stays a few kernels a record). The default is 16
partials on a CPU (faster per record than one utterance a pass there, ~0.8x its CPU-s, with at most
15 padding rows a call) and 256 on a GPU.

With `level="normalize"` the volume is also lowered to -30 dBFS, so that a voice louder or quieter
is the same voice: the power (not log) mel input makes the raise-only front end's embedding depend
on the level of loud audio (a demo voice at +6 dB scored 0.859 with itself, two demo voices up to
0.909; normalised, >= 0.996). The identity stage's voices use it; the context stage keeps the
weights' own front end. resemblyzer's VAD silence trimming is not applied (it needs webrtcvad).
"""

import importlib.util
import math
from pathlib import Path

import numpy as np
import torch

SAMPLE_RATE = 16000
N_FFT = 400  # 25 ms
HOP = 160  # 10 ms
N_MELS = 40
PARTIAL_FRAMES = 160  # 1.6 s
TARGET_DBFS = -30.0
CPU_BATCH_PARTIALS, GPU_BATCH_PARTIALS = 16, 256  # partials a forward pass (the module)
LEVELS = ("raise", "normalize")  # raise quiet audio to TARGET_DBFS (as trained), or scale all to it


def pretrained_weights() -> Path:
    """Path of resemblyzer's pretrained.pt, found without importing resemblyzer."""
    spec = importlib.util.find_spec("resemblyzer")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the ge2e embedder needs the PyPI package 'resemblyzer' (pip install resemblyzer)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pretrained.pt"


def slaney_mel_filterbank(sample_rate: int, n_fft: int, n_mels: int) -> np.ndarray:
    """(n_mels, 1 + n_fft // 2) triangular filters on the Slaney mel scale, area-normalised.

    The filterbank librosa builds by default (htk=False, norm="slaney"); written out here so that a
    rank need not import librosa (and numba) at start-up.
    """
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, log_step = min_log_hz / f_sp, math.log(6.4) / 27.0

    def hz_to_mel(hz):
        return hz / f_sp if hz < min_log_hz else min_log_mel + math.log(hz / min_log_hz) / log_step

    mels = np.linspace(hz_to_mel(0.0), hz_to_mel(sample_rate / 2), n_mels + 2)
    hz = np.where(mels < min_log_mel, mels * f_sp, min_log_hz * np.exp(log_step * (mels - min_log_mel)))
    fft_hz = np.linspace(0, sample_rate / 2, 1 + n_fft // 2)
    ramps = hz[:, None] - fft_hz[None, :]
    widths = np.diff(hz)
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0, np.minimum(rising, falling))
    return (weights * (2.0 / (hz[2:] - hz[:-2]))[:, None]).astype(np.float32)


class GE2ENetwork(torch.nn.Module):
    def __init__(self, hidden: int = 256, layers: int = 3, dim: int = 256):
        super().__init__()
        self.lstm = torch.nn.LSTM(N_MELS, hidden, layers, batch_first=True)
        self.linear = torch.nn.Linear(hidden, dim)

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        """(B, frames, 40) mel windows -> (B, dim) unit-norm embeddings."""
        _, (hidden, _) = self.lstm(mels)
        return torch.nn.functional.normalize(torch.relu(self.linear(hidden[-1])), dim=1)


def partial_starts(num_samples: int, rate: float = 1.3, min_coverage: float = 0.75) -> list[int]:
    """Start frames of the 160-frame partial windows covering an utterance (at least one)."""
    n_frames = math.ceil((num_samples + 1) / HOP)
    step = int(round(SAMPLE_RATE / rate / HOP))
    starts = list(range(0, max(1, n_frames - PARTIAL_FRAMES + step + 1), step))
    coverage = (num_samples - starts[-1] * HOP) / (PARTIAL_FRAMES * HOP)
    if coverage < min_coverage and len(starts) > 1:
        starts.pop()
    return starts


class GE2EEmbedder:
    sample_rate = SAMPLE_RATE
    dim = 256
    batch_invariant = True  # fixed-shape batches (the module)

    def __init__(
        self,
        device: str = "cpu",
        weights: str | None = None,
        batch_partials: int | None = None,
        level: str = "raise",
    ):
        if level not in LEVELS:
            raise ValueError(f"the ge2e embedder's level must be one of {LEVELS}, got {level!r}")
        self.device = torch.device(device)
        default = CPU_BATCH_PARTIALS if self.device.type == "cpu" else GPU_BATCH_PARTIALS
        self.batch_partials = int(batch_partials or default)
        self.level = level
        state = torch.load(weights or pretrained_weights(), map_location="cpu", weights_only=True)
        self.net = GE2ENetwork()
        # the GE2E loss's similarity scale and bias are training-only
        net_state = {k: v for k, v in state["model_state"].items() if not k.startswith("similarity_")}
        self.net.load_state_dict(net_state, strict=True)
        self.net.eval().to(self.device)
        self.mel_basis = torch.from_numpy(slaney_mel_filterbank(SAMPLE_RATE, N_FFT, N_MELS)).to(self.device)
        self.window = torch.hann_window(N_FFT, periodic=True, device=self.device)

    def _partials(self, wave: np.ndarray) -> torch.Tensor:
        """(P, 160, 40) partial mel windows of one utterance."""
        rms = float(np.sqrt(np.mean(np.square(wave, dtype=np.float64)))) if len(wave) else 0.0
        if rms > 0:
            gain_db = TARGET_DBFS - 20 * math.log10(rms)
            if gain_db > 0 or self.level == "normalize":
                wave = wave * np.float32(10 ** (gain_db / 20))
        starts = partial_starts(len(wave))
        padded = np.zeros(max(len(wave), (starts[-1] + PARTIAL_FRAMES) * HOP), dtype=np.float32)
        padded[: len(wave)] = wave
        x = torch.from_numpy(padded).to(self.device)
        spec = (
            torch.stft(
                x, N_FFT, HOP, window=self.window, center=True, pad_mode="constant", return_complex=True
            ).abs()
            ** 2
        )
        mel = (self.mel_basis @ spec).T  # (frames, 40)
        return torch.stack([mel[s : s + PARTIAL_FRAMES] for s in starts])

    def _padded(self, rows: torch.Tensor) -> torch.Tensor:
        """`rows` partials as a batch of exactly batch_partials rows (silent partials after them)."""
        missing = self.batch_partials - rows.shape[0]
        return torch.cat([rows, rows.new_zeros(missing, *rows.shape[1:])]) if missing else rows

    @torch.inference_mode()
    def embed(self, waves: list[np.ndarray]) -> np.ndarray:
        partials = [self._partials(w) for w in waves]
        counts = [p.shape[0] for p in partials]
        stacked, size = torch.cat(partials), self.batch_partials
        batches = [self.net(self._padded(stacked[i : i + size])) for i in range(0, len(stacked), size)]
        embs = torch.cat(batches)[: len(stacked)]
        means = torch.stack([chunk.mean(0) for chunk in torch.split(embs, counts)])
        return torch.nn.functional.normalize(means, dim=1).cpu().numpy().astype(np.float32)
