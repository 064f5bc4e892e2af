"""The calibration sample: a seeded draw of whole speakers from a dataset's prepared records.

The sample must cost what the corpus costs, per record and per audio second, in every stage. Two
things decide that: the records' durations (short and long clips cost differently per second) and
how many records each speaker has: the context stage picks each record's context among its
speaker's other records, so a speaker thinned to one or two records loses records there (no
context) and the stages after it see fewer cuts than the corpus will give them. A draw of records
alone does just that: on the demo x20 it put the shar and codes stages and the disk 16-30 % under
the run's (benchmarks/bench_plan.py, docs: cost).

So the draw takes whole speakers: in the order of a seeded hash of their names, until the sample
has `size` records. A speaker with more than a quarter of `size` records gives a quarter of `size`
(its records with the smallest seeded hash of their line numbers): at that size a speaker keeps
its records' contexts, and no one speaker fills the sample. The durations come as the speakers
bring them; `Sample.strata` sets the sample's mix beside the corpus's. Two passes over the records
file, memory bounded by the speakers' count and the sample's size, the same sample for the same
file, size and seed.

The sample is written as the prepared records themselves: a NeMo manifest that prepare turns into
the same records again (prepared records are a fixed point of prepare), read against the same
audio root, containers' member addresses included.
"""

import hashlib
import heapq
import json
from dataclasses import dataclass, field

from sharflow.core.atomic import atomic_file, read_json

STRATA = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)  # upper bounds in seconds; one more stratum above the last


def stratum(duration: float) -> int:
    return next((i for i, bound in enumerate(STRATA) if duration < bound), len(STRATA))


def seeded_rank(seed: int, key: str) -> int:
    """A place in the draw: a hash of the seed and a speaker's name or a line's number."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:{key}".encode(), digest_size=8).digest(), "big")


@dataclass
class Sample:
    """What a draw took: records, audio seconds and speakers of the file and of the sample, and the
    records per duration stratum of both."""

    records: int = 0
    seconds: float = 0.0
    speakers: int = 0
    sample_records: int = 0
    sample_seconds: float = 0.0
    sample_speakers: int = 0
    strata: dict[int, list[int]] = field(default_factory=dict)  # stratum: [records, in the sample]

    def as_small(self) -> dict:
        """This draw as the small sample (drawn from the sample): its records and seconds."""
        return {"small_records": self.sample_records, "small_seconds": round(self.sample_seconds, 3)}

    def as_dict(self) -> dict:
        return {
            "records": self.records,
            "seconds": round(self.seconds, 3),
            "speakers": self.speakers,
            "sample_records": self.sample_records,
            "sample_seconds": round(self.sample_seconds, 3),
            "sample_speakers": self.sample_speakers,
            "strata": {
                (f"< {STRATA[k]:g} s" if k < len(STRATA) else f">= {STRATA[-1]:g} s"): {
                    "records": v[0],
                    "sample": v[1],
                }
                for k, v in sorted(self.strata.items())
            },
        }


def choose_speakers(counts: dict[str, int], size: int, seed: int, cap: int | None = None) -> dict[str, int]:
    """{speaker: records it gives}: whole speakers in seeded order until `size` records, each at
    most `cap` (default a quarter of `size`, at least 1); every speaker where the file has no more
    than `size`."""
    if sum(counts.values()) <= size:
        return dict(counts)
    cap = max(1, size // 4) if cap is None else cap
    chosen: dict[str, int] = {}
    taken = 0
    for speaker in sorted(counts, key=lambda s: (seeded_rank(seed, s), s)):
        if taken >= size:
            break
        chosen[speaker] = min(counts[speaker], cap)
        taken += chosen[speaker]
    return chosen


def draw_sample(prepared: str, out: str, size: int, seed: int, cap: int | None = None) -> Sample:
    """Write the sample of `prepared` (a prepared records file) to `out`, in file order; its Sample.
    `cap`: the most records one speaker gives (choose_speakers); the small sample, drawn from the
    sample, takes the sample's, so that its speakers have as many records as the sample's."""
    counts: dict[str, int] = {}
    summary = Sample()
    with open(prepared, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            counts[record.get("speaker", "")] = counts.get(record.get("speaker", ""), 0) + 1
            summary.records += 1
            summary.seconds += float(record["duration"])
            k = stratum(float(record["duration"]))
            summary.strata.setdefault(k, [0, 0])[0] += 1
    chosen = choose_speakers(counts, size, seed, cap)
    summary.speakers, summary.sample_speakers = len(counts), len(chosen)
    # a speaker giving part of its records: those with the smallest seeded hash of their line number
    heaps: dict[str, list[tuple[int, int]]] = {s: [] for s, n in chosen.items() if n < counts[s]}
    with open(prepared, encoding="utf-8") as f:
        for number, line in enumerate(f):
            speaker = json.loads(line).get("speaker", "")
            if speaker in heaps:
                item = (-seeded_rank(seed, str(number)), number)
                if len(heaps[speaker]) < chosen[speaker]:
                    heapq.heappush(heaps[speaker], item)
                elif item > heaps[speaker][0]:
                    heapq.heapreplace(heaps[speaker], item)
    partial = {number for heap in heaps.values() for _, number in heap}
    with open(prepared, encoding="utf-8") as f, atomic_file(out) as w:
        for number, line in enumerate(f):
            record = json.loads(line)
            speaker = record.get("speaker", "")
            if speaker in chosen and (speaker not in heaps or number in partial):
                w.write(line)
                summary.sample_records += 1
                summary.sample_seconds += float(record["duration"])
                summary.strata[stratum(float(record["duration"]))][1] += 1
    return summary


def draw_recordings(plan: str, out: str, small_out: str, hours: float, seed: int) -> dict:
    """The calibration's sample of a long_form dataset, from its segment plan (`plan`: every
    recording's length, read from its header): whole recordings in the order of a seeded hash of
    their paths until `hours` of audio (every recording of a smaller dataset), and the small sample,
    the first of those until a quarter of the sample's seconds (at least one recording). Each is
    written as a listing of recordings (the long_form dataset's manifest: path, language, speakers)
    in the plan's order; returns the summary (records and seconds stay unknown until the calibration
    has segmented the samples: sharflow.plan.build fills them from its prepared segments).

    Whole recordings, because the stage's work is one recording's (its speakers are clustered within
    it), and its cost is per second of recording, whatever is kept of it."""
    rows = read_json(plan)["recordings"]
    order = sorted(range(len(rows)), key=lambda i: (seeded_rank(seed, rows[i]["path"]), i))
    sample = _first_seconds(order, rows, hours * 3600.0)
    small = _first_seconds(sample, rows, sum(rows[i]["duration"] for i in sample) / 4)
    for chosen, path in ((sample, out), (small, small_out)):
        with atomic_file(path) as w:
            for i in sorted(chosen):
                row = rows[i]
                line = {"audio_filepath": row["path"], "lang": row["language"], "speakers": row["speakers"]}
                w.write(json.dumps(line, ensure_ascii=False) + "\n")

    def seconds(chosen) -> float:
        return round(sum(rows[i]["duration"] for i in chosen), 3)

    return {
        "long_form": True,
        "recordings": len(rows),
        "recording_seconds": seconds(range(len(rows))),
        "sample_recordings": len(sample),
        "sample_recording_seconds": seconds(sample),
        "small_recordings": len(small),
        "small_recording_seconds": seconds(small),
    }


def _first_seconds(order: list[int], rows: list[dict], seconds: float) -> list[int]:
    """The first of `order` until their durations reach `seconds` (at least one)."""
    taken, total = [], 0.0
    for i in order:
        if taken and total >= seconds:
            break
        taken.append(i)
        total += rows[i]["duration"]
    return taken
