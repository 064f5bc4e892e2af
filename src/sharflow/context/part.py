"""The context stage's part job: give every record of a part's groups a same-speaker context.

Three jobs per dataset: the plan (sharflow.context.plan) bin-packs speaker groups onto parts;
each part (here) bin-packs its groups onto ranks (GPUs or CPU processes); each rank reads its
records' embeddings from the quality parts' rows (MeasuredEmbeddings: the one pass decoded and
embedded every record; with quality off, it decodes audio one batch ahead and embeds each record
itself), selects (sharflow.context.selection) and writes its groups sorted by (group key, input line)
(sharflow.context.keyed_lines); the rank files are merged into the part's files, and the
merge job (sharflow.context.merge) merges the parts. The output order depends only on the data,
so any number of parts and ranks gives the same bytes. Memory: one group's embeddings and
metadata, one batch of audio per rank, never n×n.
"""

import json
import logging
import time
from collections import Counter, defaultdict
from contextlib import ExitStack
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from sharflow.context.grouping import group_key_function
from sharflow.context.keyed_lines import keyed_line, merge_keyed, merge_sorted
from sharflow.core.atomic import atomic_file, atomic_path, read_json, write_json
from sharflow.core.errors import SharflowError
from sharflow.core.jsonl import count_lines, numbered_lines
from sharflow.core.layout import ContextPartFiles
from sharflow.core.ledger import totals
from sharflow.core.splits import TRAIN, context_pool
from sharflow.io.audio import load_span, resample, resolve_audio_path
from sharflow.models.speaker_embedders import embed_each, embedder_label
from sharflow.work.parallel import ahead
from sharflow.work.ranks import CPU_RANK_SECONDS, Rank, rank_job

log = logging.getLogger(__name__)

# A context part fitted to its work (context.workers 0) starts a CPU rank per CPU_RANK_SECONDS of its
# groups' audio when it decodes and embeds them, and per this many when it reads the quality parts'
# embeddings: then it only compares them, far less work a second of audio than a rank's start-up
MEASURED_RANK_SECONDS = 3600.0

REASONS: dict[str, str] = {
    "no_context_candidate": "the speaker group has fewer than 2 usable utterances",
    "no_context_above_threshold": "no other utterance of the group is similar enough and of a "
    "suitable duration",
    "unreadable_audio": "the audio span could not be decoded (its header passed in prepare)",
}
HIST_EDGES = np.round(np.linspace(0.0, 1.0, 51), 2)  # context similarity histogram, 0.02 wide
Reject = tuple[int, str, str, dict]  # (prepared line, reason, detail, record)


@dataclass(frozen=True)
class PartSettings:
    """Everything a rank needs besides its groups (picklable, sent to spawned ranks)."""

    audio_root: str
    embedder: str = "ge2e"
    embedder_options: dict = field(default_factory=dict)
    min_similarity: float = 0.6
    min_context_duration: float = 3.0
    max_context_duration: float | None = None
    top_k: int = 32
    block_rows: int = 1024
    embed_batch: int = 32
    save_embeddings: bool = False


@dataclass(frozen=True)
class MeasuredEmbeddings:
    """The quality stage's speaker embeddings of every record (sharflow.quality.merge): `embeddings`,
    a row per line of `records` (the text stage's records, which the quality parts measured)."""

    records: str
    embeddings: str

    @classmethod
    def of(cls, named) -> "MeasuredEmbeddings | None":
        """From a context part job's inputs (`measured_records`, `embeddings`), or None without them."""
        if "embeddings" not in named.keys():  # noqa: SIM118 (a Snakemake Namedlist: `in` looks at its values)
            return None
        return cls(named["measured_records"], named["embeddings"])

    def rows(self, spans: dict[str, list[tuple]]) -> dict[tuple, int]:
        """{span: its row} of the spans wanted, read from the records in one pass (only those held)."""
        wanted = {span for group in spans.values() for span in group}
        found: dict[tuple, int] = {}
        for line_no, _, raw in numbered_lines(self.records):
            span = _span(json.loads(raw))
            if span in wanted:
                found.setdefault(span, line_no - 1)
        missing = wanted - found.keys()
        if missing:
            raise SharflowError(
                f"{self.records} holds no record of {sorted(missing)[0]}: the quality embeddings are out of "
                "date; rerun with --forcerun quality_part"
            )
        return found


# ---- one part -----------------------------------------------------------------------------------


def run_context_part(
    part: int,
    *,
    prepared: str,
    plan: str,
    out: ContextPartFiles,
    settings: PartSettings,
    device: str = "auto",
    workers: int = 1,
    gpus: int = 0,
    fit_ranks: bool = False,
    out_embeddings: str | None = None,
    out_embedding_ids: str | None = None,
    measured: MeasuredEmbeddings | None = None,
) -> dict:
    """Select contexts for the groups of one part, on as many ranks as devices/workers allow.

    With `measured` (the quality parts' embeddings of every record), each record's embedding is
    read there, by its span; without (quality off), its audio is decoded and embedded here.

    With settings.save_embeddings, also writes the embeddings of the part's decodable records
    (`out_embeddings`, .npy, rows in (group, line) order) and their ids (`out_embedding_ids`,
    JSON lines: prepared line number, group, audio_filepath, offset, duration).
    """
    planned = read_json(plan)
    mine = {k: g for k, g in planned["groups"].items() if g["part"] == part}
    offsets, spans = _group_offsets(prepared, plan, mine, group_key_function(**planned["grouping"]))
    rows = measured.rows(spans) if measured else {}
    costs = {k: mine[k]["cost"] for k in mine}
    what = f"context part {part}"
    fit = _fitted(mine, measured is not None) if fit_ranks else {}
    with rank_job(what, device=device, workers=workers, gpus=gpus, scratch_beside=out.records, **fit) as job:
        n = sum(g["n"] for g in mine.values())
        log.info("context part %d: %d groups, %d records on ranks %s", part, len(mine), n, job.devices)
        ranks = job.run(
            process_groups,
            costs,
            unit=lambda k: (k, offsets[k], [rows.get(span) for span in spans[k]] if measured else None),
            args=(prepared, settings, measured.embeddings if measured else None),
        )
        with atomic_file(out.records, "w", encoding="utf-8") as f:
            f.writelines(merge_sorted([r.rank.file(".jsonl") for r in ranks]))
        with atomic_file(out.rejected, "w", encoding="utf-8") as f:
            f.writelines(merge_sorted([r.rank.file(".rej.jsonl") for r in ranks]))
        if settings.save_embeddings:
            dims = [r.value["embedding_dim"] for r in ranks]
            _merge_embeddings([r.rank.file(".emb") for r in ranks], dims, out_embeddings, out_embedding_ids)
    stats = _part_stats(part, len(mine), planned["part_costs"][part], ranks)
    write_json(out.stats, stats)
    return stats


def _fitted(mine: dict, measured: bool) -> dict:
    """rank_job's arguments that fit a part's CPU ranks to its groups' audio."""
    seconds = sum(g["seconds"] for g in mine.values())
    return {"seconds": seconds, "rank_seconds": MEASURED_RANK_SECONDS if measured else CPU_RANK_SECONDS}


def _part_stats(part: int, groups: int, planned_cost: float, ranks: list) -> dict:
    """A part's stats from its ranks' (RankResult) own."""
    rank_stats = [{**r.value, "planned_cost": r.planned_cost} for r in ranks]
    counts = totals(rank_stats, ("records_in", "records_out"))
    return {
        "part": part,
        "groups": groups,
        "records_in": counts["records_in"],
        "records_out": counts["records_out"],
        "rejected": dict(sorted(sum((Counter(s["rejected"]) for s in rank_stats), Counter()).items())),
        "planned_cost": planned_cost,
        "seconds": max((s["seconds"] for s in rank_stats), default=0.0),
        "ranks": rank_stats,
    }


def _group_offsets(prepared: str, plan: str, mine: dict, key_of) -> tuple[dict, dict]:
    """(line, byte offset) and span (audio_filepath, offset, duration) of every record of the part's
    groups, by group; fails if the plan is out of date."""
    offsets: defaultdict[str, list[tuple[int, int]]] = defaultdict(list)
    spans: defaultdict[str, list[tuple]] = defaultdict(list)
    for line_no, offset, raw in numbered_lines(prepared):
        record = json.loads(raw)
        key = key_of(record)
        if key in mine:
            offsets[key].append((line_no, offset))
            spans[key].append(_span(record))
    stale = [k for k in mine if len(offsets[k]) != mine[k]["n"]]
    if stale:
        raise SharflowError(
            f"{plan} does not match {prepared} (group {stale[0]!r}); rerun the context_plan rule"
        )
    return offsets, spans


def _span(record: dict) -> tuple:
    return (record["audio_filepath"], record["offset"], record["duration"])


def _merge_embeddings(prefixes: list[str], dims: list[int | None], out_npy: str, out_ids: str) -> None:
    """Merge the ranks' raw embedding rows (prefix.f32) and ids (prefix.ids.jsonl) by (group, line)."""
    dim = next((d for d in dims if d), 0)
    counts = [count_lines(p + ".ids.jsonl") for p in prefixes]
    sources = [
        np.memmap(p + ".f32", dtype=np.float32, mode="r", shape=(n, dim)) if n else None
        for p, n in zip(prefixes, counts, strict=True)
    ]
    with (
        atomic_path(out_npy) as tmp_npy,
        atomic_file(out_ids, "w", encoding="utf-8") as ids,
        ExitStack() as stack,
    ):
        out = np.lib.format.open_memmap(tmp_npy, mode="w+", dtype=np.float32, shape=(sum(counts), dim))
        files = [stack.enter_context(open(p + ".ids.jsonl", encoding="utf-8")) for p in prefixes]
        for row, (rank, i, text) in enumerate(merge_keyed(files)):
            out[row] = sources[rank][i]
            ids.write(text)
        out.flush()
        del out


# ---- one rank -----------------------------------------------------------------------------------


@dataclass
class _Tally:
    """What a rank counts over its groups."""

    rejected: Counter = field(default_factory=Counter)
    hist: np.ndarray = field(default_factory=lambda: np.zeros(len(HIST_EDGES) - 1, dtype=np.int64))
    kept: int = 0
    audio_seconds: float = 0.0
    widened: int = 0


def process_groups(
    rank: Rank, groups: list[tuple], prepared: str, settings: PartSettings, measured: str | None = None
) -> dict:
    """One rank: embed and select for its groups (key, [(line, byte offset)], [embedding row] or
    None); write records and rejects sorted by (group, line) to its scratch files `.jsonl` and
    `.rej.jsonl`. With `measured` (the quality stage's embeddings file), each record's embedding is
    its row there; else its audio is decoded and embedded.

    With settings.save_embeddings, the embeddings of decodable records are appended to `.emb.f32`
    (raw float32 rows) with their ids in `.emb.ids.jsonl`, in the same order.
    """
    device = rank.device
    start = time.perf_counter()
    embedder = _embedder(settings, device, measured) if groups else None
    rules = _rules(settings)
    tally = _Tally()
    total = sum(len(group[1]) for group in groups)
    with (
        open(prepared, "rb") as src,
        open(rank.file(".jsonl"), "w", encoding="utf-8") as out,
        open(rank.file(".rej.jsonl"), "w", encoding="utf-8") as rej,
        _EmbeddingDump(rank.file(".emb") if settings.save_embeddings else None) as dump,
        tqdm(
            total=total, desc=f"context rank {rank.index} ({device})", unit="utt", mininterval=5
        ) as progress,
    ):
        for key, offsets, rows in groups:
            records = _read_records(src, offsets)
            if rows is None:
                good, embeddings, rejects = _embed_group(key, records, embedder, settings, tally)
            else:
                good, embeddings, rejects = _measured_group(key, records, embedder, rows, tally)
            if good:
                dump.write(key, good, embeddings)
                rejects += _select_and_write(
                    key, good, embeddings, rules, device, settings.block_rows, out, tally
                )
            for ln, reason, detail, rec in sorted(rejects, key=lambda t: t[0]):
                tally.rejected[reason] += 1
                rej.write(keyed_line(key, ln, reason=reason, detail=detail, record=rec))
            progress.update(len(records))
    return {
        "rank": rank.index,
        "device": device,
        "groups": len(groups),
        "records_in": total,
        "records_out": tally.kept,
        "rejected": dict(tally.rejected),
        "audio_seconds": round(tally.audio_seconds, 3),
        "widened_rows": tally.widened,
        "seconds": round(time.perf_counter() - start, 3),
        "similarity_hist": tally.hist.tolist(),
        "embedding_dim": embedder.dim if embedder else None,
    }


class _Measured:
    """The quality stage's embeddings file, mapped (not read): `dim`, and `rows(indices)`."""

    def __init__(self, path: str):
        self.table = np.load(path, mmap_mode="r")["embedding"]
        self.dim = self.table.shape[1]

    def rows(self, indices: list[int]) -> np.ndarray:
        return np.asarray(self.table[indices], dtype=np.float32)


def _rules(settings: PartSettings):
    from sharflow.context.selection import SelectionRules

    scale = embedder_label(settings.embedder, settings.embedder_options)
    return SelectionRules(
        settings.min_similarity,
        settings.min_context_duration,
        settings.max_context_duration,
        settings.top_k,
        scale,
    )


def _embedder(settings: PartSettings, device: str, measured: str | None):
    """The quality stage's embeddings (`measured`), or the speaker model, loaded once per rank and
    job (tests/test_workflow.py counts these lines)."""
    from sharflow.models.speaker_embedders import load_embedder

    start = time.perf_counter()
    if measured is not None:
        log.info(
            "speaker embeddings of %s read from %s (measured by the quality parts)",
            settings.embedder,
            measured,
        )
        return _Measured(measured)
    embedder = load_embedder(settings.embedder, device, **settings.embedder_options)
    log.info(
        "speaker model %s loaded on %s in %.1f s", settings.embedder, device, time.perf_counter() - start
    )
    return embedder


def _measured_group(key: str, records: list[tuple[int, dict]], measured: _Measured, rows: list[int], tally):
    """A group's embeddings from the quality stage's rows: (records, embeddings, rejects). A record
    with no embedding (a row of zeros: its audio could not be decoded, so quality rejects it before
    this stage) is rejected too; a group of fewer than two has no context candidate."""
    if len(records) < 2:
        return (
            [],
            None,
            [(ln, "no_context_candidate", f"group {key!r} has 1 utterance", r) for ln, r in records],
        )
    embeddings = measured.rows(rows)
    usable = np.any(embeddings != 0, axis=1)
    good = [item for item, ok in zip(records, usable, strict=True) if ok]
    rejects = [
        (ln, "unreadable_audio", f"{rec['audio_filepath']}: no speaker embedding was measured", rec)
        for (ln, rec), ok in zip(records, usable, strict=True)
        if not ok
    ]
    tally.audio_seconds += sum(rec["duration"] for _, rec in good)
    if len(good) == 1:
        ln, rec = good.pop()
        rejects.append((ln, "no_context_candidate", f"group {key!r} has 1 decodable utterance", rec))
    return good, (embeddings[usable] if good else None), rejects


def _read_records(src, offsets: list[tuple[int, int]]) -> list[tuple[int, dict]]:
    """(line, record) of a group, read at its byte offsets in the prepared file."""
    records = []
    for line_no, offset in offsets:
        src.seek(offset)
        records.append((line_no, json.loads(src.readline())))
    return records


def _load(settings: PartSettings, sample_rate: int, record: dict) -> np.ndarray | Exception:
    try:
        path, _ = resolve_audio_path(settings.audio_root, record["audio_filepath"])
        return resample(*load_span(path, record["offset"], record["duration"]), sample_rate)
    except Exception as e:  # reported per record; the group goes on without it
        return e


def _decoded_batches(settings, sample_rate, records, batch):
    """Audio of `records` in batches, the next batch decoding while the current one is embedded."""
    chunks = [records[i : i + batch] for i in range(0, len(records), batch)]
    return ahead(lambda chunk: [_load(settings, sample_rate, rec) for _, rec in chunk], chunks)


def _embed_group(
    key: str, records: list[tuple[int, dict]], embedder, settings: PartSettings, tally: _Tally
) -> tuple[list[tuple[int, dict]], np.ndarray | None, list[Reject]]:
    """Decode and embed a group: (decodable records, their embeddings, rejects).

    A group of fewer than two (decodable) utterances has no context candidate: all rejected.
    """
    if len(records) < 2:
        return (
            [],
            None,
            [(ln, "no_context_candidate", f"group {key!r} has 1 utterance", r) for ln, r in records],
        )
    good, embeddings, rejects = [], [], []
    for chunk, waves in _decoded_batches(settings, embedder.sample_rate, records, settings.embed_batch):
        ok = []
        for (ln, rec), wave in zip(chunk, waves, strict=True):
            if isinstance(wave, Exception):
                rejects.append((ln, "unreadable_audio", f"{rec['audio_filepath']}: {wave}", rec))
            else:
                good.append((ln, rec))
                ok.append(wave)
                tally.audio_seconds += len(wave) / embedder.sample_rate
        # embed_each: an embedding's bytes depend on the record alone, and equal those the quality
        # parts measure (sharflow.quality.rank.Meters.embedding_rows)
        embeddings.append(embed_each(embedder, ok))
    if len(good) == 1:
        ln, rec = good.pop()
        rejects.append((ln, "no_context_candidate", f"group {key!r} has 1 decodable utterance", rec))
    return good, (np.concatenate(embeddings) if good else None), rejects


def _select_and_write(
    key: str,
    good: list[tuple[int, dict]],
    embeddings: np.ndarray,
    rules,
    device: str,
    block_rows: int,
    out,
    tally: _Tally,
) -> list[Reject]:
    """Pick each record's context among the group; write the records that got one, return the rest.

    With splits, a record takes its context from its split's pool only (core.splits.context_pool):
    the group is selected pool by pool, each pool's own split's records the only candidates.
    """
    splits = [r.get("split", TRAIN) for _, r in good]
    pools = np.array([context_pool(s) for s in splits])
    chosen, rejects = [], []
    for pool in sorted(set(pools.tolist())):
        rows = np.flatnonzero(pools == pool).tolist()
        # without splits there is one pool, the whole group, and no pool is named in a reject
        where = "" if set(splits) == {TRAIN} else f" among the group's {pool} utterances"
        candidates = [splits[i] == pool for i in rows]
        picked, missed = _select_pool(
            [good[i] for i in rows], embeddings[rows], candidates, rules, device, block_rows, tally, where
        )
        chosen += picked
        rejects += missed
    out.writelines(keyed_line(key, ln, record=record) for ln, record in sorted(chosen, key=lambda t: t[0]))
    tally.kept += len(chosen)
    return rejects


def _select_pool(sub, embeddings, candidates, rules, device, block_rows, tally, where):
    """select_context over one pool: ([(line, record with context)], rejects)."""
    from sharflow.context.selection import select_context

    durations = np.array([r["duration"] for _, r in sub])
    eligible = np.array(
        [r.get("validation_status") != "fail" and c for (_, r), c in zip(sub, candidates, strict=True)]
    )
    sel = select_context(embeddings, durations, rules, _segment_ids(sub), device, block_rows, eligible)
    tally.widened += sel.widened_rows
    tally.hist += np.histogram(np.clip(sel.similarity[sel.choice >= 0], 0, 1), HIST_EDGES)[0]
    chosen, rejects = [], []
    for i, (ln, rec) in enumerate(sub):
        j = int(sel.choice[i])
        if j >= 0:
            chosen.append((ln, _with_context(rec, sub[j][1], sel.similarity[i], rules.scale)))
            continue
        best = sel.best_seen[i]
        detail = (
            f"best similarity {best:.4f} < {rules.min_similarity}"
            if np.isfinite(best)
            else "no other utterance"
        )
        rejects.append(
            (ln, "no_context_above_threshold", f"{detail}{where} or no candidate of suitable duration", rec)
        )
    return chosen, rejects


def _segment_ids(good: list[tuple[int, dict]]) -> np.ndarray:
    """One id per distinct (file, offset, duration): a record never gets its own audio as context."""
    segments: dict[tuple, int] = {}
    return np.array(
        [
            segments.setdefault((r["audio_filepath"], r["offset"], r["duration"]), len(segments))
            for _, r in good
        ]
    )


class _EmbeddingDump:
    """A rank's embeddings (prefix.f32, float32 rows) and ids (prefix.ids.jsonl); no-op without prefix."""

    def __init__(self, prefix: str | None):
        self.prefix = prefix
        self.rows = self.ids = None

    def __enter__(self):
        if self.prefix:
            self.rows = open(self.prefix + ".f32", "wb")
            self.ids = open(self.prefix + ".ids.jsonl", "w", encoding="utf-8")
        return self

    def write(self, key: str, good: list[tuple[int, dict]], embeddings: np.ndarray) -> None:
        if self.rows is None:
            return
        self.rows.write(embeddings.astype(np.float32).tobytes())
        for ln, r in good:
            self.ids.write(
                json.dumps(
                    {
                        "group": key,
                        "line": ln,
                        "audio_filepath": r["audio_filepath"],
                        "offset": r["offset"],
                        "duration": r["duration"],
                    }
                )
                + "\n"
            )

    def __exit__(self, *exc):
        for f in (self.rows, self.ids):
            if f is not None:
                f.close()


def _with_context(record: dict, context: dict, similarity: float, scale: str) -> dict:
    out = dict(record)
    out["context_audio_filepath"] = context["audio_filepath"]
    out["context_audio_offset"] = context["offset"]
    out["context_audio_duration"] = context["duration"]
    out["context_audio_text"] = context["text"]
    if "normalized_text" in context:
        out["context_audio_normalized_text"] = context["normalized_text"]
    out["context_speaker_similarity"] = round(float(similarity), 6)
    out["context_speaker_embedder"] = scale  # the similarity's scale: NeMo's 0.6 is TitaNet's
    return out
