"""Audio codecs behind one small interface, chosen per entry of `codecs:` in config.

A backend is a class with `sample_rate`, `samples_per_frame`, `num_codebooks`, `codebook_size`,
`description`, and `encode(batch, lengths) -> (codes, code_lengths)`: `batch` is a (B, T) float32
tensor on the codec's device, zero-padded once to a multiple of samples_per_frame; codes are (B, C,
T') integers and code_lengths the valid frames per item (ceil(length / samples_per_frame)). Adding
a backend: a module here and a line in BACKENDS. Backends import their framework only when built.
"""

import importlib
from typing import Protocol

import torch

from sharflow.core.logs import model_load

BACKENDS = {
    "nemo": "sharflow.models.codecs.nemo:NemoCodec",
    "hf": "sharflow.models.codecs.hf:HFCodec",
}
# The framework a backend imports when it is built: most of a codes job's start-up (NeMo: ~15 s).
FRAMEWORKS = {"nemo": "nemo.collections.tts.models", "hf": "transformers"}


class AudioCodec(Protocol):
    sample_rate: int
    samples_per_frame: int
    num_codebooks: int
    codebook_size: int
    description: str

    def encode(self, batch: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


def load_codec(backend: str, model: str, device: str = "cpu", precision: str = "fp32") -> AudioCodec:
    """Build the backend `backend` for `model` (a local path, or a name its framework can fetch)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown codec backend {backend!r}; choose one of {sorted(BACKENDS)}")
    module, cls = BACKENDS[backend].split(":")
    with model_load(f"codec:{backend}"):
        return getattr(importlib.import_module(module), cls)(model=model, device=device, precision=precision)


def import_framework(backend: str) -> None:
    """Import the backend's framework (what building it would import first), to time it apart."""
    if backend in FRAMEWORKS:
        with model_load(f"import:{backend}"):  # a fixed cost of the job, as the load itself
            importlib.import_module(FRAMEWORKS[backend])


def frames(num_samples: int, samples_per_frame: int) -> int:
    """Code frames of an utterance: ceil(num_samples / samples_per_frame)."""
    return -(-num_samples // samples_per_frame)


def autocast(device: torch.device, precision: str):
    """bf16/fp16 autocast on GPU; a no-op context on CPU or for fp32."""
    if device.type != "cuda" or precision == "fp32":
        return torch.autocast(device.type, enabled=False)
    return torch.autocast("cuda", dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[precision])
