"""Code frames, and the batches a codes job encodes: items of one frame count, sorted by length.

An item is one audio (the target or the context of a cut) at the codec's rate. Batches hold items of
one number of code frames only, padded once to that many frames, so an item's codes are exactly
those it gets when encoded alone, whatever else is in the shard and whichever rank encodes it.
"""

from dataclasses import dataclass

from sharflow.io.audio import compute_num_samples


@dataclass(frozen=True)
class Item:
    """One audio to encode: which cut of the shard, target or context, its tar member, its length."""

    cut: int  # position of the cut in the shard
    kind: str  # "target" or "context"
    member: str  # audio member name in its tar
    samples: int  # at the codec's rate


def whole_frames(samples: int, samples_per_frame: int) -> int:
    """Samples of `samples` padded up to whole code frames: ceil(samples / spf) * spf."""
    return -(-samples // samples_per_frame) * samples_per_frame


def plan_batches(
    items: list[Item],
    budget_samples: int,
    samples_per_frame: int,
    *,
    same_frames: bool = True,
    by_length: bool = True,
) -> list[list[Item]]:
    """Batches whose padded size (batch size × longest item in whole frames) fits the budget.

    same_frames: a batch holds items of one frame count only, so no item is padded past its own
    last frame and the codec sees exactly what it sees when the item is encoded alone. Codecs with
    convolutions see a batch's padding (zeros where the item alone would be edge-padded): with the
    demo codec, the last ~0.5 s of codes of every shorter item in a mixed batch change. Items are
    taken sorted by length (by_length) so batches are full; same_frames=False or by_length=False
    (shard order) make mixed batches, only to measure what they would cost or save.
    """
    batches: list[list[Item]] = []
    current: list[Item] = []
    longest = 0
    ordered = sorted(items, key=lambda i: (i.samples, i.cut, i.kind)) if by_length else items
    for item in ordered:
        width = whole_frames(item.samples, samples_per_frame)
        other_width = same_frames and width != longest
        if current and (other_width or max(longest, width) * (len(current) + 1) > budget_samples):
            batches.append(current)
            current, longest = [], 0
        current.append(item)
        longest = max(longest, width)
    if current:
        batches.append(current)
    return batches


def padding_efficiency(batches: list[list[Item]], samples_per_frame: int) -> float:
    """Real samples / padded samples over all batches."""
    real = sum(i.samples for b in batches for i in b)
    padded = sum(len(b) * whole_frames(max(i.samples for i in b), samples_per_frame) for b in batches)
    return real / padded if padded else 1.0


def samples_at(num_samples: int, sampling_rate: int, rate: int) -> int:
    """The length of audio of `num_samples` at `sampling_rate` once resampled to `rate`."""
    if sampling_rate == rate:
        return int(num_samples)
    return compute_num_samples(num_samples / sampling_rate, rate)


def code_frames(num_samples: int, sampling_rate: int, codec_rate: int, samples_per_frame: int) -> int:
    """Code frames of an audio: ceil(its samples at the codec's rate / samples_per_frame)."""
    return -(-samples_at(num_samples, sampling_rate, codec_rate) // samples_per_frame)
