"""Whole-dataset jobs as the corpus grows (issue 61): CPU per record and peak RSS of each job that sees
a whole dataset, on Emilia-shaped synthetic inputs at a ladder of sizes, and the plan's memory for them.

Emilia's shape: speakers with a long-tailed count of utterances each (a Pareto draw: a few speakers
with thousands, most with a handful), durations of 3 to 30 s (log-normal, clipped), about 2,000
containers (the records address members of `EN-B000000.tar` ... like the WebDataset reader's), a
few percent held out (dev/test splits by speaker). Each job runs its own code (the function its
`workflow_scripts` entry calls) in a fresh Python process over the inputs made for its size, and
that process reports its CPU seconds (user + system), wall seconds and peak RSS (VmHWM). The
inputs are made once per size and kept for the jobs that read them.

Jobs measured: `prepare` (a NeMo manifest of the records, spans of CONTAINERS long recordings: each
line checked, each recording's header probed once, as sparse WAVs), `context_plan` (groups the
records by speaker, bin-packs the groups), `shar_plan` (the seeded shuffle into shards and each
job's inputs file), `buckets` (the catalog's durations and lengths into bucket bins), `catalog` (the
shards' catalog fragments, made by the shar job's own code, merged into the dataset's catalog),
`shar_merge` (the shards' stats summed, their rejects gathered, records in = out + rejected),
`context_merge` (the context parts' keyed records merged k-way into with_context.jsonl, by split),
`quality_merge` (the parts' metrics in line order), `quality_filter` (records and metrics read in
step, thresholds applied), `codes_merge` (the codes shards' stats summed), `input_cfg` (the train
catalog's durations into weighted bucket bins and NeMo's dataloader config), `validation_ds` (the
same for the held-out sets, without bins), `text_merge` (the text parts joined in order, their
counts summed) and `splits` (each record's split by speaker and utterance hash, its identity fields
read in step from the identity parts, each audio file's size for its span key), and the identity
stage over every dataset: `identity_index` (the held-out records' fingerprints sorted into one
index, the train records' first copies, the speakers), `identity_check` (the first of the check
parts of about CHECK_RECORDS train records each, as the workflow splits them: its records each
looked up in the whole index; it prints how many of the planted copies of held-out records among
them it found; run REPEATS times, the least CPU kept) and `identity_merge` (8 check parts' links
joined, their counts summed), whose fingerprints are drawn from the demo's speech hashes
(HASHES_PER_SECOND a second; demo_hash_draw says how); `dataset_card` (the catalog's columns,
speakers and percentiles into DATASET.md); and `calibration_sample` (the cost plan's sample of whole
speakers, drawn from the records in three passes; the plan's other job reads the calibration's logs,
not the records); `evaluation_set` (the test split's Shar exported cut by cut to WAV files and
MagpieTTS's manifest); `verify` (every shard of the train split's Shar, every field's members
decoded and checked, the catalog along them, the totals; in one process) and `report` (every stage's
stats, as the jobs here write them, the catalog, buckets, records and quality metrics into the run's
plots and tables). The evaluation and verify Shar hold short cuts (EVALUATION_SECONDS,
VERIFY_SECONDS): their cost per second of audio is decoding, measured on real audio by bench_plan
(verify); here it is the cost per cut that must not grow.

Printed per job and size: records, wall, the job's CPU-µs per record (after its imports), the
process's peak RSS and the job's own part of it (above the RSS before the job), the growth of CPU per
record from the smallest size (bar: 1.5x) and the bytes a record adds to the job's own RSS from the
smallest size (its per-record part: bar at most 2 KB a record, or 4 GB in all). Then the plan check:
each job also runs on 300 records (the cost plan's sample), and the peak the plan predicts from that
run for the largest size (sharflow.plan.model.predicted_peak_mb) is set beside the peak measured
there (bar: within 25 %, or over by at most 2x).

    .venv/bin/python benchmarks/bench_scale.py [--sizes 10000 100000 1000000] [--jobs ...]
"""

import argparse
import contextlib
import importlib
import json
import resource
import struct
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CONTAINERS = 2000
HELD_OUT = 0.03  # the share of speakers held out (dev and test)
SHARD_SIZE, SHARDS_PER_JOB = 4096, 10


# ---- Emilia-shaped inputs ----------------------------------------------------------------------


def corpus(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """`n` records' columns: speaker index (long-tailed counts), duration (3-30 s), container and
    member index, split (0 train, 1 dev, 2 test)."""
    rng = np.random.default_rng(seed)
    speakers = max(1, n // 40)  # Emilia: ~40 utterances a speaker on average
    weights = rng.pareto(1.2, speakers) + 1.0  # a long tail: few speakers with many utterances
    speaker = rng.choice(speakers, size=n, p=weights / weights.sum())
    duration = np.clip(rng.lognormal(np.log(8.0), 0.6, n), 3.0, 30.0).round(3)
    container = rng.integers(0, CONTAINERS, n)
    held = rng.random(speakers) < HELD_OUT
    split = np.where(held[speaker], 1 + (speaker % 2), 0)
    return {"speaker": speaker, "duration": duration, "container": container, "split": split}


SPLITS = ("train", "dev", "test")


def write_with_context(columns: dict[str, np.ndarray], path: Path) -> None:
    """Records as the context stage writes them (with_context.jsonl): each with its split and a
    same-speaker context (the record before it of its speaker, else itself)."""
    last: dict[int, int] = {}
    n = len(columns["duration"])
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            s, d, c = int(columns["speaker"][i]), float(columns["duration"][i]), int(columns["container"][i])
            audio = f"EN/EN-B{c:06d}.tar#EN_B{c:06d}_S{s:07d}_W{i:09d}.mp3"
            j = last.get(s, i)
            last[s] = i
            cj = int(columns["container"][j])
            context = f"EN/EN-B{cj:06d}.tar#EN_B{cj:06d}_S{s:07d}_W{j:09d}.mp3"
            record = {
                "audio_filepath": audio,
                "offset": 0.0,
                "duration": d,
                "text": f"utterance {i} of speaker {s}, spoken for the benchmark",
                "speaker": f"| Language:en Dataset:emilia Speaker:S{s:07d} |",
                "source_audio": {"sampling_rate": 24000, "num_samples": round(d * 24000), "num_channels": 1},
                "lang": "en",
                "normalized_text": f"utterance {i} of speaker {s}, spoken for the benchmark",
                "dnsmos_ovrl": 3.2,
                "split": SPLITS[int(columns["split"][i])],
                "context_audio_filepath": context,
                "context_audio_offset": 0.0,
                "context_audio_duration": float(columns["duration"][j]),
            }
            f.write(json.dumps(record) + "\n")


def write_catalog(columns: dict[str, np.ndarray], path: Path) -> None:
    """The dataset catalog's columns buckets reads (duration, text and normalized text lengths,
    split), in row groups as the catalog job writes them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sharflow.dataset.catalog import ROW_GROUP_ROWS

    n = len(columns["duration"])
    chars = 30 + (columns["duration"] * 14).astype(np.int64)
    table = pa.table(
        {
            "duration": columns["duration"],
            "text_chars": chars,
            "normalized_text_chars": chars + 2,
            "split": pa.array([SPLITS[s] for s in columns["split"]]).dictionary_encode(),
        }
    )
    pq.write_table(table, path, row_group_size=min(ROW_GROUP_ROWS, max(1, n)))


def write_shard_files(with_context: Path, folder: Path) -> None:
    """What each shar job leaves for the merges, as the shar job writes them (its code): a catalog
    fragment (sharflow.dataset.catalog.catalog_row, write_fragment) and stats per shard of
    SHARD_SIZE train records, beside an empty rejects file; and the context stage's stats."""
    from sharflow.core.layout import rejected_beside
    from sharflow.dataset.catalog import catalog_row, write_fragment
    from sharflow.shar.plan import cut_id

    (folder / "shards").mkdir(parents=True, exist_ok=True)
    shard, rows, seconds, records = 0, [], 0.0, 0

    def flush():
        fragment = folder / "shards" / f"shard-{shard:06d}.catalog.parquet"
        write_fragment(rows, str(fragment))
        stats = str(folder / "shards" / f"shard-{shard:06d}.stats.json")
        summary = {
            "shard": shard,
            "records_in": len(rows),
            "cuts": len(rows),
            "rejected": {},
            "target_seconds": round(seconds, 3),
            "context_seconds": round(seconds, 3),
            **dict.fromkeys(("clipped_samples", "clipped_cuts", "padded_cuts", "copied_spans"), 0),
            "encoded_spans": 2 * len(rows),
            "bytes": {
                "cuts": 300 * len(rows),
                "target_audio": 48_000 * len(rows),
                "context_audio": 48_000 * len(rows),
            },
            "seconds": 1.0,
        }
        Path(stats).write_text(json.dumps(summary))
        Path(rejected_beside(stats)).write_text("")
        codes = {  # what a codes job writes for the shard (sharflow.codes.shard._write_shard)
            "codec": "codec",
            "shard": shard,
            "cuts": len(rows),
            "items": 2 * len(rows),
            "batches": max(1, len(rows) // 16),
            "padding_efficiency": 0.97,
            "audio_seconds": round(2 * seconds, 3),
            "sample_rate": 24000,
            "samples_per_frame": 1024,
            "num_codebooks": 8,
            "codebook_size": 1024,
            "dtype": "int16",
            "devices": ["cuda:0"],
            "rank_seconds": [10.0],
            "seconds": 10.0,
        }
        (folder / "shards" / f"shard-{shard:06d}.codes.json").write_text(json.dumps(codes))

    with open(with_context, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            records += 1
            if record["split"] != "train":
                continue
            rate = record["source_audio"]["sampling_rate"]
            rows.append(
                catalog_row(
                    record,
                    cut_id=cut_id(record),
                    shard=shard,
                    position=len(rows),
                    language="en",
                    target=(rate, record["source_audio"]["num_samples"]),
                    context=(rate, round(record["context_audio_duration"] * rate)),
                )
            )
            seconds += record["duration"]
            if len(rows) == SHARD_SIZE:
                flush()
                shard, rows, seconds = shard + 1, [], 0.0
    if rows:
        flush()
    (folder / "context_stats.json").write_text(json.dumps({"records_out": records}))
    (folder / "codes_stats.json").write_text(json.dumps({"sample_rate": 24000, "samples_per_frame": 1024}))


CONTEXT_PARTS = 8
QUALITY_PARTS = 16


def write_quality_inputs(with_context: Path, folder: Path) -> None:
    """The quality stage's inputs as its jobs leave them: the text stage's records (records.jsonl, the
    records without split and context) and its stats; each of QUALITY_PARTS parts' metrics lines (a
    run of lines each, keyed as sharflow.quality.part writes them) and stats, and their merge."""
    from sharflow.core.metrics import MEASURED

    rng = np.random.default_rng(1)
    folder = folder / "quality"
    folder.mkdir(parents=True, exist_ok=True)
    drop = (
        "split",
        "context_audio_filepath",
        "context_audio_offset",
        "context_audio_duration",
        "dnsmos_ovrl",
    )
    n = 0
    with (
        open(with_context, encoding="utf-8") as f,
        open(folder / "records.jsonl", "w", encoding="utf-8") as out,
    ):
        for text in f:
            record = json.loads(text)
            out.write(json.dumps({k: v for k, v in record.items() if k not in drop}) + "\n")
            n += 1
    (folder / "records_stats.json").write_text(json.dumps({"records_out": n}))
    bounds = np.linspace(0, n, QUALITY_PARTS + 1).astype(int)
    for p in range(QUALITY_PARTS):
        first, last = int(bounds[p]), int(bounds[p + 1])
        values = rng.normal(3.0, 0.4, (last - first, len(MEASURED))).round(4)
        with open(folder / f"part-{p:04d}.jsonl", "w", encoding="utf-8") as out:
            for i, row in enumerate(values):
                m = {"line": first + i + 1, **dict(zip(MEASURED, row.tolist(), strict=True))}
                m["speech_ratio"] = round(min(1.0, abs(m["speech_ratio"]) / 4), 4)
                out.write(json.dumps({**m, "key": f"{first + i:020x}"}) + "\n")
        stats = {"part": p, "records": last - first, "audio_seconds": 8.0 * (last - first), "seconds": 1.0}
        (folder / f"part-{p:04d}.stats.json").write_text(json.dumps({**stats, "ranks": [], "unreadable": 0}))
    with open(folder / "metrics.jsonl", "wb") as merged:  # what quality_merge makes of them
        for p in range(QUALITY_PARTS):
            merged.write((folder / f"part-{p:04d}.jsonl").read_bytes())


def write_context_parts(with_context: Path, folder: Path) -> None:
    """The context parts' files as their jobs leave them for context_merge (sharflow.context.
    keyed_lines: records keyed by (group, line), each part sorted so; groups by speaker onto
    CONTEXT_PARTS parts), an empty rejects file and the stats of each part, and quality's stats."""
    from sharflow.context.keyed_lines import keyed_line
    from sharflow.context.part import HIST_EDGES

    # (group, line, byte offset) a record, its line read again when written: the records themselves
    # would not fit this machine's memory at 10^7
    parts: list[list[tuple[str, int, int]]] = [[] for _ in range(CONTEXT_PARTS)]
    seconds = [0.0] * CONTEXT_PARTS
    with open(with_context, "rb") as f:
        offset = 0
        for line, text in enumerate(f, start=1):
            record = json.loads(text)
            group = record["speaker"]
            p = int(group.rsplit(":S", 1)[1].split()[0]) % CONTEXT_PARTS
            parts[p].append((group, line, offset))
            seconds[p] += record["duration"]
            offset += len(text)
    folder = folder / "context_parts"
    folder.mkdir(parents=True, exist_ok=True)
    for p, rows in enumerate(parts):
        rows.sort(key=lambda row: (row[0], row[1]))
        with (
            open(folder / f"part-{p:03d}.records.jsonl", "w", encoding="utf-8") as out,
            open(with_context, "rb") as f,
        ):
            for group, line, offset in rows:
                f.seek(offset)
                out.write(keyed_line(group, line, record=json.loads(f.readline())))
        (folder / f"part-{p:03d}.rejected.jsonl").write_text("")
        rank = {
            "rank": 0,
            "device": "cpu",
            "groups": len({row[0] for row in rows}),
            "records_in": len(rows),
            "planned_cost": float(len(rows)),
            "seconds": 1.0,
            "audio_seconds": seconds[p],
            "widened_rows": 0,
            "similarity_hist": [len(rows) // (len(HIST_EDGES) - 1)] * (len(HIST_EDGES) - 1),
        }
        stats = {
            "part": p,
            "groups": rank["groups"],
            "records_in": len(rows),
            "planned_cost": float(len(rows)),
        }
        (folder / f"part-{p:03d}.stats.json").write_text(
            json.dumps({**stats, "seconds": 1.0, "ranks": [rank]})
        )
    (folder / "records_stats.json").write_text(json.dumps({"records_out": sum(map(len, parts))}))


TEXT_PARTS = 8


def write_text_parts(folder: Path) -> None:
    """The text parts' files as their jobs leave them for text_merge: TEXT_PARTS contiguous runs of the
    text stage's records, each with an empty rejects folder and stats whose tally is what the part's
    own counting (sharflow.text.job._TextTally) makes of its records; and prepare's stats."""
    from sharflow.text.fields import TextSettings
    from sharflow.text.job import _TextTally

    records = (folder / "quality" / "records.jsonl").read_bytes().splitlines(keepends=True)
    out = folder / "text_parts"
    out.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, len(records), TEXT_PARTS + 1).astype(int)
    for p in range(TEXT_PARTS):
        first, last = int(bounds[p]), int(bounds[p + 1])
        tally = _TextTally("emilia", TextSettings(), None, None)
        for raw in records[first:last]:
            record = json.loads(raw)
            tally.ledger.keep(record["duration"])
            tally.sources["manifest"] += 1
            tally.languages["en"] += 1
            tally.tokenizers["english_phoneme"] += 1
            tally.coverage["unmeasured"] += 1
        (out / f"part-{p:04d}.jsonl").write_bytes(b"".join(records[first:last]))
        (out / f"part-{p:04d}.rejected").mkdir(exist_ok=True)
        stats = {"part": p, "parts": TEXT_PARTS, "first_line": first + 1, "records": last - first}
        (out / f"part-{p:04d}.stats.json").write_text(json.dumps({**stats, "tally": tally.state()}))
    (out / "prepare_stats.json").write_text(json.dumps({"records_out": len(records)}))


def write_identity_parts(with_context: Path, folder: Path) -> None:
    """What the splits job reads besides the records: the identity parts' entries (each record's
    fingerprint hashes and digest, in the records' order, over CONTEXT_PARTS files) and the identity
    job's links (none: no train record is a held-out one again)."""
    out = folder / "identity"
    out.mkdir(parents=True, exist_ok=True)
    with open(with_context, encoding="utf-8") as f:
        lines = sum(1 for _ in f)
    with contextlib.ExitStack() as stack, open(with_context, encoding="utf-8") as f:
        files = [
            stack.enter_context(open(out / f"part-{p:04d}.jsonl", "w", encoding="utf-8"))
            for p in range(CONTEXT_PARTS)
        ]
        for i, text in enumerate(f):
            r = json.loads(text)
            entry = {
                "audio_filepath": f"audio/{int(r['audio_filepath'].split('EN-B', 1)[1][:6]):06d}.flac",
                "offset": 30.0 * i,
                "duration": r["duration"],
                "hashes": [(i * 7919 + k) % 2**31 for k in range(8)],
                "digest": f"{i:032x}",
            }
            files[i * CONTEXT_PARTS // max(1, lines)].write(json.dumps(entry) + "\n")
    (out / "links.jsonl").write_text("")
    # the records as the splits job reads them, their audio in files on disk: it reads each file's size
    # (a span's key, core.splits.span_key). CONTAINERS long recordings, each record a span of one
    # (a tar member's size comes from the tar's kept index instead: 48 µs a member, bench_corpora)
    audio = folder / "audio"
    audio.mkdir(exist_ok=True)
    for c in range(CONTAINERS):
        (audio / f"{c:06d}.flac").write_bytes(b"\0" * 1024)
    with (
        open(folder / "quality" / "records.jsonl", encoding="utf-8") as f,
        open(out / "records.jsonl", "w", encoding="utf-8") as records,
    ):
        for i, text in enumerate(f):
            r = json.loads(text)
            c = int(r["audio_filepath"].split("EN-B", 1)[1][:6])
            r["audio_filepath"], r["offset"] = f"audio/{c:06d}.flac", 30.0 * i
            records.write(json.dumps(r) + "\n")


IDENTITY_CHECKS = 8
HASHES_PER_SECOND = 105  # landmark hashes a second of speech (bench_identity, the demo's)
# held out by speaker hash and by utterance hash, 3 % in all (Emilia names no speakers to hold out)
IDENTITY_SPLITS = {
    "seed": 1,
    **{split: {"fraction": 0.0075} for split in ("dev_unseen", "test_unseen", "dev_seen", "test_seen")},
}


def demo_hash_draw() -> list[tuple[np.ndarray, np.ndarray]]:
    """What synthetic fingerprints are drawn from: the landmark hashes of the demo's speech (every
    demo clip fingerprinted) as two independent parts, the anchor peak's frequency bin and a pair's
    (frequency step, time step), each with its shares. Drawn whole, the demo's 56 clips would give
    only ~18,000 distinct hashes (1 in ~17,000 pairs of draws collide: the posting lists of seven
    speakers' 56 sentences, far longer than a large corpus's); drawn in two parts, 1 in ~380,000.
    Common hashes stay common, so the index's posting lists grow as speech makes them; how long they
    are in a real corpus of millions is not measured here. An anchor's FANOUT steps are drawn apart
    too, so its triplets are rarer than real speech makes them (its steps are not independent)."""
    import soundfile as sf

    from sharflow.identity.fingerprint import fingerprint

    every = []
    for path in sorted((REPO / "demo" / "audio").rglob("*.flac")):
        audio, rate = sf.read(path, dtype="float32")
        every.append(fingerprint(audio, rate).hashes)
    hashes = np.concatenate(every)
    draws = []
    for part in (hashes & ~np.uint32((1 << 14) - 1), hashes & np.uint32((1 << 14) - 1)):
        values, counts = np.unique(part, return_counts=True)
        draws.append((values, counts / counts.sum()))
    return draws


def planted_copy(run: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A copy of a fingerprint as a lossy encode and a trim leave it: 30 % of its anchor peaks lost,
    a fifth of the rest's pairs lost and a fifth with a time step one frame off (a moved partner),
    each anchor a frame early or late at random, every time shifted by the trim (up to 200 frames),
    and a third as many new anchors' pairs (new peaks). Its own pairs score ~0.3 against the
    original (fingerprint.match), as an Opus or MP3 copy's do."""
    from sharflow.identity.fingerprint import HASH_DTYPE

    times = np.unique(run["time"])
    kept = times[rng.random(len(times)) >= 0.3]
    shift = dict(
        zip(kept.tolist(), (rng.integers(-1, 2, len(kept)) + rng.integers(0, 200)).tolist(), strict=True)
    )
    mine = run[np.isin(run["time"], kept) & (rng.random(len(run)) >= 0.2)].copy()
    moved = rng.random(len(mine)) < 0.2
    dt = (mine["hash"] & 127).astype(np.int64)
    mine["hash"][moved] = (mine["hash"][moved] & ~np.uint32(127)) | np.clip(
        dt[moved] + rng.choice([-1, 1], moved.sum()), 1, 63
    ).astype(np.uint32)
    mine["time"] = [t + shift[t] for t in mine["time"].tolist()]
    extra = run[rng.integers(0, len(run), len(run) // 3)].copy()
    extra["time"] = rng.integers(0, max(1, int(run["time"].max())), len(extra))
    out = np.concatenate([mine, extra]).astype(HASH_DTYPE)
    return np.sort(out, order=("hash", "time"))


COPY_EVERY = 20  # one train record in 20 is a planted copy of a held-out record (identity_check finds it)


def write_fingerprints(folder: Path) -> None:
    """The identity parts' files as their jobs leave them for the identity jobs (CONTEXT_PARTS parts):
    each record's entry (span, speaker, utterance and sample digest keys) and about HASHES_PER_SECOND
    hashes a second, FANOUT pairs to an anchor peak, drawn from the demo's speech at increasing frame
    times (so distinct records do not match: no offset holds their hashes together), no voices. One
    train record in COPY_EVERY is a copy of a held-out record of its part before it (planted_copy),
    listed in planted.jsonl: the links identity_check must find. The records are those of
    write_identity_parts (files on disk: their spans' keys)."""
    from sharflow.core.splits import TRAIN, SplitRules
    from sharflow.identity.fingerprint import FANOUT, HASH_DTYPE

    rng = np.random.default_rng(2)
    (bins, bin_shares), (steps, step_shares) = demo_hash_draw()
    rules = SplitRules.from_config(IDENTITY_SPLITS)
    out = folder / "fingerprints"
    out.mkdir(parents=True, exist_ok=True)
    with open(folder / "identity" / "records.jsonl", encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    bounds = np.linspace(0, len(records), CONTEXT_PARTS + 1).astype(int)
    with open(out / "planted.jsonl", "w", encoding="utf-8") as planted:
        for p in range(CONTEXT_PARTS):
            mine = records[bounds[p] : bounds[p + 1]]
            anchors = [max(1, round(HASHES_PER_SECOND * r["duration"] / FANOUT)) for r in mine]
            drawn = np.zeros(sum(anchors) * FANOUT, HASH_DTYPE)
            drawn["hash"] = np.repeat(rng.choice(bins, sum(anchors), p=bin_shares), FANOUT) | partner_steps(
                rng, sum(anchors), steps, step_shares
            )
            runs, held, start = [], [], 0
            for line, (r, count) in enumerate(zip(mine, anchors, strict=True), start=int(bounds[p]) + 1):
                run = drawn[start * FANOUT : (start + count) * FANOUT]
                start += count
                at = np.sort(rng.integers(0, round(r["duration"] * 125), count))  # 8 ms frames
                run["time"] = np.repeat(at, FANOUT)
                speaker = r["speaker"].rsplit(":", 1)[1].rstrip(" |")
                size = (folder / r["audio_filepath"]).stat().st_size
                span = f"{Path(r['audio_filepath']).name}:{size}:{r['offset']:.3f}:{r['duration']:.3f}"
                where = {"audio_filepath": r["audio_filepath"], "offset": r["offset"]}
                if rules.split(speaker, r["audio_filepath"], span, speaker) != TRAIN:
                    held.append((run, where))
                elif held and line % COPY_EVERY == 0:
                    source, origin = held[int(rng.integers(0, len(held)))]
                    run = planted_copy(source, rng)
                    planted.write(json.dumps({"copy": where, "of": origin}) + "\n")
                runs.append((np.sort(run, order=("hash", "time")), line, r, speaker, span))
            write_fingerprint_part(out, p, runs, rng)


def partner_steps(
    rng: np.random.Generator, anchors: int, steps: np.ndarray, shares: np.ndarray
) -> np.ndarray:
    """FANOUT (frequency step, time step) hash parts for each of `anchors` anchor peaks, drawn with
    `shares`, anchor by anchor (flat), as real partners are: peaks, so no two of one anchor within
    the peak neighbourhood of each other (NEIGHBOURHOOD: 9 bins and 12 frames either way), where the
    spectrogram has one local maximum (in the demo's speech 26 of 18,684 partner pairs are, ties).
    Drawn as they come, an anchor's partners would now and then share a step or be a frame apart:
    at 10^6 records most lookups then found candidates that real speech does not make."""
    from sharflow.identity.fingerprint import FANOUT, NEIGHBOURHOOD

    near_f, near_t = NEIGHBOURHOOD[0] // 2, NEIGHBOURHOOD[1] // 2
    drawn = rng.choice(steps, (anchors, FANOUT), p=shares)
    while True:
        df, dt = (drawn >> 7).astype(np.int64), (drawn & 127).astype(np.int64)
        close = np.zeros(drawn.shape, bool)
        for j in range(FANOUT):
            for k in range(j + 1, FANOUT):
                close[:, k] |= (abs(df[:, j] - df[:, k]) <= near_f) & (abs(dt[:, j] - dt[:, k]) <= near_t)
        if not close.any():
            return drawn.ravel()
        drawn[close] = rng.choice(steps, int(close.sum()), p=shares)


def write_fingerprint_part(out: Path, p: int, runs: list, rng: np.random.Generator) -> None:
    """One identity part's entries (part-NNNN.jsonl) and hashes (part-NNNN.npy) from its records' runs."""
    start = 0
    with open(out / f"part-{p:04d}.jsonl", "w", encoding="utf-8") as index:
        for run, line, r, speaker, span in runs:
            entry = {
                "line": line,
                "audio_filepath": r["audio_filepath"],
                "offset": r["offset"],
                "duration": r["duration"],
                "speaker": speaker,
                "who": speaker,
                "span": span,
                "utterance": f"{speaker}:{line}",
                "digest": f"{rng.integers(0, 2**63):016x}",
                "hashes": len(run),
                "start": start,
            }
            index.write(json.dumps(entry) + "\n")
            start += len(run)
    np.save(out / f"part-{p:04d}.npy", np.concatenate([run for run, *_ in runs]))


def write_card_inputs(folder: Path) -> None:
    """What the dataset card reads: the dataset's catalog (the shards' fragments merged by the catalog
    job's own code), its buckets (the buckets job's) and verify's summary."""
    from sharflow.dataset.buckets import write_buckets

    card = folder / "card"
    card.mkdir(exist_ok=True)
    job_catalog(folder, card)
    write_buckets(str(card / "catalog.parquet"), str(card / "buckets.yaml"), num_buckets=8, sub_buckets=2)
    shards = len(list((folder / "shards").glob("*.stats.json")))
    fields = ["cuts", "target_audio", "context_audio", "target_codes", "context_codes"]
    (card / "verify.json").write_text(json.dumps({"shards": shards, "fields": fields}))


PREPARE_RATE = 16_000


def write_sparse_wav(path: Path, samples: int, rate: int) -> None:
    """A 16-bit mono WAV of `samples` samples whose data is a hole in a sparse file: a real header over
    silence, a few KB on disk whatever its length (prepare reads the header only)."""
    data = 2 * samples
    header = (
        b"RIFF"
        + struct.pack("<I", 36 + data)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, rate, 2 * rate, 2, 16)
        + b"data"
        + struct.pack("<I", data)
    )
    with open(path, "wb") as f:
        f.write(header)
        f.truncate(len(header) + data)


def write_prepare_inputs(columns: dict[str, np.ndarray], folder: Path) -> None:
    """What prepare reads: a NeMo manifest of the corpus's records, each a span (offset, duration) of
    one of CONTAINERS long recordings, one after another in it; the recordings as sparse WAVs as long
    as their spans (prepare/audio: its audio root)."""
    audio = folder / "prepare" / "audio"
    audio.mkdir(parents=True, exist_ok=True)
    ends = np.zeros(CONTAINERS)
    with open(folder / "prepare" / "manifest.json", "w", encoding="utf-8") as f:
        for i in range(len(columns["duration"])):
            c, s, d = int(columns["container"][i]), int(columns["speaker"][i]), float(columns["duration"][i])
            record = {
                "audio_filepath": f"{c:06d}.wav",
                "offset": round(float(ends[c]), 3),
                "duration": d,
                "text": f"utterance {i} of speaker {s}, spoken for the benchmark",
                "speaker": f"S{s:07d}",
            }
            ends[c] = round(ends[c] + d, 3)
            f.write(json.dumps(record) + "\n")
    for c in range(CONTAINERS):
        write_sparse_wav(audio / f"{c:06d}.wav", int(np.ceil((ends[c] + 1.0) * PREPARE_RATE)), PREPARE_RATE)


def _flac_clip(seconds: float, rate: int) -> tuple[bytes, int]:
    """(FLAC bytes, samples) of `seconds` of a tone at `rate` (as lhotse counts the samples): small, so
    that a million cuts' Shar fits on a laptop's disk."""
    import io

    import soundfile as sf

    from sharflow.core.audio import compute_num_samples

    samples = compute_num_samples(seconds, rate)
    clip = io.BytesIO()
    tone = 0.1 * np.sin(2 * np.pi * 220 * np.arange(samples) / rate)
    sf.write(clip, tone, rate, format="FLAC", subtype="PCM_16")
    return clip.getvalue(), samples


def write_audio_shard(shar: Path, shard: int, records: list[dict], seconds: float, rate: int) -> list[dict]:
    """One shard of a Shar set's cuts and target and context audio, in the shar job's byte layout
    (sharflow.shar.format): each record's cut, and `seconds` of a tone at `rate` as both its target
    and its context audio (their members and manifests). Returns the cuts."""
    import gzip

    from sharflow.core.layout import AUDIO_FIELDS, CUTS
    from sharflow.shar.format import (
        TarMemberWriter,
        audio_member_names,
        cut_dict,
        cut_line,
        placeholder_bytes,
    )

    clip, samples = _flac_clip(seconds, rate)
    for fd in (CUTS, *AUDIO_FIELDS):
        (shar / fd.folder).mkdir(parents=True, exist_ok=True)
    cuts = [cut_dict(r) for r in records]
    with gzip.open(shar / CUTS.folder / CUTS.name(shard), "wt", encoding="utf-8") as out:
        out.writelines(cut_line(c) for c in cuts)
    for fd in AUDIO_FIELDS:
        with TarMemberWriter(str(shar / fd.folder / fd.name(shard))) as tar:
            for c in cuts:
                audio, manifest = audio_member_names(c["id"], "flac")
                tar.write(audio, clip)
                tar.write(manifest, placeholder_bytes(c["id"], rate, samples, seconds))
    return cuts


def write_plan(path: Path, shards: int) -> None:
    """A shard plan of one generation of `shards` shards from 0 (what the jobs read of a plan)."""
    path.write_text(json.dumps({"generations": [{"first": 0, "shards": shards}], "num_shards": shards}))


EVALUATION_SECONDS = 0.25  # each test cut's target and context audio in the evaluation set's Shar
# The test split's share, as a fixed one: 1 record in 64, so that it follows the corpus at any size
# (the draw of held-out speakers holds none out of 10^3 records); Emilia's held-out sets are ~1.5 %
EVALUATION_EVERY = 64


def write_evaluation_inputs(with_context: Path, folder: Path) -> None:
    """What an evaluation set's export reads: a test split's Shar (evaluation/shar: one record in
    EVALUATION_EVERY), SHARD_SIZE cuts a shard, written with the shar job's own byte layout
    (sharflow.shar.format: the cut, its audio tar members and their manifests). Each cut's target
    and context audio is EVALUATION_SECONDS of 24 kHz FLAC (one tone for all: the export's cost per
    cut, not per second of audio, is what grows with the split; per second it only decodes and
    writes)."""
    with open(with_context, encoding="utf-8") as f:
        tests = [json.loads(line) for i, line in enumerate(f) if i % EVALUATION_EVERY == 0]
    for shard, first in enumerate(range(0, len(tests), SHARD_SIZE)):
        write_audio_shard(
            folder / "evaluation" / "shar",
            shard,
            tests[first : first + SHARD_SIZE],
            EVALUATION_SECONDS,
            24_000,
        )


VERIFY_SECONDS = 0.1  # each train cut's target and context audio in verify's Shar
VERIFY_CODEC = {"sample_rate": 24_000, "samples_per_frame": 1024, "num_codebooks": 8, "codebook_size": 1024}


def write_verify_inputs(with_context: Path, folder: Path) -> None:
    """What verify reads: the train split's Shar (verify/shar), SHARD_SIZE cuts a shard, every field
    (cuts, target and context audio, target and context codes of one codec) in the layouts the shar
    and codes jobs write (sharflow.shar.format; lhotse's ArrayTarWriter, as the codes job uses it);
    the catalog over it (the shar job's fragments merged by the catalog job's code); the plan and the
    shar and codes stats. Each cut is VERIFY_SECONDS long, target and context: verify decodes every
    member, and its cost per second of audio is measured on real audio (bench_plan); what grows
    with the corpus is the walk, the catalog check and the totals."""
    from lhotse.array import Array, TemporalArray
    from lhotse.shar.writers import ArrayTarWriter

    from sharflow.core.audio import compute_num_samples
    from sharflow.core.layout import codes_fields
    from sharflow.dataset.catalog import catalog_row, write_fragment

    rate = VERIFY_CODEC["sample_rate"]
    samples = compute_num_samples(VERIFY_SECONDS, rate)
    frames = -(-samples // VERIFY_CODEC["samples_per_frame"])
    codes = (
        np.random.default_rng(0).integers(0, 1024, (VERIFY_CODEC["num_codebooks"], frames)).astype(np.int16)
    )
    shape = [VERIFY_CODEC["num_codebooks"], frames]
    frame_shift = VERIFY_CODEC["samples_per_frame"] / rate
    root = folder / "verify"
    shar = root / "shar"
    with open(with_context, encoding="utf-8") as f:
        train = [
            {**r, "duration": VERIFY_SECONDS, "context_audio_duration": VERIFY_SECONDS}
            for r in map(json.loads, f)
            if r["split"] == "train"
        ]
    starts = range(0, len(train), SHARD_SIZE)
    for shard, first in enumerate(starts):
        records = train[first : first + SHARD_SIZE]
        cuts = write_audio_shard(shar, shard, records, VERIFY_SECONDS, rate)
        for fd in codes_fields("codec"):
            path = shar / fd.folder / fd.name(shard)
            path.parent.mkdir(parents=True, exist_ok=True)
            with ArrayTarWriter(str(path), shard_size=None, compression="numpy") as tar:
                for c in cuts:
                    array = Array(storage_type="shar", storage_path="", storage_key="", shape=shape)
                    tar.write(
                        c["id"],
                        codes,
                        TemporalArray(array, temporal_dim=-1, frame_shift=frame_shift, start=0),
                    )
        rows = [
            catalog_row(
                r,
                cut_id=c["id"],
                shard=shard,
                position=i,
                language="en",
                target=(rate, samples),
                context=(rate, samples),
            )
            for i, (r, c) in enumerate(zip(records, cuts, strict=True))
        ]
        write_fragment(rows, str(root / "fragments" / f"shard-{shard:06d}.catalog.parquet"))
    shards = len(starts)
    write_plan(root / "plan.json", shards)
    hours = round(len(train) * VERIFY_SECONDS / 3600, 6)
    (root / "shar_stats.json").write_text(json.dumps({"cuts": len(train), "hours": hours}))
    (root / "codes_stats.json").write_text(json.dumps({"cuts": len(train), "shards": shards, **VERIFY_CODEC}))
    merge_fragments(root / "fragments", root / "codes_stats.json", root / "catalog.parquet")


REPORT_STATS = (  # the jobs whose stats the report reads, with the key it reads them under
    ("prepare", "prepare"),
    ("text", "text_merge"),
    ("quality", "quality_filter"),
    ("splits", "splits"),
    ("context", "context_merge"),
    ("shar", "shar_merge"),
    ("identity", "identity_merge"),
)


def write_report_inputs(folder: Path) -> None:
    """What the report reads besides the catalog, buckets, records and metrics: every stage's stats as
    its job writes them (the jobs measured here, run once more into report/<job>/), and verify's
    summary in its form (verify.json: its counts from the catalog, since verify itself reads audio)."""
    import pyarrow.parquet as pq

    from sharflow.core.layout import fields

    report = folder / "report"
    for _, job in (*REPORT_STATS, ("codes", "codes_merge")):
        (report / job).mkdir(parents=True, exist_ok=True)
        JOBS[job](folder, report / job)
    catalog = pq.read_table(folder / "card" / "catalog.parquet", columns=["duration", "context_duration"])
    shards = len(list((folder / "shards").glob("*.stats.json")))
    hours = {
        k: round(float(catalog[c].to_numpy().sum()) / 3600, 6)
        for k, c in (("hours", "duration"), ("context_hours", "context_duration"))
    }
    verify = {
        "dataset": "emilia",
        "ok": True,
        "shards": shards,
        "fields": [fd.label for fd in fields(["codec"])],
        "cuts": catalog.num_rows,
        **hours,
        "catalog_rows": catalog.num_rows,
    }
    (report / "verify.json").write_text(json.dumps(verify))


def report_files(folder: Path) -> dict:
    """The report's files of the dataset ({key: path}, as the report rule gives them)."""
    report = folder / "report"
    files = {key: str(report / job / "stats.json") for key, job in REPORT_STATS}
    return {
        **files,
        "codes": {"codec": str(report / "codes_merge" / "stats.json")},
        "buckets": str(folder / "card" / "buckets.yaml"),
        "verify": str(report / "verify.json"),
        "catalog": str(folder / "card" / "catalog.parquet"),
        "records": str(folder / "quality" / "records.jsonl"),
        "quality_metrics": str(folder / "quality" / "metrics.jsonl"),
    }


# The input steps each step reads (made before it), and those each job reads: make_inputs makes only
# what its jobs need, with what that needs
STEP_NEEDS = {
    "shard_files": ("with_context",),
    "context_parts": ("with_context",),
    "quality_inputs": ("with_context",),
    "text_parts": ("quality_inputs",),
    "identity_parts": ("quality_inputs",),
    "fingerprints": ("identity_parts",),
    "identity_checks": ("fingerprints",),
    "card_inputs": ("shard_files",),
    "report_inputs": ("prepare_inputs", "text_parts", "context_parts", "card_inputs", "identity_checks"),
    "evaluation_inputs": ("with_context",),
    "verify_inputs": ("with_context",),
}
JOB_INPUTS = {
    "prepare": ("prepare_inputs",),
    "text_merge": ("text_parts",),
    "splits": ("identity_parts",),
    "context_plan": ("with_context",),
    "shar_plan": ("with_context",),
    "calibration_sample": ("with_context",),
    "buckets": ("catalog",),
    "catalog": ("shard_files",),
    "shar_merge": ("shard_files",),
    "codes_merge": ("shard_files",),
    "input_cfg": ("catalog", "shard_files"),
    "validation_ds": ("catalog", "shard_files"),
    "context_merge": ("context_parts",),
    "quality_merge": ("quality_inputs",),
    "quality_filter": ("quality_inputs",),
    "identity_index": ("fingerprints",),
    "identity_check": ("identity_checks",),
    "identity_merge": ("identity_checks",),
    "dataset_card": ("card_inputs",),
    "evaluation_set": ("evaluation_inputs",),
    "verify": ("verify_inputs",),
    "report": ("report_inputs",),
}


def needed_steps(jobs: list[str]) -> set[str]:
    """The input steps `jobs` read, with the steps those read."""
    todo, steps = [step for job in jobs for step in JOB_INPUTS[job]], set()
    while todo:
        step = todo.pop()
        if step not in steps:
            steps.add(step)
            todo.extend(STEP_NEEDS.get(step, ()))
    return steps


def make_inputs(n: int, folder: Path, jobs: list[str] | None = None) -> None:
    """The input files `jobs` (default: every job) read, for `n` records, in `folder` (kept: each step
    made once, marked done by a file of its name)."""
    wanted = needed_steps(list(JOBS) if jobs is None else jobs)
    folder.mkdir(parents=True, exist_ok=True)
    columns = corpus(n)
    records = folder / "with_context.jsonl"
    steps = {
        "with_context": lambda: write_with_context(columns, records),
        "catalog": lambda: write_catalog(columns, folder / "catalog.parquet"),
        "shard_files": lambda: write_shard_files(records, folder),
        "context_parts": lambda: write_context_parts(records, folder),
        "quality_inputs": lambda: write_quality_inputs(records, folder),
        "text_parts": lambda: write_text_parts(folder),
        "identity_parts": lambda: write_identity_parts(records, folder),
        "fingerprints": lambda: write_fingerprints(folder),
        "identity_checks": lambda: write_identity_checks(folder),
        "card_inputs": lambda: write_card_inputs(folder),
        "prepare_inputs": lambda: write_prepare_inputs(columns, folder),
        "report_inputs": lambda: write_report_inputs(folder),
        "evaluation_inputs": lambda: write_evaluation_inputs(records, folder),
        "verify_inputs": lambda: write_verify_inputs(records, folder),
    }
    for name, step in steps.items():
        done = folder / "inputs" / f"{name}.done"
        if name in wanted and not done.exists():
            step()
            done.parent.mkdir(exist_ok=True)
            done.write_text(str(n))


# ---- the jobs, each run in a fresh process ------------------------------------------------------


def job_prepare(folder: Path, out: Path) -> None:
    """prepare's metadata part: the manifest read and checked line by line, each record's recording
    probed (its header, once per recording: CONTAINERS of them, cached), the records written."""
    from sharflow.prepare.job import prepare_dataset

    prepare_dataset(
        str(folder / "prepare" / "manifest.json"),
        prepared=str(out / "prepared.jsonl"),
        rejected_dir=str(out / "rejected"),
        stats=str(out / "stats.json"),
        dataset="emilia",
        audio_root=str(folder / "prepare" / "audio"),
        workers=1,  # in this process, where its CPU is counted (more workers: the same work, spread)
    )


def job_context_plan(folder: Path, out: Path) -> None:
    from sharflow.context.plan import plan_context

    plan_context(
        str(folder / "with_context.jsonl"),
        plan=str(out / "context_plan.json"),
        parts=64,
        grouping={"preset": "speaker"},
        cost_per_audio_second=0.01,
    )


def job_shar_plan(folder: Path, out: Path) -> None:
    from sharflow.shar.plan import plan_shards

    plan_shards(
        str(folder / "with_context.jsonl"),
        plan=str(out / "shard_plan.json"),
        inputs_dir=str(out / "shar_inputs"),
        shard_size=SHARD_SIZE,
        seed=7,
        shards_per_job=SHARDS_PER_JOB,
        split="train",
    )


def job_buckets(folder: Path, out: Path) -> None:
    from sharflow.dataset.buckets import write_buckets

    write_buckets(str(folder / "catalog.parquet"), str(out / "buckets.yaml"), num_buckets=8, sub_buckets=2)


def merge_fragments(fragments: Path, codes_stats: Path, out: Path) -> None:
    """The catalog job's merge of the shards' catalog fragments in `fragments` into `out` (the plan
    is read only to count tokens, which these runs do not)."""
    from sharflow.dataset.catalog import build_catalog

    build_catalog(
        "emilia",
        fragments=sorted(str(p) for p in fragments.glob("*.catalog.parquet")),
        plan=str(fragments / "plan-unused.json"),
        codes_stats={"codec": str(codes_stats)},
        out=str(out),
    )


def job_catalog(folder: Path, out: Path) -> None:
    merge_fragments(folder / "shards", folder / "codes_stats.json", out / "catalog.parquet")


def job_shar_merge(folder: Path, out: Path) -> None:
    from sharflow.shar.merge import merge_shar_stats

    stats = sorted(str(p) for p in (folder / "shards").glob("*.stats.json"))
    records = json.loads((folder / "context_stats.json").read_text())["records_out"]
    cuts = sum(json.loads(Path(p).read_text())["cuts"] for p in stats)
    plan = out / "plan.json"
    plan.write_text(json.dumps({"held_out": {"dev+test": records - cuts}}))
    merge_shar_stats(
        stats,
        context_stats=str(folder / "context_stats.json"),
        plan=str(plan),
        stats=str(out / "stats.json"),
        rejected_dir=str(out / "rejected"),
        dataset="emilia",
    )


def job_context_merge(folder: Path, out: Path) -> None:
    from sharflow.context.merge import merge_context

    parts = folder / "context_parts"
    merge_context(
        part_records=sorted(str(p) for p in parts.glob("part-*.records.jsonl")),
        part_rejected=sorted(str(p) for p in parts.glob("part-*.rejected.jsonl")),
        part_stats=sorted(str(p) for p in parts.glob("part-*.stats.json")),
        records_stats=str(parts / "records_stats.json"),
        with_context=str(out / "with_context.jsonl"),
        rejected_dir=str(out / "rejected"),
        stats=str(out / "stats.json"),
        dataset="emilia",
    )


def job_quality_merge(folder: Path, out: Path) -> None:
    from sharflow.quality.merge import merge_quality

    quality = folder / "quality"
    merge_quality(
        part_metrics=sorted(str(p) for p in quality.glob("part-*[0-9].jsonl")),
        part_stats=sorted(str(p) for p in quality.glob("part-*.stats.json")),
        records_stats=str(quality / "records_stats.json"),
        metrics=str(out / "metrics.jsonl"),
        stats=str(out / "stats.json"),
    )


def job_quality_filter(folder: Path, out: Path) -> None:
    from sharflow.quality.filter import filter_quality

    quality = folder / "quality"
    filter_quality(
        records=str(quality / "records.jsonl"),
        metrics=str(quality / "metrics.jsonl"),
        records_stats=str(quality / "records_stats.json"),
        kept=str(out / "kept.jsonl"),
        rejected_dir=str(out / "rejected"),
        stats=str(out / "stats.json"),
        filters={"speech_ratio": {"min": 0.5}, "dnsmos_ovrl": {"min": 2.5}},
        action="drop",
        dataset="emilia",
    )


def job_codes_merge(folder: Path, out: Path) -> None:
    from sharflow.codes.merge import merge_codes_stats

    merge_codes_stats(
        sorted(str(p) for p in (folder / "shards").glob("*.codes.json")), str(out / "stats.json")
    )


def job_input_cfg(folder: Path, out: Path) -> None:
    from sharflow.dataset.training import write_input_cfg

    shards = len(list((folder / "shards").glob("*.stats.json")))
    plan = out / "shard_plan.json"  # the train set's generations: what the entries' shard ranges name
    write_plan(plan, shards)
    dataset = {"shar_dir": str(out / "shar"), "plan": str(plan), "catalog": str(folder / "catalog.parquet")}
    write_input_cfg(
        {"emilia": dataset},
        str(out / "input_cfg.yaml"),
        codec="codec",
        num_buckets=8,
        settings={"shuffle": True, "shard_seed": "randomized"},
    )


def job_text_merge(folder: Path, out: Path) -> None:
    from sharflow.core.layout import TextPartFiles
    from sharflow.text.fields import TextSettings
    from sharflow.text.job import merge_text

    parts = folder / "text_parts"
    merge_text(
        [
            TextPartFiles(f"{prefix}.jsonl", f"{prefix}.rejected", f"{prefix}.stats.json")
            for prefix in (str(parts / f"part-{p:04d}") for p in range(TEXT_PARTS))
        ],
        records_stats=str(parts / "prepare_stats.json"),
        out_records=str(out / "records.jsonl"),
        rejected_dir=str(out / "rejected"),
        stats=str(out / "stats.json"),
        dataset="emilia",
        settings=TextSettings(),
    )


def job_splits(folder: Path, out: Path) -> None:
    from sharflow.splits.stage import DatasetSplits, assign_splits

    rules = IDENTITY_SPLITS
    identity = folder / "identity"
    assign_splits(
        "emilia",
        DatasetSplits(str(identity / "records.jsonl"), str(folder), rules),
        links=str(identity / "links.jsonl"),
        identity=sorted(str(p) for p in identity.glob("part-*.jsonl")),
        records_in=json.loads((folder / "quality" / "records_stats.json").read_text())["records_out"],
        out_records=str(out / "records.jsonl"),
        rejected_dir=str(out / "rejected"),
        stats=str(out / "stats.json"),
    )


def identity_datasets(folder: Path) -> dict:
    from sharflow.identity.links import DatasetIdentity

    prints = folder / "fingerprints"
    parts = [
        [str(prints / f"part-{p:04d}.jsonl"), str(prints / f"part-{p:04d}.npy")] for p in range(CONTEXT_PARTS)
    ]
    return {"emilia": DatasetIdentity(parts, IDENTITY_SPLITS)}


def job_identity_index(folder: Path, out: Path) -> None:
    from sharflow.core.layout import IdentityIndexFiles
    from sharflow.identity.links import MatchRules, index_identities

    files = IdentityIndexFiles.under(out)
    index_identities(identity_datasets(folder), rules=MatchRules(), out=files)


def identity_index(folder: Path):
    """The index job's files for `folder`'s corpus (made by make_inputs with the job's own code)."""
    from sharflow.core.layout import IdentityIndexFiles

    index = folder / "identity_index"
    return IdentityIndexFiles.under(index)


def write_identity_checks(folder: Path) -> None:
    """The identity index (by the index job's own code) and what IDENTITY_CHECKS check parts leave
    for the merge: each an equal share of the train records, one in 100 of them linked."""
    from sharflow.identity.links import SAME_CONTENT, _Tally

    index = identity_index(folder)
    Path(index.summary).parent.mkdir(exist_ok=True)
    job_identity_index(folder, Path(index.summary).parent)
    train = sum(json.loads(Path(index.summary).read_text())["train_checked"].values())
    checks = folder / "identity_checks"
    checks.mkdir(exist_ok=True)
    bounds = np.linspace(0, train, IDENTITY_CHECKS + 1).astype(int)
    for p in range(IDENTITY_CHECKS):
        tally = _Tally()
        with open(checks / f"{p}.jsonl", "w", encoding="utf-8") as f:
            for n in range(int(bounds[p]), int(bounds[p + 1]), 100):
                where = {
                    "audio_filepath": f"audio/{n % CONTAINERS:06d}.flac",
                    "offset": 30.0 * n,
                    "duration": 8.0,
                }
                row = {"dataset": "emilia", **where, "reason": SAME_CONTENT, "score": 0.5}
                row["matched"] = {"dataset": "emilia", **where, "offset": 1.0, "split": "dev"}
                f.write(json.dumps(row) + "\n")
                tally.add(row)
        first, records = int(bounds[p]), int(bounds[p + 1] - bounds[p])
        stats = {"part": p, "parts": IDENTITY_CHECKS, "first": first, "records": records, **tally.state()}
        (checks / f"{p}.stats.json").write_text(json.dumps({**stats, "seconds": 1.0}))


CHECK_RECORDS = 100_000  # train records a measured identity check part holds, about: the corpus in such parts


def job_identity_check(folder: Path, out: Path) -> dict:
    """The first of the check parts of about CHECK_RECORDS train records each (one part up to 10^5
    records, ten at 10^6), as the workflow runs them (identity.check_parts): each loads the whole
    index and looks its records up. The lookups' cost per record as the corpus (and so its
    held-out set) grows; {"share": the share of the corpus's records it checked}."""
    from sharflow.core.layout import IdentityCheckFiles
    from sharflow.identity.links import MatchRules, check_identities

    train = sum(json.loads(Path(identity_index(folder).summary).read_text())["train_checked"].values())
    stats = check_identities(
        identity_datasets(folder),
        index=identity_index(folder),
        part=0,
        parts=max(1, round(train / CHECK_RECORDS)),
        rules=MatchRules(),
        out=IdentityCheckFiles(str(out / "links.jsonl"), str(out / "stats.json")),
    )
    return {"share": stats["records"] / train}


def planted_found(folder: Path, out: Path) -> dict:
    """After job_identity_check (not timed): {planted, found}, the planted copies of held-out records
    (write_fingerprints) among the train records its part checked, and how many of them it linked to
    their original."""
    from sharflow.core.splits import TRAIN
    from sharflow.identity.links import SAME_CONTENT, _Records

    part = json.loads((out / "stats.json").read_text())
    checked, n = set(), -1
    for _, entry, _, split, _ in _Records(identity_datasets(folder)):
        n += split == TRAIN
        if split == TRAIN and part["first"] <= n < part["first"] + part["records"]:
            checked.add((entry["audio_filepath"], entry["offset"]))
    with open(folder / "fingerprints" / "planted.jsonl", encoding="utf-8") as f:
        planted = {(c["copy"]["audio_filepath"], c["copy"]["offset"]): c["of"] for c in map(json.loads, f)}
    planted = {where: of for where, of in planted.items() if where in checked}
    found = 0
    with open(out / "links.jsonl", encoding="utf-8") as f:
        for row in map(json.loads, f):
            of = planted.get((row["audio_filepath"], row["offset"]))
            matched = {k: row.get("matched", {}).get(k) for k in ("audio_filepath", "offset")}
            found += row["reason"] == SAME_CONTENT and of == matched
    return {"planted": len(planted), "found": found}


def job_identity_merge(folder: Path, out: Path) -> None:
    from sharflow.core.layout import IdentityCheckFiles
    from sharflow.identity.links import MatchRules, merge_identities

    checks = folder / "identity_checks"
    merge_identities(
        identity_index(folder).summary,
        [
            IdentityCheckFiles(str(checks / f"{p}.jsonl"), str(checks / f"{p}.stats.json"))
            for p in range(IDENTITY_CHECKS)
        ],
        rules=MatchRules(),
        out_links=str(out / "links.jsonl"),
        out_stats=str(out / "stats.json"),
    )


def job_calibration_sample(folder: Path, out: Path) -> None:
    """The cost plan's sample as its job draws it (workflow_scripts/calibration_sample.py): whole
    speakers from the records, then a quarter of that, and their summary."""
    from sharflow.plan.sample import draw_sample

    size, seed = CALIBRATION, 0
    sample = draw_sample(str(folder / "with_context.jsonl"), str(out / "sample.jsonl"), size, seed)
    small = draw_sample(str(out / "sample.jsonl"), str(out / "small.jsonl"), size // 4, seed, cap=size // 4)
    (out / "summary.json").write_text(json.dumps({**sample.as_dict(), **small.as_small()}))


def job_dataset_card(folder: Path, out: Path) -> None:
    from sharflow.dataset.tables import write_dataset_card

    card = folder / "card"
    write_dataset_card(
        "emilia",
        catalog=str(card / "catalog.parquet"),
        buckets=str(card / "buckets.yaml"),
        verify=str(card / "verify.json"),
        out=str(out / "DATASET.md"),
    )


def job_validation_ds(folder: Path, out: Path) -> None:
    from sharflow.dataset.training import write_input_cfg

    shards = len(list((folder / "shards").glob("*.stats.json")))
    plan = out / "shard_plan.json"  # as input_cfg, for the held-out sets' Shar
    write_plan(plan, shards)
    dataset = {
        "shar_dir": str(out / "shar"),
        "plan": str(plan),
        "catalog": str(folder / "catalog.parquet"),
        "split": "dev",
    }
    write_input_cfg(
        {"emilia": dataset},
        str(out / "validation_ds.yaml"),
        codec="codec",
        num_buckets=0,  # as the validation_ds rule: no bins for a validation loader
        settings={"shuffle": False},
        use="model.validation_ds",
    )


def job_evaluation_set(folder: Path, out: Path) -> None:
    """The test split's evaluation set: every cut's target and context audio out of the Shar as WAV
    files, and the manifest MagpieTTS's evaluation reads."""
    from sharflow.dataset.evaluation import export_evaluation_set

    export_evaluation_set(
        "emilia_test", shar_dir=str(folder / "evaluation" / "shar"), out_dir=str(out / "set")
    )


def job_verify(folder: Path, out: Path) -> None:
    """verify over the train split's Shar: every shard's fields opened and their members checked (in
    this process: workers 1, where its CPU is counted), the catalog along them, the totals."""
    from sharflow.verify.dataset import verify_dataset

    root = folder / "verify"
    verify_dataset(
        "emilia",
        shar_dir=str(root / "shar"),
        plan=str(root / "plan.json"),
        shar_stats=str(root / "shar_stats.json"),
        codes_stats={"codec": str(root / "codes_stats.json")},
        catalog=str(root / "catalog.parquet"),
        out=str(out / "verify.json"),
        workers=1,
    )


def job_report(folder: Path, out: Path) -> None:
    """The run report over the dataset: its plots, summary, quality view and tables."""
    from sharflow.report.report import write_report

    write_report({"emilia": report_files(folder)}, str(out), min_similarity=0.6)


JOBS = {
    "prepare": job_prepare,
    "text_merge": job_text_merge,
    "splits": job_splits,
    "context_plan": job_context_plan,
    "shar_plan": job_shar_plan,
    "buckets": job_buckets,
    "catalog": job_catalog,
    "shar_merge": job_shar_merge,
    "context_merge": job_context_merge,
    "quality_merge": job_quality_merge,
    "quality_filter": job_quality_filter,
    "codes_merge": job_codes_merge,
    "input_cfg": job_input_cfg,
    "validation_ds": job_validation_ds,
    "dataset_card": job_dataset_card,
    "calibration_sample": job_calibration_sample,
    "identity_index": job_identity_index,
    "identity_check": job_identity_check,
    "identity_merge": job_identity_merge,
    "evaluation_set": job_evaluation_set,
    "verify": job_verify,
    "report": job_report,
}


def counted(folder: Path, out: Path, name: str) -> dict:
    """What a job's outputs count, read after it is measured (not timed): the records it kept, the
    cuts it verified or exported, the report's summary rows."""
    if name == "prepare":
        stats = json.loads((out / "stats.json").read_text())
        return {"records_in": stats["records_in"], "records_out": stats["records_out"]}
    if name == "verify":
        return {"cuts": json.loads((out / "verify.json").read_text())["cuts"]}
    if name == "evaluation_set":
        with open(out / "set" / "manifest.json", encoding="utf-8") as f:
            return {"cuts": sum(1 for _ in f)}
    if name == "report":
        return {"summary_rows": len((out / "summary.tsv").read_text().splitlines()) - 1}
    raise ValueError(f"nothing counted for {name}")


# What a job's outputs say, read after it is measured: {job: function(folder, out) -> dict}
SAID = {
    "identity_check": planted_found,
    **{name: partial(counted, name=name) for name in ("prepare", "verify", "evaluation_set", "report")},
}

# Jobs this machine runs only up to a size, and why (their figures beyond are extrapolated in the docs)
MOST_RECORDS: dict[str, int] = {}
WHY_NOT: dict[str, str] = {}


# What a job imports when it runs, imported before it is measured (not for every job: lhotse's ~200 MB
# would be in every job's peak)
JOB_IMPORTS = {"evaluation_set": ("lhotse",)}


def peak_rss_mb() -> float:
    """This process's peak RSS since its exec (VmHWM): not ru_maxrss, which on Linux keeps the peak of
    the process it was forked from (the benchmark's own, holding the largest size's corpus)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_job(name: str, folder: Path) -> dict:
    """Run job `name` over `folder`'s inputs here (a fresh process): its figures, as JSON on stdout.
    The modules are imported first, so that CPU and RSS above `base_mb` are the job's own."""
    import sharflow.codes.merge
    import sharflow.context.merge
    import sharflow.context.plan
    import sharflow.dataset.buckets
    import sharflow.dataset.catalog
    import sharflow.dataset.evaluation
    import sharflow.dataset.tables
    import sharflow.dataset.training
    import sharflow.identity.links
    import sharflow.plan.sample
    import sharflow.prepare.job
    import sharflow.quality.filter
    import sharflow.quality.merge
    import sharflow.report.report
    import sharflow.shar.merge
    import sharflow.shar.plan
    import sharflow.splits.stage
    import sharflow.text.job
    import sharflow.verify.dataset  # noqa: F401

    for module in JOB_IMPORTS.get(name, ()):
        importlib.import_module(module)
    out = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=folder))
    base = peak_rss_mb()
    start, cpu = time.perf_counter(), time.process_time()
    done = JOBS[name](folder, out) or {}
    figures = {
        "wall": time.perf_counter() - start,
        "cpu": time.process_time() - cpu,
        "rss_mb": peak_rss_mb(),
        "base_mb": base,
        "share": done.get("share", 1.0),  # of the corpus's records, the share the job handled
    }
    return {**figures, "out": str(out)}


# Jobs run more than once at each size, the run of least CPU kept: a few seconds' run on a shared
# machine varies by up to a third (identity_check at 10^4: 5.9 to 8.4 s), enough to decide its bar
REPEATS = {"identity_check": 3}


def measure(name: str, folder: Path, repeats: dict[str, int] = REPEATS) -> dict:
    """The job in a fresh process (`repeats` times, the least CPU kept): {wall, cpu, rss_mb, base_mb,
    share, said} (CPU: the job's own, after its imports; peak RSS of the process, and its RSS before
    the job; the share of the records it handled)."""
    runs = []
    for _ in range(repeats.get(name, 1)):
        cmd = [sys.executable, __file__, "--run-job", name, "--folder", str(folder)]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        if proc.returncode != 0:
            sys.exit(f"{name} at {folder} failed:\n{proc.stderr[-3000:]}")
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    kept = min(runs, key=lambda row: row["cpu"])
    out = Path(kept.pop("out"))
    return {**kept, "said": SAID[name](folder, out) if name in SAID else None}  # the kept run's outputs


def ladder(
    sizes: list[int], jobs: list[str], work: Path, repeats: dict[str, int] = REPEATS
) -> dict[str, dict[int, dict]]:
    """{job: {size: figures}} over the ladder (the inputs made once per size; measure's `repeats`)."""
    rows: dict[str, dict[int, dict]] = {job: {} for job in jobs}
    for n in sizes:
        folder = work / f"n{n}"
        t = time.perf_counter()
        make_inputs(n, folder, jobs)
        print(f"inputs for {n:,} records: {time.perf_counter() - t:.1f} s", flush=True)
        for job in jobs:
            if n > MOST_RECORDS.get(job, n):
                print(f"{job}: not run at {n:,} records ({MOST_RECORDS[job]:,} at most: {WHY_NOT[job]})")
                continue
            rows[job][n] = measure(job, folder, repeats)
            if rows[job][n]["said"]:
                print(f"{job} at {n:,} records: {rows[job][n]['said']}", flush=True)
    return rows


def per_record(row: dict, n: int) -> float:
    """CPU seconds per record of a job's run over `n` records (of those it handled: its share)."""
    return row["cpu"] / (n * row.get("share", 1.0))


def growth(rows: dict[int, dict]) -> dict[int, tuple[float, float]]:
    """{size: (CPU per record / the smallest size's, the job's own RSS (above the process's before it)
    grown from the smallest size's, in bytes per record added: the per-record part of its memory)}."""
    first = min(rows)
    base = rows[first]

    def own(row):
        return row["rss_mb"] - row["base_mb"]

    return {
        n: (
            per_record(row, n) / per_record(base, first),
            max(0.0, own(row) - own(base)) * 2**20 / (n - first) if n > first else 0.0,
        )
        for n, row in rows.items()
    }


def report(rows: dict[str, dict[int, dict]]) -> bool:
    """Print the ladder; whether every job meets the bars (1.5x CPU per record; memory a fixed part
    plus at most 2 KB a record, or 4 GB in all)."""
    ok = True
    print(
        f"{'job':14} {'records':>10} {'wall s':>8} {'CPU-µs/rec':>11} {'peak RSS MB':>12} "
        f"{'own MB':>7} {'CPU/rec x':>10} {'+B/rec':>8}"
    )
    for job, by_size in rows.items():
        g = growth(by_size)
        for n, row in sorted(by_size.items()):
            per, added = g[n]
            print(
                f"{job:14} {n:>10,} {row['wall']:>8.2f} {per_record(row, n) * 1e6:>11.1f} "
                f"{row['rss_mb']:>12.0f} {row['rss_mb'] - row['base_mb']:>7.0f} {per:>10.2f} {added:>8.0f}"
            )
            ok &= per <= 1.5 and (added <= 2048 or row["rss_mb"] <= 4096)
    return ok


CALIBRATION = 300  # the cost plan's sample (plan.sample_records): what a plan's memory is predicted from


def plan_check(rows: dict[str, dict[int, dict]], calibration: dict[str, dict[int, dict]]) -> bool:
    """Print, per job, the peak RSS the cost plan predicts for the ladder's largest size from the job's
    run on a CALIBRATION-record sample (sharflow.plan.model.predicted_peak_mb: that run's peak plus the
    rule's per-record part), against the peak measured there; whether every one is within the bar
    (within 25 %, or over by at most 2x)."""
    from sharflow.plan.model import ACTUAL, RSS_PER_RECORD, predicted_peak_mb

    ok = True
    print(f"\nplan check: peak RSS predicted from a {CALIBRATION}-record run (plan.model.predicted_peak_mb)")
    print(
        f"{'job':14} {'sample MB':>10} {'B/rec':>6} {'records':>10} {'predicted MB':>13} "
        f"{'measured MB':>12} {'ratio':>6}"
    )
    for job, by_size in rows.items():
        n = max(by_size)
        if job in ACTUAL:  # it ran on every record before the plan: the plan asks for its own peak
            print(
                f"{job:14} not predicted: the plan takes its run on every record "
                f"({by_size[n]['rss_mb']:.0f} MB)"
            )
            continue
        sample = calibration[job][CALIBRATION]["rss_mb"]
        predicted = predicted_peak_mb(job, sample, CALIBRATION, n)
        measured = by_size[n]["rss_mb"]
        ratio = predicted / measured
        print(
            f"{job:14} {sample:>10.0f} {RSS_PER_RECORD.get(job, 0):>6} {n:>10,} {predicted:>13.0f} "
            f"{measured:>12.0f} {ratio:>6.2f}"
        )
        ok &= 0.75 <= ratio <= 2.0
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--jobs", nargs="+", default=list(JOBS), choices=list(JOBS))
    parser.add_argument("--work", help="where the inputs are made and kept (default: a temp folder)")
    parser.add_argument("--run-job", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_job:
        print(json.dumps(run_job(args.run_job, Path(args.folder))))
        return
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        calibration = ladder([CALIBRATION], args.jobs, Path(args.work or tmp))
        rows = ladder(sorted(args.sizes), args.jobs, Path(args.work or tmp))
    ok = report(rows)
    print("every job within the bars" if ok else "a job is over a bar (CPU per record 1.5x, or RSS)")
    planned = plan_check(rows, calibration)
    print(
        "every prediction within the bar (0.75x to 2x)" if planned else "a prediction is outside 0.75x to 2x"
    )
    sys.exit(0 if ok and planned else 1)


if __name__ == "__main__":
    main()
