"""Data-dependent initialisation for the small random models that tests and the demo build.

A network built from a config with default random weights is often degenerate: the signal shrinks
layer by layer until every output is the last layer's bias. A random NeMo codec then emits one
constant code for every utterance, a random speaker model one embedding for every voice, and every
test that compares their outputs passes whatever the code under test does. Scaling each layer so
its output is centred with unit variance on a calibration signal (the data-dependent
initialisation of weight normalisation, Salimans & Kingma 2016; LSUV, Mishkin & Matas 2015) keeps
the weights random but makes the outputs depend on the input.
"""

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

import torch

log = logging.getLogger(__name__)

LAYER_TYPES = (torch.nn.Conv1d, torch.nn.Linear)


def calibration_batch(
    sample_rate: int, items: int = 4, seconds: float = 3.0, seed: int = 0, multiple_of: int = 1
) -> torch.Tensor:
    """(items, T) speech-like signals: a random pitch with 5 harmonics under a slow envelope, plus noise.

    RMS about 0.05; T is `seconds` of audio rounded down to a multiple of `multiple_of`.
    Deterministic for a seed; items differ in pitch, envelope rate and noise.
    """
    generator = torch.Generator().manual_seed(seed)
    n = int(sample_rate * seconds) // multiple_of * multiple_of
    t = torch.arange(n) / sample_rate
    rows = []
    for _ in range(items):
        f0, rate = 90 + 160 * torch.rand((), generator=generator), 2 + 3 * torch.rand((), generator=generator)
        harmonics = sum(torch.sin(2 * torch.pi * k * f0 * t) for k in range(1, 6)) / 5
        envelope = 0.5 * (1 + torch.sin(2 * torch.pi * rate * t))
        rows.append(0.1 * (envelope * harmonics + 0.3 * torch.randn(n, generator=generator)))
    return torch.stack(rows)


def standardize_layers_(
    module: torch.nn.Module, run: Callable[[], object], *, per_channel: bool = True
) -> int:
    """Rescale every Conv1d/Linear of `module`, in the order `run()` calls them, to unit-variance outputs.

    `run` feeds the calibration input through the model. Each layer's weight (the magnitude of a
    weight-normalised one) and bias are scaled, then the next layer is measured on the corrected
    network. per_channel: every layer's output channels are centred and scaled one by one; else
    hidden layers get one scale for all channels (their biases kept), and only the last layer is
    centred per channel (for a codec this spreads codes over more levels). Returns the layers changed.
    """
    order = _call_order(module, run)
    for n, layer in enumerate(order):
        out = _output_of(layer, run)
        channels = 1 if isinstance(layer, torch.nn.Conv1d) else out.dim() - 1
        dims = [d for d in range(out.dim()) if d != channels]
        if per_channel or n == len(order) - 1:
            mean, std = out.mean(dim=dims), out.std(dim=dims).clamp_min(1e-12)
        else:
            mean, std = (
                torch.zeros(out.shape[channels]),
                out.std().clamp_min(1e-12).expand(out.shape[channels]),
            )
        weight = (
            layer.parametrizations.weight.original0 if hasattr(layer, "parametrizations") else layer.weight
        )
        with torch.no_grad():
            weight.mul_((1.0 / std).reshape(-1, *[1] * (weight.dim() - 1)))
            if layer.bias is not None:
                layer.bias.copy_((layer.bias - mean) / std)
    return len(order)


def _call_order(module: torch.nn.Module, run: Callable[[], object]) -> list[torch.nn.Module]:
    order: list[torch.nn.Module] = []
    hooks = [
        m.register_forward_hook(lambda m, _i, _o: order.append(m) if m not in order else None)
        for m in module.modules()
        if isinstance(m, LAYER_TYPES)
    ]
    try:
        with torch.no_grad():
            run()
    finally:
        for hook in hooks:
            hook.remove()
    return order


class _Measured(Exception):
    """Raised by a hook to end a forward pass once the layer of interest has run."""

    def __init__(self, output: torch.Tensor):
        super().__init__()
        self.output = output


def _output_of(layer: torch.nn.Module, run: Callable[[], object]) -> torch.Tensor:
    """The layer's output on the calibration input; the layers after it are not run."""

    def stop(_module, _inputs, output):
        raise _Measured(output)

    hook = layer.register_forward_hook(stop)
    try:
        with torch.no_grad():
            run()
    except _Measured as measured:
        return measured.output.float()
    finally:
        hook.remove()
    raise RuntimeError(f"{layer} did not run on the calibration input")


def save_random_model(model, out: str | Path, config: str | Path, what: str) -> Path:
    """Save a NeMo model built with random weights as `out` (.nemo, complete or not at all) and say
    loudly in the log that it is random and what that means (`what`)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    model.save_to(str(tmp))
    tmp.replace(out)
    log.warning("built a RANDOMLY INITIALISED %s from %s at %s", what, config, out)
    return out


def random_model_key(build: Callable, config: str | Path) -> str:
    """The cache key of `build`'s random model of `config`: the config's text, the source files of
    this module and of `build`'s module (what makes the weights), and the NeMo and torch versions."""
    import sys

    from sharflow.core.cache import cache_key, package_versions

    sources = [Path(__file__), Path(sys.modules[build.__module__].__file__)]
    return cache_key(
        build.__name__,
        config=Path(config).read_text(encoding="utf-8"),
        code=[hashlib.sha256(p.read_bytes()).hexdigest() for p in sources],
        versions=package_versions("nemo_toolkit", "torch"),
    )


def cached_random_model(
    build: Callable, config: str | Path, out: str | Path, cache_dir: str | None = None
) -> Path:
    """`build(config, path)`'s random model, copied to `out` from sharflow's cache (sharflow.core.cache)
    where it was built before, else built there first.

    A build is seeded, so the same config gives the same weights (random_model_key). A run of the
    demo or of the tests then pays NeMo's import and the build (~15 s) once per machine, not once per
    workflow run.
    """
    import shutil

    from sharflow.core.cache import cache_root, cached_build

    folder = cached_build(
        cache_root(cache_dir), "random_models", random_model_key(build, config),
        lambda tmp: build(config, tmp / "model.nemo"),
        {"config": str(config), "builder": f"{build.__module__}.{build.__name__}"},
    )  # fmt: skip
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.copyfile(folder / "model.nemo", tmp)
    tmp.replace(out)
    log.warning("a RANDOMLY INITIALISED model of %s (sharflow's cache: %s) at %s", config, folder, out)
    return out
