"""bench_scale's inputs of the stages' merges and of identity: the quality, context, text and identity
parts, and fingerprints drawn from the demo's speech hashes with planted copies of held-out records."""

import contextlib
import json
from pathlib import Path

import numpy as np

from scale.corpus import CONTAINERS, REPO

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
    # (a span's key, io.audio.span_key). CONTAINERS long recordings, each record a span of one
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
    return by_hash_and_time(np.concatenate([mine, extra]).astype(HASH_DTYPE))


def by_hash_and_time(run: np.ndarray) -> np.ndarray:
    """Fingerprints (HASH_DTYPE) in (hash, time) order: np.sort's order= compares records field by
    field in Python-level generic code, ~10x slower on the ladder's 10^4 records' many small runs."""
    return run[np.lexsort((run["time"], run["hash"]))]


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
                runs.append((by_hash_and_time(run), line, r, speaker, span))
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
    from scale.jobs import job_catalog  # a card reads the catalog the catalog job makes

    job_catalog(folder, card)
    write_buckets(str(card / "catalog.parquet"), str(card / "buckets.yaml"), num_buckets=8, sub_buckets=2)
    shards = len(list((folder / "shards").glob("*.stats.json")))
    fields = ["cuts", "target_audio", "context_audio", "target_codes", "context_codes"]
    (card / "verify.json").write_text(json.dumps({"shards": shards, "fields": fields}))
