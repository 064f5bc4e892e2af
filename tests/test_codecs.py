"""Codec backends through their real loading paths, with small random models built from configs."""

import pytest
import torch

from sharflow.codecs import frames, load_codec
from sharflow.errors import SharflowError


@pytest.fixture(scope="session")
def tiny_encodec(tmp_path_factory):
    from transformers import EncodecConfig, EncodecModel

    torch.manual_seed(0)
    config = EncodecConfig(sampling_rate=16000, num_filters=8, hidden_size=32, codebook_dim=32, codebook_size=256,
                           upsampling_ratios=[8, 5, 4, 2], target_bandwidths=[1.5, 3.0], num_lstm_layers=1,
                           num_residual_layers=1)
    path = tmp_path_factory.mktemp("encodec")
    EncodecModel(config).save_pretrained(path)
    return path


def padded_batch(waves, spf):
    lengths = torch.tensor([len(w) for w in waves])
    x = torch.zeros(len(waves), frames(int(lengths.max()), spf) * spf)
    for i, w in enumerate(waves):
        x[i, : len(w)] = w
    return x, lengths


def alone_vs_batch(codec, seconds=(2.0, 1.3, 0.45, 0.9)):
    torch.manual_seed(1)
    waves = [0.1 * torch.randn(int(s * codec.sample_rate)) for s in seconds]
    codes, lengths = codec.encode(*padded_batch(waves, codec.samples_per_frame))
    agree = []
    for i, w in enumerate(waves):
        alone, n = codec.encode(*padded_batch([w], codec.samples_per_frame))
        assert int(lengths[i]) == int(n[0]) == frames(len(w), codec.samples_per_frame)
        agree.append((alone[0, :, : int(n[0])] == codes[i, :, : int(n[0])]).float().mean().item())
    return codes, agree


def test_nemo_codec_interface_and_exact_batch_parity(tiny_nemo_codec):
    torch.set_num_threads(1)
    codec = load_codec("nemo", str(tiny_nemo_codec))
    assert (codec.sample_rate, codec.samples_per_frame, codec.num_codebooks, codec.codebook_size) == (22050, 1024, 8, 2016)
    codes, agree = alone_vs_batch(codec)
    assert codes.shape[:2] == (4, 8) and codes.min() >= 0 and codes.max() < 2016
    assert agree == [1.0] * 4  # identical alone and inside a padded batch


def test_hf_encodec_backend_and_its_batch_agreement(tiny_encodec):
    codec = load_codec("hf", str(tiny_encodec))
    assert (codec.sample_rate, codec.samples_per_frame, codec.codebook_size) == (16000, 320, 256)
    assert codec.num_codebooks == 6  # 3 kbps at 50 frames/s of 10-bit codes
    codes, agree = alone_vs_batch(codec)
    assert codes.shape[1] == 6
    assert min(agree) >= 0.9, agree  # conv padding can touch the last frames; measured 1.0 here


def test_unloadable_models_are_explained(tmp_path):
    with pytest.raises(SharflowError, match="local .nemo"):
        load_codec("nemo", str(tmp_path / "missing.nemo"))
    with pytest.raises(SharflowError, match="transformers codec"):
        load_codec("hf", str(tmp_path))
    with pytest.raises(ValueError, match="unknown codec backend"):
        load_codec("espnet", "x")
