"""The context stage: give every prepared record a same-speaker context utterance.

Three jobs per dataset:
- plan: group records (sharflow.grouping), cost each group (n² for similarity + α·seconds for
  embedding), bin-pack groups onto `parts` with LPT; write plan.json.
- part: for one part, bin-pack its groups onto ranks (GPUs or CPU processes); each rank decodes
  audio one batch ahead, embeds, selects (sharflow.selection) and writes its groups sorted by
  (group key, input line); the rank files are merged into the part's files.
- merge: k-way merge of the parts by (group key, input line) into with_context.jsonl (grouped by
  speaker), rejects by reason, and stats that prove records in = out + rejected.
The output order depends only on the data, so any number of parts and ranks gives the same bytes.
Memory: one group's embeddings and metadata, one batch of audio per rank, never n×n.
"""

import heapq
import json
import logging
import os
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from sharflow.atomic import atomic_dir, atomic_file
from sharflow.audio import load_segment, resolve_audio_path
from sharflow.balance import imbalance, loads, lpt_assign
from sharflow.errors import SharflowError
from sharflow.grouping import group_key_function
from sharflow.parallel import resolve_workers
from sharflow.ranks import job_devices, run_ranks
from sharflow.rejects import RejectWriter

log = logging.getLogger(__name__)

REASONS: dict[str, str] = {
    "no_context_candidate": "the speaker group has fewer than 2 usable utterances",
    "no_context_above_threshold": "no other utterance of the group is similar enough and of a suitable duration",
    "unreadable_audio": "the audio span could not be decoded (its header passed in prepare)",
}
HIST_EDGES = np.round(np.linspace(0.0, 1.0, 51), 2)  # context similarity histogram, 0.02 wide


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


def _lines(path: str) -> Iterator[tuple[int, int, bytes]]:
    """(1-based line number, byte offset, raw line) of a JSON-lines file."""
    with open(path, "rb") as f:
        offset = 0
        for line_no, raw in enumerate(f, start=1):
            yield line_no, offset, raw
            offset += len(raw)


def group_cost(n: int, seconds: float, cost_per_audio_second: float) -> float:
    return float(n * n + cost_per_audio_second * seconds)


# ---- plan ---------------------------------------------------------------------------------------

def plan_context(prepared: str, plan_path: str, *, parts: int, grouping: dict, cost_per_audio_second: float) -> dict:
    """Group the prepared records and bin-pack the groups onto `parts`; write and return the plan."""
    key_of = group_key_function(**grouping)
    sizes: Counter[str] = Counter()
    seconds: defaultdict[str, float] = defaultdict(float)
    for line_no, _, raw in _lines(prepared):
        record = json.loads(raw)
        key = key_of(record)
        sizes[key] += 1
        seconds[key] += record["duration"]
    costs = {k: group_cost(sizes[k], seconds[k], cost_per_audio_second) for k in sizes}
    assignment = lpt_assign(costs, parts)
    part_costs = loads(assignment, costs)
    plan = {
        "parts": parts,
        "grouping": grouping,
        "cost_per_audio_second": cost_per_audio_second,
        "records": sum(sizes.values()),
        "part_costs": part_costs,
        "imbalance": imbalance(part_costs) if costs else 1.0,
        "groups": {
            k: {"part": p, "n": sizes[k], "seconds": round(seconds[k], 3), "cost": costs[k]}
            for p, keys in enumerate(assignment) for k in keys
        },
    }
    with atomic_file(plan_path, "w", encoding="utf-8") as f:
        json.dump(plan, f, indent=1, sort_keys=True)
        f.write("\n")
    log.info("context plan: %d records in %d groups onto %d parts, max/mean part cost %.3f",
             plan["records"], len(costs), parts, plan["imbalance"])
    return plan


# ---- part ---------------------------------------------------------------------------------------

def run_context_part(
    prepared: str, plan_path: str, part: int, out_records: str, out_rejected: str, out_stats: str,
    *, settings: PartSettings, device: str = "auto", workers: int = 1, gpus: int = 0,
    out_embeddings: str | None = None, out_embedding_ids: str | None = None,
) -> dict:
    """Select contexts for the groups of one part, on as many ranks as devices/workers allow.

    With settings.save_embeddings, also writes the embeddings of the part's decodable records
    (`out_embeddings`, .npy, rows in (group, line) order) and their ids (`out_embedding_ids`,
    JSON lines: prepared line number, group, audio_filepath, offset, duration).
    """
    with open(plan_path, encoding="utf-8") as f:
        plan = json.load(f)
    mine = {k: g for k, g in plan["groups"].items() if g["part"] == part}
    key_of = group_key_function(**plan["grouping"])
    offsets: defaultdict[str, list[tuple[int, int]]] = defaultdict(list)
    for line_no, offset, raw in _lines(prepared):
        key = key_of(json.loads(raw))
        if key in mine:
            offsets[key].append((line_no, offset))
    stale = [k for k in mine if len(offsets[k]) != mine[k]["n"]]
    if stale:
        raise SharflowError(f"{plan_path} does not match {prepared} (group {stale[0]!r}); rerun the context_plan rule")

    devices = job_devices(device, resolve_workers(workers), gpus, f"context part {part}")
    costs = {k: mine[k]["cost"] for k in mine}
    rank_groups = lpt_assign(costs, len(devices))
    log.info("context part %d: %d groups, %d records on ranks %s", part, len(mine),
             sum(g["n"] for g in mine.values()), devices)
    out_dir = Path(out_records).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=".ranks.", dir=out_dir)))
        args = [
            (prepared, [(k, offsets[k]) for k in groups], str(tmp / f"r{r}.jsonl"), str(tmp / f"r{r}.rej.jsonl"),
             settings, str(tmp / f"r{r}.emb") if settings.save_embeddings else None)
            for r, groups in enumerate(rank_groups)
        ]
        rank_stats = run_ranks(process_groups, devices, args)
        with atomic_file(out_records, "w", encoding="utf-8") as f:
            f.writelines(_merge_sorted([a[2] for a in args]))
        with atomic_file(out_rejected, "w", encoding="utf-8") as f:
            f.writelines(_merge_sorted([a[3] for a in args]))
        if settings.save_embeddings:
            _merge_embeddings([a[5] for a in args], [s["embedding_dim"] for s in rank_stats],
                              out_embeddings, out_embedding_ids)
    for r, s in enumerate(rank_stats):
        s["planned_cost"] = loads([rank_groups[r]], costs)[0]
    stats = {
        "part": part,
        "groups": len(mine),
        "records_in": sum(s["records_in"] for s in rank_stats),
        "records_out": sum(s["records_out"] for s in rank_stats),
        "rejected": dict(sorted(sum((Counter(s["rejected"]) for s in rank_stats), Counter()).items())),
        "planned_cost": plan["part_costs"][part],
        "seconds": max((s["seconds"] for s in rank_stats), default=0.0),
        "ranks": rank_stats,
    }
    with atomic_file(out_stats, "w", encoding="utf-8") as f:
        json.dump(stats, f, indent=1)
        f.write("\n")
    return stats


def _merge_embeddings(prefixes: list[str], dims: list[int | None], out_npy: str, out_ids: str) -> None:
    """Merge the ranks' raw embedding rows (prefix.f32) and ids (prefix.ids.jsonl) by (group, line)."""
    dim = next((d for d in dims if d), 0)
    counts = [sum(1 for _ in open(p + ".ids.jsonl", encoding="utf-8")) for p in prefixes]
    sources = [np.memmap(p + ".f32", dtype=np.float32, mode="r", shape=(n, dim)) if n else None
               for p, n in zip(prefixes, counts)]
    final = Path(out_npy)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp_npy = final.with_name(f".{final.name}.tmp.npy")
    out = np.lib.format.open_memmap(tmp_npy, mode="w+", dtype=np.float32, shape=(sum(counts), dim))
    try:
        with atomic_file(out_ids, "w", encoding="utf-8") as ids, ExitStack() as stack:
            files = [stack.enter_context(open(p + ".ids.jsonl", encoding="utf-8")) for p in prefixes]
            merged = heapq.merge(*(_keyed_rows(f, r) for r, f in enumerate(files)), key=lambda x: x[0])
            for row, (_, rank, i, text) in enumerate(merged):
                out[row] = sources[rank][i]
                ids.write(text)
            out.flush()
            del out
            os.replace(tmp_npy, final)
    except BaseException:
        tmp_npy.unlink(missing_ok=True)
        raise


def _keyed_rows(f, rank: int):
    """((group, line), rank, row, text) for each line of a file sorted by (group, line)."""
    for i, text in enumerate(f):
        item = json.loads(text)
        yield (item["group"], item["line"]), rank, i, text


def _merge_sorted(paths: list[str]) -> Iterator[str]:
    """Lines of files each sorted by (group, line), merged in that order."""
    files = [open(p, encoding="utf-8") for p in paths]
    try:
        for *_, text in heapq.merge(*(_keyed_rows(f, r) for r, f in enumerate(files)), key=lambda t: t[0]):
            yield text
    finally:
        for f in files:
            f.close()


def _load(settings: PartSettings, sample_rate: int, record: dict) -> np.ndarray | Exception:
    try:
        path, _ = resolve_audio_path(settings.audio_root, record["audio_filepath"])
        return load_segment(path, record["offset"], record["duration"], sample_rate)
    except Exception as e:  # reported per record; the group goes on without it
        return e


def _decoded_batches(pool, settings, sample_rate, records, batch):
    """Audio of `records` in batches, the next batch decoding while the current one is embedded."""
    chunks = [records[i:i + batch] for i in range(0, len(records), batch)]
    load = lambda chunk: [_load(settings, sample_rate, rec) for _, rec in chunk]  # noqa: E731
    pending = pool.submit(load, chunks[0]) if chunks else None
    for i, chunk in enumerate(chunks):
        waves = pending.result()
        pending = pool.submit(load, chunks[i + 1]) if i + 1 < len(chunks) else None
        yield chunk, waves


def process_groups(rank: int, device: str, prepared: str, groups: list[tuple[str, list[tuple[int, int]]]],
                   out_records: str, out_rejected: str, settings: PartSettings, embeddings_prefix: str | None) -> dict:
    """One rank: embed and select for its groups; write records and rejects sorted by (group, line).

    With `embeddings_prefix`, the embeddings of decodable records are appended to prefix.f32 (raw
    float32 rows) with their ids in prefix.ids.jsonl, in the same order.
    """
    from sharflow.selection import SelectionRules, select_context
    from sharflow.speaker_embedders import load_embedder

    start = time.perf_counter()
    embedder = load_embedder(settings.embedder, device, **settings.embedder_options) if groups else None
    rules = SelectionRules(settings.min_similarity, settings.min_context_duration,
                           settings.max_context_duration, settings.top_k)
    rejected: Counter[str] = Counter()
    hist = np.zeros(len(HIST_EDGES) - 1, dtype=np.int64)
    kept = audio_seconds = widened = 0
    total = sum(len(o) for _, o in groups)
    with (
        open(prepared, "rb") as src, open(out_records, "w", encoding="utf-8") as out,
        open(out_rejected, "w", encoding="utf-8") as rej, ThreadPoolExecutor(1) as pool,
        tqdm(total=total, desc=f"context rank {rank} ({device})", unit="utt", mininterval=5) as progress,
        ExitStack() as dump,
    ):
        emb_rows = dump.enter_context(open(embeddings_prefix + ".f32", "wb")) if embeddings_prefix else None
        emb_ids = dump.enter_context(open(embeddings_prefix + ".ids.jsonl", "w", encoding="utf-8")) if embeddings_prefix else None
        for key, offs in groups:
            records = []
            for line_no, offset in offs:
                src.seek(offset)
                records.append((line_no, json.loads(src.readline())))
            rejects: list[tuple[int, str, str, dict]] = []
            good: list[tuple[int, dict]] = []
            embeddings = []
            if len(records) < 2:
                rejects += [(ln, "no_context_candidate", f"group {key!r} has 1 utterance", r) for ln, r in records]
            else:
                for chunk, waves in _decoded_batches(pool, settings, embedder.sample_rate, records, settings.embed_batch):
                    ok = []
                    for (ln, rec), wave in zip(chunk, waves):
                        if isinstance(wave, Exception):
                            rejects.append((ln, "unreadable_audio", f"{rec['audio_filepath']}: {wave}", rec))
                        else:
                            good.append((ln, rec))
                            ok.append(wave)
                            audio_seconds += len(wave) / embedder.sample_rate
                    if ok:
                        embeddings.append(embedder.embed(ok))
            if len(good) == 1:
                ln, rec = good.pop()
                rejects.append((ln, "no_context_candidate", f"group {key!r} has 1 decodable utterance", rec))
            if good:
                durations = np.array([r["duration"] for _, r in good])
                segments = {}
                same = np.array([segments.setdefault((r["audio_filepath"], r["offset"], r["duration"]), len(segments))
                                 for _, r in good])
                group_embeddings = np.concatenate(embeddings)
                if emb_rows is not None:
                    emb_rows.write(group_embeddings.astype(np.float32).tobytes())
                    for ln, r in good:
                        emb_ids.write(json.dumps({"group": key, "line": ln, "audio_filepath": r["audio_filepath"],
                                                  "offset": r["offset"], "duration": r["duration"]}) + "\n")
                sel = select_context(group_embeddings, durations, rules, same, device, settings.block_rows)
                widened += sel.widened_rows
                chosen = sel.similarity[sel.choice >= 0]
                hist += np.histogram(np.clip(chosen, 0, 1), HIST_EDGES)[0]
                for i, (ln, rec) in enumerate(good):
                    j = int(sel.choice[i])
                    if j < 0:
                        best = sel.best_seen[i]
                        detail = f"best similarity {best:.4f} < {rules.min_similarity}" if np.isfinite(best) else "no other utterance"
                        rejects.append((ln, "no_context_above_threshold", detail + " or no candidate of suitable duration", rec))
                        continue
                    out.write(json.dumps({"group": key, "line": ln, "record": _with_context(rec, good[j][1], sel.similarity[i])},
                                         ensure_ascii=False) + "\n")
                    kept += 1
            for ln, reason, detail, rec in sorted(rejects, key=lambda t: t[0]):
                rejected[reason] += 1
                rej.write(json.dumps({"group": key, "line": ln, "reason": reason, "detail": detail, "record": rec},
                                     ensure_ascii=False) + "\n")
            progress.update(len(records))
    return {
        "rank": rank, "device": device, "groups": len(groups), "records_in": total, "records_out": kept,
        "rejected": dict(rejected), "audio_seconds": round(audio_seconds, 3), "widened_rows": widened,
        "seconds": round(time.perf_counter() - start, 3), "similarity_hist": hist.tolist(),
        "embedding_dim": embedder.dim if embedder else None,
    }


def _with_context(record: dict, context: dict, similarity: float) -> dict:
    out = dict(record)
    out["context_audio_filepath"] = context["audio_filepath"]
    out["context_audio_offset"] = context["offset"]
    out["context_audio_duration"] = context["duration"]
    out["context_audio_text"] = context["text"]
    if "normalized_text" in context:
        out["context_audio_normalized_text"] = context["normalized_text"]
    out["context_speaker_similarity"] = round(float(similarity), 6)
    return out


# ---- merge --------------------------------------------------------------------------------------

def merge_context(part_records: list[str], part_rejected: list[str], part_stats: list[str], prepare_stats: str,
                  with_context: str, rejected_dir: str, stats_path: str, *, dataset: str) -> dict:
    """Merge the parts into with_context.jsonl + rejected/<reason>.jsonl + stats.json, checking accounting."""
    with open(prepare_stats, encoding="utf-8") as f:
        records_in = json.load(f)["records_out"]
    parts = []
    for p in part_stats:
        with open(p, encoding="utf-8") as f:
            parts.append(json.load(f))
    counts: Counter[str] = Counter()
    kept, seconds_out = 0, 0.0
    with atomic_file(with_context, "w", encoding="utf-8") as out:
        for text in _merge_sorted(part_records):
            record = json.loads(text)["record"]
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            kept += 1
            seconds_out += record["duration"]
    with atomic_dir(rejected_dir) as rej_dir, RejectWriter(rej_dir) as rejects:
        for text in _merge_sorted(part_rejected):
            item = json.loads(text)
            counts[item["reason"]] += 1
            rejects.write(item["reason"], {"line": item["line"], "reason": item["reason"], "detail": item["detail"],
                                           "original": json.dumps(item["record"], ensure_ascii=False)})
    rejected_total = sum(counts.values())
    if kept + rejected_total != records_in:
        raise SharflowError(
            f"context {dataset}: {records_in} prepared records but {kept} kept + {rejected_total} rejected; "
            "the parts are out of date: rerun with --forcerun context_plan"
        )
    hist = np.sum([r["similarity_hist"] for p in parts for r in p["ranks"]], axis=0).tolist() if parts else []
    stats = {
        "dataset": dataset,
        "records_in": records_in,
        "records_out": kept,
        "rejected_total": rejected_total,
        "rejected": dict(sorted(counts.items())),
        "hours_out": round(seconds_out / 3600, 6),
        "similarity_histogram": {"edges": HIST_EDGES.tolist(), "counts": hist},
        "parts": [
            {"part": p["part"], "groups": p["groups"], "records": p["records_in"], "planned_cost": p["planned_cost"],
             "seconds": p["seconds"],
             "ranks": [{k: r[k] for k in ("rank", "device", "groups", "records_in", "planned_cost", "seconds",
                                           "audio_seconds", "widened_rows")} for r in p["ranks"]]}
            for p in parts
        ],
    }
    with atomic_file(stats_path, "w", encoding="utf-8") as f:
        json.dump(stats, f, indent=1)
        f.write("\n")
    log.info("context %s: %d records in, %d with context (%.3f h), %d rejected %s",
             dataset, records_in, kept, stats["hours_out"], rejected_total, dict(counts))
    for reason, n in sorted(counts.items()):
        log.info("  %-28s %7d  %s", reason, n, REASONS[reason])
    return stats
