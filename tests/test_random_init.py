"""sharflow.models.random_init on a small stack that default initialisation makes degenerate."""

from pathlib import Path

import torch

from sharflow.models.random_init import calibration_batch, standardize_layers_


class Stack(torch.nn.Module):
    """Convolutions (one weight-normalised) then a linear head, like the tiny models' encoders."""

    def __init__(self):
        super().__init__()
        convs = [torch.nn.Conv1d(1 if i == 0 else 8, 8, 5, padding=2) for i in range(6)]
        convs[2] = torch.nn.utils.parametrizations.weight_norm(convs[2])
        self.convs = torch.nn.ModuleList(convs)
        self.head = torch.nn.Linear(8, 4)
        with torch.no_grad():  # a shrinking signal, as in the random NeMo codec
            for c in self.convs:
                c.bias.fill_(0.5)
                (c.parametrizations.weight.original0 if hasattr(c, "parametrizations") else c.weight).mul_(
                    0.05
                )

    def forward(self, x):
        h = x[:, None]
        for conv in self.convs:
            h = torch.tanh(conv(h))
        return self.head(h.transpose(1, 2))


def test_outputs_depend_on_the_input_after_standardizing_and_it_is_deterministic():
    torch.manual_seed(0)
    model = Stack().eval()
    audio = calibration_batch(16000, items=4, seconds=0.5, seed=1)
    other = calibration_batch(16000, items=4, seconds=0.5, seed=2)
    with torch.no_grad():
        before = model(audio)
    assert before.std(dim=(0, 1)).max() < 1e-4  # the input is lost: every output is the bias
    assert standardize_layers_(model, lambda: model(audio)) == 7
    with torch.no_grad():
        after, elsewhere = model(audio), model(other)
    torch.testing.assert_close(after.mean(dim=(0, 1)), torch.zeros(4), atol=1e-4, rtol=0)
    torch.testing.assert_close(after.std(dim=(0, 1)), torch.ones(4), atol=1e-4, rtol=0)
    assert elsewhere.std(dim=(0, 1)).min() > 0.3  # other signals stay in range, not only the calibration one

    torch.manual_seed(0)
    again = Stack().eval()
    standardize_layers_(again, lambda: again(audio))
    for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_calibration_signals_are_deterministic_and_differ_per_item():
    a, b = (
        calibration_batch(22050, items=3, seed=5, multiple_of=1024),
        calibration_batch(22050, items=3, seed=5, multiple_of=1024),
    )
    assert torch.equal(a, b) and a.shape == (3, 64 * 1024)
    assert 0.03 < a.pow(2).mean().sqrt() < 0.08
    assert not torch.allclose(a[0], a[1])


BUILDS: list[str] = []


def _toy_build(config, out):
    """A deterministic "model" from a config: what cached_random_model's caching is shown with."""
    BUILDS.append(str(config))
    out.write_bytes(b"weights of " + Path(config).read_bytes())


def test_a_random_model_is_built_once_per_config_and_copied_from_the_cache_after(tmp_path, caplog):
    from sharflow.models.random_init import cached_random_model

    BUILDS.clear()
    config = tmp_path / "tiny.yaml"
    config.write_text("layers: 2\n")
    first = cached_random_model(_toy_build, config, tmp_path / "a" / "model.nemo", str(tmp_path / "cache"))
    second = cached_random_model(_toy_build, config, tmp_path / "b" / "model.nemo", str(tmp_path / "cache"))
    assert len(BUILDS) == 1 and first.read_bytes() == second.read_bytes() == b"weights of layers: 2\n"
    assert "RANDOMLY INITIALISED" in caplog.text  # said on every copy, as on every build
    config.write_text("layers: 3\n")  # another config: built again, never the old one's weights
    third = cached_random_model(_toy_build, config, tmp_path / "c" / "model.nemo", str(tmp_path / "cache"))
    assert len(BUILDS) == 2 and third.read_bytes() == b"weights of layers: 3\n"
    assert not list((tmp_path / "a").glob(".*"))  # no temporary left beside the model
