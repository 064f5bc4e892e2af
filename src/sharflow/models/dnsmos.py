"""DNSMOS P.835 (sig, bak, ovrl) of 16 kHz clips, the windows of many clips scored together.

The weights are the `sig_bak_ovr.onnx` that the `speechmos` package ships, run from that one file
two ways, chosen by the rank's device:
- **cpu**: onnxruntime's CPU build runs the graph itself, one window per run on the rank's one
  thread (a batch of windows costs more per window there: 0.553 s against 0.527 s, docs: quality).
- **cuda:N**: the same graph re-expressed as torch modules that load its initializers (`DnsmosNet`:
  framing, a windowed DFT, log power, 7 convolutions, 3 dense layers), in batches of `GPU_BATCH`
  windows, always full (zero windows pad the last), so a window's score does not depend on which
  windows share its batch. No onnxruntime-gpu build has to match the cluster's CUDA.

The clip pipeline is the published one: a clip shorter than the 9.01 s window is repeated until it
fills one; windows of 144,160 samples start every 16,000 samples while a whole window fits; each
window's raw (sig, bak, ovrl) goes through the published polynomials and the clip's score is the
mean over its windows. `max_windows` > 0 keeps only the first ones.
"""

from dataclasses import dataclass
from importlib.resources import files

import numpy as np
import torch

from sharflow.core.errors import SharflowError
from sharflow.core.logs import model_load

WINDOW = 144_160  # 9.01 s at 16 kHz: the model's fixed input length
HOP = 16_000
GPU_BATCH = 64  # windows per forward pass on a GPU (a few GiB of activations in fp32)
# The published mapping of raw model outputs to MOS (np.polyval order: x², x, 1)
POLYNOMIALS = {
    "dnsmos_sig": (-0.08397278, 1.22083953, 0.0052439),
    "dnsmos_bak": (-0.13166888, 1.60915514, -0.39604546),
    "dnsmos_ovrl": (-0.06766283, 1.11546468, 0.04602535),
}


def engine_for(device: str, runtime: str | None = None) -> str:
    """What runs DNSMOS on a rank's device, as "<runtime>-<cpu|cuda>": by default torch on a GPU and
    onnxruntime on a CPU (`runtime` "torch" runs the torch modules on a CPU too: tests, benchmarks)."""
    cuda = device.startswith("cuda")
    return f"{runtime or ('torch' if cuda else 'onnxruntime')}-{'cuda' if cuda else 'cpu'}"


def weights_path() -> str:
    return str(files("speechmos") / "dnsmos_models" / "sig_bak_ovr.onnx")


@dataclass(frozen=True)
class Tiled:
    """A clip repeated until it fills a window, and how many windows of it are scored."""

    audio: np.ndarray  # float32
    count: int

    def window(self, i: int) -> np.ndarray:
        return self.audio[i * HOP : i * HOP + WINDOW]


def tile(audio: np.ndarray, max_windows: int = 0) -> Tiled:
    """The published windowing of a non-empty 16 kHz clip (the first `max_windows` when > 0)."""
    audio = np.asarray(audio, dtype=np.float32)
    while len(audio) < WINDOW:
        audio = np.concatenate([audio, audio])
    count = (len(audio) - WINDOW) // HOP + 1
    return Tiled(audio, min(count, max_windows) if max_windows else count)


def mos(raw: np.ndarray) -> dict[str, float]:
    """A clip's scores from its windows' raw outputs (windows × 3): each mapped, then averaged."""
    raw = np.asarray(raw, dtype=np.float64)
    return {
        name: float(np.mean(np.polyval(poly, raw[:, i])))
        for i, (name, poly) in enumerate(POLYNOMIALS.items())
    }


class Dnsmos:
    """DNSMOS P.835 on one rank's device: `score(clips)` gives each clip's {dnsmos_sig, _bak, _ovrl}.

    Example::

        dnsmos = Dnsmos("cuda:0")
        dnsmos.score([audio_16k_a, audio_16k_b])  # [{"dnsmos_sig": 3.41, ...}, {...}]
    """

    def __init__(
        self, device: str = "cpu", max_windows: int = 0, runtime: str | None = None, batch: int = GPU_BATCH
    ):
        self.device, self.max_windows = device, max_windows
        self.engine = engine_for(device, runtime)
        if self.engine == "onnxruntime-cuda":
            raise SharflowError("DNSMOS runs on a GPU with torch only (no onnxruntime-gpu needed)")
        self._run = _onnx_runner() if self.engine.startswith("onnxruntime") else _torch_runner(device, batch)

    def score(self, clips: list[np.ndarray]) -> list[dict[str, float]]:
        tiled = [tile(clip, self.max_windows) for clip in clips]
        raw = self._run(tiled)
        out, at = [], 0
        for t in tiled:
            out.append(mos(raw[at : at + t.count]))
            at += t.count
        return out

    def __call__(self, audio: np.ndarray) -> dict[str, float]:
        return self.score([audio])[0]


def _onnx_runner():
    """Every window of the tiled clips through onnxruntime's CPU build, one run each, one thread."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    with model_load("dnsmos"):
        session = ort.InferenceSession(weights_path(), opts, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name

    def run(tiled: list[Tiled]) -> np.ndarray:
        rows = [session.run(None, {name: t.window(i)[None]})[0] for t in tiled for i in range(t.count)]
        return np.concatenate(rows) if rows else np.zeros((0, 3), np.float32)

    return run


def _torch_runner(device: str, batch: int):
    """Every window of the tiled clips through DnsmosNet on `device`, `batch` windows a pass (also on
    a CPU, where tests compare it with onnxruntime).

    Each clip goes to the device once; its windows are views of it there, gathered into full
    batches (the last padded with zero windows)."""
    with model_load("dnsmos"):
        net = DnsmosNet.from_onnx(weights_path()).to(device).eval()

    def run(tiled: list[Tiled]) -> np.ndarray:
        windows = []
        for t in tiled:
            clip = torch.from_numpy(t.audio).to(device, non_blocking=True)
            windows.extend(clip.unfold(0, WINDOW, HOP)[: t.count])
        out = []
        with torch.inference_mode():
            for start in range(0, len(windows), batch):
                chunk = windows[start : start + batch]
                inputs = torch.zeros((batch, WINDOW), dtype=torch.float32, device=device)
                inputs[: len(chunk)] = torch.stack(chunk)
                out.append(net(inputs)[: len(chunk)].float().cpu())
        return torch.cat(out).numpy() if out else np.zeros((0, 3), np.float32)

    return run


# ---- the graph as torch modules -----------------------------------------------------------------

_CONVS = tuple(f"conv2d{s}" for s in ("", "_1", "_2", "_3", "_4", "_5", "_6"))
_POOL_AFTER = (3, 4, 5)  # 2×2 max pooling after these convolutions
_DENSE = ("dense", "dense_1", "dense_3")
_OPS = (
    "Slice Slice Reshape Reshape Concat Transpose Transpose Conv Conv Transpose Transpose Mul Mul Add "
    "Sqrt Pow Max Log Div Unsqueeze Transpose " + "Conv Relu " * 4 + "MaxPool Conv Relu MaxPool Conv Relu "
    "MaxPool Conv Relu Transpose ReduceMax MatMul Add Relu MatMul Add Relu MatMul Add"
).split()
# The graph's constants that `forward` spells out: cropping, framing, the log's base and floor, the power
_CONSTANTS = {
    "input_1:01_cropping_end": [2**63 - 1, 144_000],
    "input_1:01_cropping_start1": [0, 160],
    "shape_tensor": [-1, 900, 160],
    "shape_tensor1": [-1, 900, 160],
    "mos_estimator_logpow/truediv/y:0": 2.3025851,
    "mos_estimator_logpow/Maximum/x:0": 1e-12,
    "mos_estimator_logpow/pow/y:0": 2.0,
}


class DnsmosNet(torch.nn.Module):
    """The `sig_bak_ovr.onnx` graph in torch: raw (sig, bak, ovrl) of (N, 144160) windows.

    Frames of 320 samples every 160 (900 of them), a 161-bin DFT whose window is folded into its
    kernels, log10 of the power (floored at 1e-12), then the graph's convolutions and dense layers
    with its own weights. `from_onnx` refuses a file whose graph is not this one.
    """

    def __init__(self, weights: dict[str, torch.Tensor]):
        super().__init__()
        dft = [weights[f"time2freq/stft-{part}/kernel:0"][..., 0] for part in ("real", "imag")]
        self.register_buffer("dft", torch.cat(dft).T.contiguous())  # (320, 322): real bins, then imaginary
        self.convs = torch.nn.ModuleList()
        for name in _CONVS:
            kernel = weights[f"{name}/kernel:0"]
            conv = torch.nn.Conv2d(kernel.shape[1], kernel.shape[0], 3, padding=1)
            conv.weight.data, conv.bias.data = kernel, weights[f"{name}/bias:0"]
            self.convs.append(conv)
        self.dense = torch.nn.ModuleList()
        for name in _DENSE:
            prefix = f"mos_estimator_logpow/{name}"
            matrix = weights[f"{prefix}/MatMul/ReadVariableOp/resource:0"]
            layer = torch.nn.Linear(*matrix.shape)
            layer.weight.data = matrix.T.contiguous()
            layer.bias.data = weights[f"{prefix}/BiasAdd/ReadVariableOp/resource:0"]
            self.dense.append(layer)
        # NHWC convolutions: a third faster than NCHW on this machine's CPU, and the layout that GPUs'
        # tensor-core kernels take
        self.to(memory_format=torch.channels_last)

    @classmethod
    def from_onnx(cls, path: str) -> "DnsmosNet":
        import onnx
        from onnx import numpy_helper

        graph = onnx.load(path).graph
        arrays = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        known = (
            [node.op_type for node in graph.node] == _OPS
            and [tuple(i.type.tensor_type.shape.dim)[1].dim_value for i in graph.input] == [WINDOW]
            and all(k in arrays and np.allclose(arrays[k], v, rtol=1e-6) for k, v in _CONSTANTS.items())
        )
        if not known:
            raise SharflowError(
                f"{path} is not the DNSMOS P.835 graph sharflow knows ({len(graph.node)} nodes); install "
                "speechmos==0.0.1.1 as pyproject.toml pins it, or run the quality stage with device: cpu"
            )
        return cls({name: torch.from_numpy(a.copy()) for name, a in arrays.items()})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        frames = torch.cat([x[:, :144_000].reshape(n, 900, 160), x[:, 160:].reshape(n, 900, 160)], 2)
        spectrum = frames @ self.dft
        real, imag = spectrum[..., :161], spectrum[..., 161:]
        power = torch.sqrt(real * real + imag * imag) ** 2  # as the graph computes it: |X|, then squared
        h = (torch.log(torch.clamp(power, min=1e-12)) / 2.3025851)[:, None]
        for i, conv in enumerate(self.convs):
            h = conv(h).relu_()
            if i in _POOL_AFTER:
                h = torch.nn.functional.max_pool2d(h, 2)
        h = h.amax(dim=(2, 3))
        for layer in self.dense[:-1]:
            h = layer(h).relu_()
        return self.dense[-1](h)
