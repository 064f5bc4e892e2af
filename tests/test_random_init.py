"""sharflow.models.random_init on a small stack that default initialisation makes degenerate."""

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
