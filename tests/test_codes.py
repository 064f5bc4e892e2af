"""The codes stage on the demo shards: format read back by lhotse and NeMo, ranks, failures."""

import io
import itertools
import shutil
import tarfile

import numpy as np
import pytest
import soundfile as sf
import soxr
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lhotse import CutSet

from sharflow.codes.batches import Item, padding_efficiency, plan_batches
from sharflow.core.errors import SharflowError
from sharflow.io.audio import compute_num_samples
from sharflow.models.codecs import load_codec
from testkit import assert_informative_codes, codes_in_tars, data_files, magpie_dataset, run_codes


def test_mixed_batches_in_shard_order_for_measuring_what_they_would_cost():
    """same_frames=False, by_length=False (bench_codes' comparison): items in shard order, cut only by
    the budget."""
    items = [Item(i, "target", f"m{i}", n) for i, n in enumerate((3000, 900, 5000, 100))]
    batches = plan_batches(items, 20_000, 1024, same_frames=False, by_length=False)
    assert [[i.cut for i in b] for b in batches] == [[0, 1, 2], [3]]  # 3 x 5120 fits, a 4th would not
    sorted_batches = plan_batches(items, 20_000, 1024, same_frames=False)
    assert [[i.cut for i in b] for b in sorted_batches] == [[3, 1, 0], [2]]
    exact = [Item(i, "target", f"m{i}", 1000) for i in range(3)]  # 3 x 1024 padded: exactly the budget
    assert [len(b) for b in plan_batches(exact, 3 * 1024, 1024)] == [3]
    assert [len(b) for b in plan_batches(exact, 3 * 1024 - 1, 1024)] == [2, 1]


def test_batches_hold_one_frame_count_within_budget_and_pad_only_to_whole_frames():
    rng = np.random.default_rng(0)
    spf, budget = 1024, 22050 * 60
    lengths = np.concatenate([rng.integers(8000, 300000, 400), [budget, budget + 1, 1, spf, spf + 1]])
    items = [Item(i, "target", "", int(n)) for i, n in enumerate(lengths)]
    batches = plan_batches(items, budget, spf)
    assert sorted(i.cut for b in batches for i in b) == list(range(len(items)))
    for b in batches:
        widths = {-(-i.samples // spf) * spf for i in b}
        assert len(widths) == 1 and (len(b) * widths.pop() <= budget or len(b) == 1)
    # an item longer than the budget goes alone; 1 and spf samples are one frame, spf + 1 are two
    assert [len(b) for b in batches if b[0].samples > budget] == [1]
    batch_of = {i.samples: k for k, b in enumerate(batches) for i in b}
    assert batch_of[1] == batch_of[spf] != batch_of[spf + 1]
    padded = sum(-(-int(n) // spf) * spf for n in lengths)
    assert padding_efficiency(batches, spf) == pytest.approx(lengths.sum() / padded, rel=1e-12)
    mixed = plan_batches(items, budget, spf, same_frames=False, by_length=False)
    assert padding_efficiency(mixed, spf) < padding_efficiency(batches, spf)


def test_codes_round_trip_with_shapes_dtype_and_frame_shift(coded, demo_shards):
    out, stats = coded
    fields = {"cuts": data_files(demo_shards[0] / "shar" / "cuts")[:2]}
    for f in ("target_audio", "context_audio"):
        fields[f] = data_files(demo_shards[0] / "shar" / f)[:2]
    for f in ("target_codes", "context_codes"):
        fields[f] = data_files(out / "shar" / "codes_tiny" / f)
    cuts = list(CutSet.from_shar(fields=fields))
    assert len(cuts) == 32 == sum(s["cuts"] for s in stats)
    for c in cuts:
        for audio, codes in ((c.target_audio, c.target_codes), (c.context_audio, c.context_codes)):
            array = codes.load()
            samples_22k = compute_num_samples(audio.num_samples / audio.sampling_rate, 22050)
            assert array.dtype == np.int16 and array.shape == (8, -(-samples_22k // 1024))
            assert codes.frame_shift == 1024 / 22050 and codes.temporal_dim == -1
    assert all(s["dtype"] == "int16" and s["padding_efficiency"] > 0.5 for s in stats)


def test_codes_do_not_depend_on_batching_ranks_or_shards_per_job(
    coded, demo_shards, tiny_nemo_codec, tmp_path
):
    out, _ = coded
    tars = {
        kind: out / "shar" / "codes_tiny" / kind / "codes.000000.tar"
        for kind in ("target_codes", "context_codes")
    }
    stage = codes_in_tars([tars["target_codes"]])
    assert_informative_codes(stage)
    # the reference shares nothing with the stage's batching: each utterance encoded alone
    codec = load_codec("nemo", str(tiny_nemo_codec))
    with tarfile.open(demo_shards[0] / "shar" / "target_audio" / "recording.000000.tar") as tar:
        flacs = [m for m in tar.getmembers() if m.name.endswith(".flac")]
        for i in (0, 5, len(flacs) - 1):
            wave, rate = sf.read(io.BytesIO(tar.extractfile(flacs[i]).read()), dtype="float32")
            wave = soxr.resample(wave, rate, codec.sample_rate).astype(np.float32)
            x = torch.zeros(1, -(-len(wave) // 1024) * 1024)
            x[0, : len(wave)] = torch.from_numpy(wave)
            alone, n = codec.encode(x, torch.tensor([len(wave)]))
            assert np.array_equal(stage[i], alone[0, :, : int(n[0])].numpy()), flacs[i].name
    # `coded` encoded shards 0 and 1 in one job on one rank; here shard 1 in a job of its own, on two
    # ranks (one spawned: a NeMo import, so one such job)
    (alone,) = run_codes(demo_shards[0], tmp_path, tiny_nemo_codec, shards=(1,), workers=2, per_job=1)
    assert len(alone["rank_seconds"]) == 2 and min(alone["rank_seconds"]) > 0  # both ranks encoded some
    for kind in tars:
        mine = (tmp_path / "shar" / "codes_tiny" / kind / "codes.000001.tar").read_bytes()
        assert mine == (out / "shar" / "codes_tiny" / kind / "codes.000001.tar").read_bytes(), kind


def test_undecodable_audio_fails_naming_shard_and_cut(demo_shards, tiny_nemo_codec, tmp_path):
    shar = tmp_path / "in" / "shar"
    for f in ("target_audio", "context_audio"):
        (shar / f).mkdir(parents=True)
        shutil.copy(demo_shards[0] / "shar" / f / "recording.000000.tar", shar / f)
    src = shar / "target_audio" / "recording.000000.tar"
    with tarfile.open(src) as t:
        members = [(m, t.extractfile(m).read()) for m in t.getmembers()]
    victim = members[4][0].name.rsplit(".", 1)[0]
    with tarfile.open(src, "w") as t:
        for m, data in members:
            if m.name == members[4][0].name:
                data = b"not flac" * 10
                m.size = len(data)
            t.addfile(m, io.BytesIO(data))
    with pytest.raises(SharflowError, match=f"shard 0, cut {victim}: target audio does not decode"):
        run_codes(tmp_path / "in", tmp_path / "out", tiny_nemo_codec, shards=(0,))
    assert not list(tmp_path.glob("out/shar/**/*.tar"))


def test_nemo_dataset_loads_target_and_context_codes(coded, demo_shards):

    out, _ = coded
    fields = {
        f: data_files(demo_shards[0] / "shar" / f)[:2] for f in ("cuts", "target_audio", "context_audio")
    }
    fields.update({f: data_files(out / "shar" / "codes_tiny" / f) for f in ("target_codes", "context_codes")})
    dataset = magpie_dataset(load_16khz_audio=False)
    batch = dataset[CutSet(list(CutSet.from_shar(fields=fields))[:4])]
    assert batch["audio_codes"].shape[:2] == (4, 8) and batch["context_audio_codes"].shape[:2] == (4, 8)
    assert "audio" not in batch


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 5000), max_size=40), st.integers(1, 20000), st.sampled_from([1, 256, 1024]))
def test_batch_plans_against_their_rules_on_ties_and_edge_sizes(lengths, budget, spf):
    items = [Item(i, "target" if i % 2 else "context", "", n) for i, n in enumerate(lengths)]
    batches = plan_batches(items, budget, spf)
    assert sorted((i.cut, i.kind) for b in batches for i in b) == sorted((i.cut, i.kind) for i in items)
    width = [{-(-i.samples // spf) for i in b} for b in batches]
    assert all(len(w) == 1 for w in width)  # one frame count per batch
    flat = [i for b in batches for i in b]
    assert flat == sorted(items, key=lambda i: (i.samples, i.cut, i.kind))  # taken in length order
    for b, w in zip(batches, width, strict=True):
        assert len(b) == 1 or len(b) * w.pop() * spf <= budget
    # a batch is cut only where the frame count changes or the next item would not fit
    for b, nxt in itertools.pairwise(batches):
        same = -(-b[0].samples // spf) == -(-nxt[0].samples // spf)
        assert not same or (len(b) + 1) * -(-b[0].samples // spf) * spf > budget
    real, padded = sum(lengths), sum(-(-n // spf) * spf for n in lengths)
    assert padding_efficiency(batches, spf) == pytest.approx(real / padded if padded else 1.0, rel=1e-12)
