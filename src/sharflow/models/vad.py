"""Silero VAD (the JIT weights shipped in the `silero-vad` package) over many 16 kHz clips at once.

Silero's own `audio_forward` runs its whole network once per 32 ms frame, carrying an LSTM state
from frame to frame. Only the LSTM needs that order: each frame's input features (its 512 samples
with the 64 before them, through the model's STFT and 4 convolutions) depend on the audio alone.
So here the features of every frame of every clip are computed in blocks of `BLOCK` frames, and
the LSTM then steps through time for `ROWS` clips at once on a CPU, `GPU_ROWS` on a GPU (longest
first, so rows of like length share a step), followed by the model's own decoder. Blocks and rows
always have their full size (zeros pad the last), so a clip's probabilities do not depend on which
clips share its batch; they are within 1e-4 of `audio_forward`'s (tested; oneDNN's convolutions
sum in another order for a block than for one frame: up to 6e-6 apart with AVX2, 4.2e-5 with
AVX-512, in a probe by hand on 2026-11-27). On a GPU the LSTM's steps are bound by kernel
launches, not arithmetic, so more rows a step cost about the same: with 128 rows the VAD ran 1.4x
faster than with 32 on an H100, with the same probabilities (a probe by hand beside
benchmarks/bench_quality.py; docs: performance). The speech spans come from the package's own
`get_speech_timestamps_from_probs`, with its default thresholds.

On a GPU the network runs in float64 (`GPU_DTYPE`), so that its spans are the CPU's: in float32 cuDNN
may use TF32 (PyTorch's default for convolutions), which put the batched probabilities up to 9.1e-3
from Silero's own on an H200 and moved one demo utterance's span end by a frame (32 ms) against a
CPU, on 2026-11-30. TF32 cannot be turned off for the VAD alone (the switch is the process's, and
DNSMOS, whose convolutions it speeds up 2.2x there, runs beside it); float64 never uses it, and
costs the launch-bound VAD little (its convolutions, by an estimate, ~30 MFLOP an audio second). With TF32 off
there, float32's probabilities were within 3.6e-7 of Silero's own and no span differed from a CPU's
over the demo. Float64 itself has not yet run on a GPU (the session's device time was spent): on a
CPU it was within 8.8e-6 of float32 over the demo with the same spans (by hand; tests/test_quality.py
asks within 1e-4 and the same spans).
"""

import numpy as np
import torch

from sharflow.core.logs import model_load

RATE = 16000
FRAME = 512  # samples per VAD decision at 16 kHz
CONTEXT = 64  # samples of the previous frame each frame sees
BLOCK = 1024  # frames per feature pass
ROWS = 32  # clips per LSTM pass on a CPU
GPU_ROWS = 128  # and on a GPU
GPU_DTYPE = torch.float64  # the network's precision on a GPU (a CPU's is float32, Silero's own)
STATE = 128


def frames(audio: np.ndarray) -> np.ndarray:
    """(n, CONTEXT + FRAME) model inputs of a clip, as `audio_forward` builds them: the clip zero
    padded to whole frames, each frame after the last CONTEXT samples of the one before (zeros first)."""
    n = -(-len(audio) // FRAME)
    body = np.zeros((n, FRAME), np.float32)
    body.reshape(-1)[: len(audio)] = audio
    context = np.zeros((n, CONTEXT), np.float32)
    context[1:] = body[:-1, -CONTEXT:]
    return np.concatenate([context, body], axis=1)


class SileroVad:
    """Silero VAD on one rank's device: per-frame speech probabilities and speech spans of clips."""

    def __init__(self, device: str = "cpu", dtype: torch.dtype | None = None):
        threads = torch.get_num_threads()
        from silero_vad import load_silero_vad  # importing it sets torch to one thread: put it back

        torch.set_num_threads(threads)
        gpu = device.startswith("cuda")
        self.dtype = dtype or (GPU_DTYPE if gpu else torch.float32)
        with model_load("vad"):
            model = load_silero_vad().eval()
        self.device, self.model = device, model._model.to(device, self.dtype)
        self.rows = GPU_ROWS if gpu else ROWS

    def probabilities(self, clips: list[np.ndarray]) -> list[np.ndarray]:
        """Each clip's speech probability per 512-sample frame (float32)."""
        inputs = [frames(np.asarray(c, dtype=np.float32)) for c in clips]
        with torch.inference_mode():
            features = self._features(np.concatenate(inputs) if inputs else np.zeros((0, CONTEXT + FRAME)))
            starts = np.cumsum([0] + [len(x) for x in inputs])
            order = sorted(range(len(inputs)), key=lambda i: (-len(inputs[i]), i))
            out: list[np.ndarray] = [np.zeros(0, np.float32)] * len(inputs)
            for first in range(0, len(order), self.rows):
                rows = order[first : first + self.rows]
                probs = self._decode(features, [(starts[i], len(inputs[i])) for i in rows])
                for i, p in zip(rows, probs, strict=True):
                    out[i] = p
        return out

    def speech(self, clips: list[np.ndarray]) -> list[list[tuple[int, int]]]:
        """(start, end) sample spans of speech in each clip."""
        from silero_vad import get_speech_timestamps_from_probs

        spans = []
        for clip, probs in zip(clips, self.probabilities(clips), strict=True):
            found = get_speech_timestamps_from_probs(
                probs.tolist(), sampling_rate=RATE, audio_length_samples=len(clip)
            )
            spans.append([(int(s["start"]), int(s["end"])) for s in found])
        return spans

    def _features(self, inputs: np.ndarray) -> torch.Tensor:
        """The encoder's output (n, STATE) for every frame, BLOCK frames a pass."""
        out = []
        for start in range(0, len(inputs), BLOCK):
            block = np.zeros((BLOCK, CONTEXT + FRAME), np.float32)
            chunk = inputs[start : start + BLOCK]
            block[: len(chunk)] = chunk
            x = torch.from_numpy(block).to(self.device, self.dtype)
            out.append(self.model.encoder(self._spectrum(x))[: len(chunk), :, 0])
        return torch.cat(out) if out else torch.zeros((0, STATE), dtype=self.dtype, device=self.device)

    def _spectrum(self, x: torch.Tensor) -> torch.Tensor:
        """The model's STFT magnitude: its own module in float32; in float64 the same steps (its
        reflection padding, its basis as a strided convolution, the magnitude of the first half of
        the bins against the second), which its scripted module would cast to float32."""
        stft = self.model.stft
        if self.dtype == torch.float32:
            return stft(x)
        spectrum = torch.conv1d(
            stft.padding(x).unsqueeze(1), stft.forward_basis_buffer, None, [stft.hop_length]
        )
        cut = stft.filter_length // 2 + 1
        return torch.sqrt(spectrum[:, :cut] ** 2 + spectrum[:, cut:] ** 2)

    def _decode(self, features: torch.Tensor, spans: list[tuple[int, int]]) -> list[np.ndarray]:
        """The LSTM and decoder over up to `self.rows` clips, given as (first frame, frames) in
        `features`."""
        steps = max(n for _, n in spans)
        like = {"dtype": self.dtype, "device": self.device}
        x = torch.zeros((self.rows, steps, STATE), **like)
        for row, (start, n) in enumerate(spans):
            x[row, :n] = features[start : start + n]
        h = torch.zeros((self.rows, STATE), **like)
        c = torch.zeros((self.rows, STATE), **like)
        hidden = []
        for t in range(steps):
            h, c = self.model.decoder.rnn(x[:, t], (h, c))
            hidden.append(h)
        probs = self.model.decoder.decoder(torch.stack(hidden, 1).reshape(-1, STATE, 1))
        probs = probs.reshape(self.rows, steps).float().cpu().numpy()
        return [probs[row, :n] for row, (_, n) in enumerate(spans)]
