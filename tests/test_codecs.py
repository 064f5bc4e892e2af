"""Codec backends through their real loading paths, with small random models built from configs."""

import json

import numpy as np
import pytest
import torch

from sharflow.core.errors import SharflowError
from sharflow.io.audio import load_span, resample
from sharflow.models.codecs import frames, load_codec
from sharflow.models.codecs.hf import build_random_encodec
from testkit import DEMO, REPO, assert_informative_codes


@pytest.fixture(scope="session")
def tiny_encodec(tmp_path_factory):
    return build_random_encodec(
        REPO / "config" / "models" / "tiny_encodec.yaml", tmp_path_factory.mktemp("encodec")
    )


def padded_batch(waves, spf):
    lengths = torch.tensor([len(w) for w in waves])
    x = torch.zeros(len(waves), frames(int(lengths.max()), spf) * spf)
    for i, w in enumerate(waves):
        x[i, : len(w)] = w
    return x, lengths


def encode_together(codec, waves, lengths=None) -> list[np.ndarray]:
    """Codes of `waves` encoded in one padded batch, each trimmed to its own frames."""
    x, true_lengths = padded_batch(waves, codec.samples_per_frame)
    codes, n = codec.encode(x, true_lengths if lengths is None else torch.tensor(lengths))
    return [codes[i, :, : int(n[i])].numpy() for i in range(len(waves))]


def encode_each(codec, waves) -> list[np.ndarray]:
    return [encode_together(codec, [w])[0] for w in waves]


def speech(codec, lengths) -> list[torch.Tensor]:
    """Demo utterances (4 speakers) at the codec's rate, cut to the given sample counts."""
    records = [json.loads(x) for x in (DEMO / "manifest.json").read_text().splitlines()[::8][:4]]
    return [
        torch.from_numpy(
            resample(
                *load_span(str(DEMO / "audio" / r["audio_filepath"]), r.get("offset", 0.0), r["duration"]),
                codec.sample_rate,
            )[:n].copy()
        )
        for r, n in zip(records, lengths, strict=True)
    ]


def check_batch_parity(codec, masks_by_length=True):
    """Items of one frame count (what plan_batches makes) get exactly their codes alone.

    masks_by_length: the codec masks each item at its length (NeMo), shown by a wrong length.
    """
    spf = codec.samples_per_frame
    lengths = [40 * spf + 1, 40 * spf + 77, 41 * spf - 5, 41 * spf]  # all 41 frames
    waves = speech(codec, lengths)
    alone = encode_each(codec, waves)
    assert_informative_codes(
        alone, reversed_arrays=encode_each(codec, [w.flip(0) for w in waves]), min_distinct=16
    )
    assert all(a.shape[1] == 41 for a in alone)
    together = encode_together(codec, waves)
    assert all(np.array_equal(a, b) for a, b in zip(alone, together, strict=True))
    if (
        masks_by_length
    ):  # the check can fail: a length one frame short (the mask in the wrong place) changes that item
        wrong = encode_together(codec, waves, lengths=[lengths[0], lengths[1] - spf, *lengths[2:]])
        assert np.array_equal(wrong[0], alone[0]) and not np.array_equal(wrong[1], alone[1][:, :40])
    return waves, alone


def test_nemo_codec_interface_and_exact_batch_parity(tiny_nemo_codec):
    torch.set_num_threads(1)
    codec = load_codec("nemo", str(tiny_nemo_codec))
    assert (codec.sample_rate, codec.samples_per_frame, codec.num_codebooks, codec.codebook_size) == (
        22050,
        1024,
        8,
        2016,
    )
    waves, alone = check_batch_parity(codec)
    assert all(a.shape[0] == 8 and a.min() >= 0 and a.max() < 2016 for a in alone)
    # why plan_batches never mixes frame counts: the encoder sees a shorter item's padding
    short = waves[1][: 20 * codec.samples_per_frame]
    mixed = encode_together(codec, [waves[0], short])
    assert np.array_equal(mixed[0], alone[0]) and not np.array_equal(mixed[1], encode_each(codec, [short])[0])


def test_hf_encodec_backend_and_its_batch_parity(tiny_encodec):
    torch.set_num_threads(1)
    codec = load_codec("hf", str(tiny_encodec))
    assert (codec.sample_rate, codec.samples_per_frame, codec.codebook_size) == (16000, 320, 256)
    assert codec.num_codebooks == 6  # 3 kbps at 50 frames/s of 10-bit codes
    waves, alone = check_batch_parity(codec, masks_by_length=False)  # EnCodec's encoder ignores padding_mask
    assert all(a.shape[0] == 6 for a in alone)
    short = waves[1][: 20 * codec.samples_per_frame]  # alone, its convolutions see zeros past its end too
    mixed = encode_together(codec, [waves[0], short])
    assert np.array_equal(mixed[1], encode_each(codec, [short])[0])


def test_unloadable_models_are_explained(tmp_path):
    with pytest.raises(SharflowError, match=r"local \.nemo"):
        load_codec("nemo", str(tmp_path / "missing.nemo"))
    with pytest.raises(SharflowError, match="transformers codec"):
        load_codec("hf", str(tmp_path))
    with pytest.raises(ValueError, match="unknown codec backend"):
        load_codec("espnet", "x")


def test_the_backend_key_chooses_the_codec(tiny_nemo_codec, tiny_encodec):
    """codecs.<name>.backend: nemo and hf load different model classes, with their own frame rates and
    codebooks, and encode the same speech to different codes."""
    nemo, hf = load_codec("nemo", str(tiny_nemo_codec)), load_codec("hf", str(tiny_encodec))
    assert (type(nemo).__name__, type(hf).__name__) == ("NemoCodec", "HFCodec")
    assert (nemo.sample_rate, nemo.samples_per_frame, nemo.num_codebooks) != (
        hf.sample_rate,
        hf.samples_per_frame,
        hf.num_codebooks,
    )
    with pytest.raises(ValueError, match="unknown codec backend 'nemos'"):
        load_codec("nemos", str(tiny_nemo_codec))


def test_another_model_gives_other_codes(tiny_nemo_codec, tmp_path):
    """codecs.<name>.model: the same config with other random weights encodes the same audio differently."""
    from sharflow.models.codecs.nemo import build_random_codec

    other_path = build_random_codec(
        REPO / "config" / "models" / "tiny_codec.yaml", tmp_path / "b.nemo", seed=1
    )
    first, other = load_codec("nemo", str(tiny_nemo_codec)), load_codec("nemo", str(other_path))
    waves = speech(first, [first.samples_per_frame * 40] * 4)
    a, b = encode_each(first, waves), encode_each(other, waves)
    assert_informative_codes(a + b)
    assert all(x.shape == y.shape and not np.array_equal(x, y) for x, y in zip(a, b, strict=True))
