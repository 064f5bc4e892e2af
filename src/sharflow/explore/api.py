"""What each route of the explorer answers (sharflow.explore.server): plain values in, JSON-able out.

A handler takes the Explorer and the request's query (one value a name) and returns a dict or list
(sent as JSON) or (bytes, content type). A name the run does not have raises NotFound, a value that
cannot be read BadRequest; each message names what was asked for (a dataset, a cut, a reject's stage,
reason and row), never a file. Every file is opened through the explorer's Roots (`confine`, or
`present` for a source that may be missing), every page of rejects or links by its offset index, and
no answer holds more than MAX_ANSWER_BYTES.
"""

import difflib
import logging
import math
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from sharflow.core.speakers import parse_speaker
from sharflow.explore import media, query, recordings, rejects, thresholds
from sharflow.explore.run import KEPT, STATUS, Dataset
from sharflow.io.audio import resolve_audio_path

log = logging.getLogger(__name__)

MAX_PAGE = 500  # rows a page
MAX_PAGE_NUMBER = 10**9
RECORDINGS_PAGE = 50  # recordings a page
MAX_ANSWER_BYTES = 16 << 20  # ~5.8 min of 48 kHz 16-bit audio; a page of 500 rows is ~1 MB


class NotFound(Exception):
    """The request names nothing the run has; the message, when given, names what was asked for."""

    def __init__(self, what: str = ""):
        super().__init__(str(what)[:200])
        self.shown = bool(what)


class BadRequest(Exception):
    """The request's parameters cannot be read; the message says why."""


def too_large(size: int) -> str:
    most = MAX_ANSWER_BYTES >> 20
    return f"the answer would be {size / 2**20:.1f} MB, more than the explorer sends at once ({most} MB)"


def _dataset(explorer, q: dict) -> Dataset:
    dataset = explorer.run.dataset(q.get("dataset", ""))
    if dataset is None:
        raise NotFound(f"no dataset {q.get('dataset', '')!r} in this run")
    return dataset


def _int(q: dict, name: str, default: int, low: int = 0, high: int | None = None) -> int:
    try:
        value = int(q.get(name, default))
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, got {q.get(name)!r}") from None
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise BadRequest(f"{name} must be {bounds}, got {value}")
    return value


def _row(explorer, q: dict) -> tuple[Dataset, dict]:
    dataset = _dataset(explorer, q)
    row = dataset.row(q.get("id", ""))
    if row is None:
        raise NotFound(f"no cut {q.get('id', '')!r} in dataset {dataset.name}")
    return dataset, row


def datasets(explorer, q: dict) -> list[dict]:
    out = []
    for name, ds in explorer.run.datasets.items():
        table = ds.table
        kept = int(pc.sum(pc.equal(table[STATUS].cast(pa.string()), KEPT)).as_py() or 0)
        out.append(
            {
                "name": name,
                "rows": table.num_rows,
                "kept": kept,
                "dropped": table.num_rows - kept,
                "columns": [
                    {"name": f.name, "type": str(f.type)} for f in table.schema if f.name != query.ORDER
                ],
                "metrics": thresholds.thresholdable(table),
                "long_form": os.path.exists(ds.files.segment_plan),
            }
        )
    return out


def cuts(explorer, q: dict) -> dict:
    table = _dataset(explorer, q).table
    expression = query.where(q.get("filter", ""), table.schema)
    found = query.page(
        table,
        expression,
        sort=q.get("sort") or None,
        descending=q.get("desc") in ("1", "true"),
        number=_int(q, "page", 0, 0, MAX_PAGE_NUMBER),
        size=_int(q, "size", query.PAGE_SIZE, 1, MAX_PAGE),
    )
    return {
        "rows": found.rows,
        "total": found.total,
        "hours": found.hours,
        "page": found.number,
        "size": found.size,
    }


def cut(explorer, q: dict) -> dict:
    dataset, row = _row(explorer, q)
    shar = dataset.cut(row) if row[STATUS] == KEPT else None
    supervision = (shar or {}).get("supervisions", [{}])[0]
    custom = supervision.get("custom") or {}
    text = supervision.get("text")
    spoken = custom.get("normalized_text")
    return {
        "row": row,
        "text": text,
        "normalized_text": spoken,
        "asr_diff": _diff(spoken or text, row.get("asr_text")),
        "context": {k: v for k, v in custom.items() if k.startswith("context_")},
        "has_context": bool(row.get("context_file")),
    }


def dropped(explorer, q: dict) -> dict:
    """The symbols of a kept cut's spoken form that its tokenizers skip (its text stage's tokenizers,
    built on the first ask: NeMo's import takes seconds, so the page asks for them on their own)."""
    dataset, row = _row(explorer, q)
    shar = dataset.cut(row) if row[STATUS] == KEPT else None
    if not shar:
        return {"symbols": None, "why": "only a kept cut has the tokenizers of its Shar cut"}
    supervision = shar["supervisions"][0]
    text = (supervision.get("custom") or {}).get("normalized_text") or supervision.get("text") or ""
    names = (shar.get("custom") or {}).get("tokenizer_names") or []
    return explorer.dropped_symbols(text, names)


def _diff(reference: str | None, heard: str | None) -> list[list[str]] | None:
    """[op, words] runs of the ASR transcript against the text (op: =, -, +), or None without one."""
    if not reference or heard is None:
        return None
    said, got = reference.split(), heard.split()
    out = []
    matcher = difflib.SequenceMatcher(a=[w.lower() for w in said], b=[w.lower() for w in got], autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal":
            out.append(["=", " ".join(said[a0:a1])])
            continue
        if a1 > a0:
            out.append(["-", " ".join(said[a0:a1])])
        if b1 > b0:
            out.append(["+", " ".join(got[b0:b1])])
    return out


def threshold(explorer, q: dict) -> dict:
    dataset = _dataset(explorer, q)
    table = dataset.table
    metric = q.get("metric", "")
    if metric not in thresholds.thresholdable(table):
        raise NotFound(f"no metric {metric!r} with values in dataset {dataset.name}")
    side = q.get("side") or None
    if side not in (None, "min", "max"):
        raise BadRequest(f"side is min or max, not {side!r}")
    value = None
    if q.get("value"):
        try:
            value = float(q["value"])
        except ValueError:
            raise BadRequest(f"value must be a number, got {q['value']!r}") from None
        if not math.isfinite(value):
            raise BadRequest("value must be finite")
    try:
        found = thresholds.threshold(table, metric, value, side)
    except ValueError as e:  # a side the metric does not have
        raise BadRequest(str(e)) from None
    shown = [query.ORDER, "cut_id", "duration", metric, STATUS, "split", "speaker"]
    shown = [c for c in shown if c in table.schema.names]

    def rows(orders):
        return table.select(shown).take(pa.array(orders, pa.int64())).to_pylist()

    return {**found.__dict__, "below": rows(found.below), "above": rows(found.above)}


def reject_reasons(explorer, q: dict) -> list[dict]:
    return rejects.reasons(_dataset(explorer, q).files, explorer.lines, explorer.roots)


def _reason_file(explorer, q: dict) -> tuple[Dataset, str, str]:
    """(dataset, reject file, what it is called in an answer)."""
    dataset = _dataset(explorer, q)
    stage, reason = q.get("stage", ""), q.get("reason", "")
    path = rejects.reason_file(dataset.files, stage, reason)
    if path is None:
        raise NotFound(f"no {stage!r} rejects for {reason!r} in dataset {dataset.name}")
    return dataset, explorer.confine(path), f"{dataset.name} {stage} reject {reason}"


def reject_rows(explorer, q: dict) -> dict:
    dataset, path, _ = _reason_file(explorer, q)
    number = _int(q, "page", 0, 0, MAX_PAGE_NUMBER)
    rows = explorer.lines.page(path, number)
    for row in rows:
        record = rejects.record_of(row)
        row["playable"] = record is not None and _playable(explorer, dataset, record)
    return {"rows": rows, "page": number}


def _playable(explorer, dataset: Dataset, record: dict) -> bool:
    """Whether a record's audio is under its dataset's root and there (a missing file is not)."""
    try:
        return explorer.roots.present(dataset.source(record["audio_filepath"]))
    except ValueError:  # a path that leaves the audio root (PathEscapeError)
        return False


def reject_audio(explorer, q: dict) -> tuple[bytes, str]:
    dataset, path, what = _reason_file(explorer, q)
    n = _int(q, "n", 0, 0, MAX_PAGE_NUMBER)
    row = explorer.lines.row(path, n)
    record = rejects.record_of(row) if row else None
    if record is None:
        raise NotFound(f"{what} row {n} has no audio")
    return _span(explorer, dataset.source(record["audio_filepath"]), record, f"{what} row {n}")


def links(explorer, q: dict) -> dict:
    number = _int(q, "page", 0, 0, MAX_PAGE_NUMBER)
    path = rejects.links_file(explorer.run.root)
    if not path.exists():
        return {"rows": [], "page": number}
    return {"rows": explorer.lines.page(explorer.confine(str(path)), number), "page": number}


def link_audio(explorer, q: dict) -> tuple[bytes, str]:
    path = rejects.links_file(explorer.run.root)
    n, side = _int(q, "n", 0, 0, MAX_PAGE_NUMBER), q.get("side", "record")
    row = explorer.lines.row(explorer.confine(str(path)), n) if path.exists() else None
    if row is None or side not in ("record", "matched"):
        raise NotFound(f"no identity link {n} with a side {side!r}")
    record = row if side == "record" else row["matched"]
    root = explorer.run.audio_roots.get(record.get("dataset"))
    if root is None:
        raise NotFound(f"identity link {n}: no dataset {record.get('dataset')!r} in this run's config")
    source = resolve_audio_path(root, record["audio_filepath"])[0]
    return _span(explorer, source, record, f"identity link {n} ({side})")


def _span(explorer, source: str, record: dict, what: str) -> tuple[bytes, str]:
    """A record's span of `source` as WAV, clamped to its file; NotFound when the file is outside the
    roots or not there, BadRequest for a span that cannot be played."""
    if not explorer.roots.present(source):
        raise NotFound(f"{what}: its audio file is not there")
    try:
        offset, duration = float(record.get("offset") or 0.0), float(record.get("duration"))
    except (TypeError, ValueError):
        raise BadRequest(f"{what}: its record has no duration in seconds") from None
    try:
        return media.span_wav(source, offset, duration, MAX_ANSWER_BYTES), "audio/wav"
    except media.SpanError as e:
        raise BadRequest(f"{what}: {e}") from None
    except (RuntimeError, OSError):  # soundfile's LibsndfileError: the bytes are not audio it reads
        log.warning("explorer: %s: cannot read %s", what, source, exc_info=True)
        raise NotFound(f"{what}: its audio cannot be read (the explorer's log says why)") from None


def _audio(explorer, q: dict) -> tuple[bytes, str]:
    """A cut's target or context audio: its Shar member when kept, else its source span."""
    dataset, row = _row(explorer, q)
    kind = q.get("kind", "target")
    what = f"{dataset.name} cut {row['cut_id']} ({kind})"
    if kind not in ("target", "context"):
        raise NotFound(f"no {kind!r} audio: a cut has target and context audio")
    if row[STATUS] == KEPT:
        if kind == "context" and not row.get("context_file"):
            raise NotFound(f"{what}: the cut has no context")
        try:
            return media.member_bytes(explorer.confine(dataset.shar_member(row, kind)), MAX_ANSWER_BYTES)
        except media.TooLarge as e:
            raise BadRequest(f"{what}: {e}") from None
    if kind == "context":
        raise NotFound(f"{what}: a dropped record has no context")
    return _span(explorer, dataset.source(row["source_file"]), row, what)


def audio(explorer, q: dict) -> tuple[bytes, str]:
    return _audio(explorer, q)


def picture(explorer, q: dict) -> tuple[bytes, str]:
    data, _ = _audio(explorer, q)
    samples, rate = media.decode(data)
    return media.picture(samples, rate, f"{q.get('id')} ({q.get('kind', 'target')})"), "image/png"


# ---- a long_form dataset's recordings (sharflow.explore.recordings) ------------------------------------


def _segment_stats(explorer, dataset: Dataset) -> dict:
    """The segment stage's stats, or before its merge the plan's recordings in their form (each one's
    path and length; what became of its seconds unknown yet)."""
    files = dataset.files
    if os.path.exists(files.segment_stats):
        return explorer.json(files.segment_stats)
    if not os.path.exists(files.segment_plan):
        raise NotFound(f"dataset {dataset.name} is not long_form: it has no recordings")
    return recordings.planned_stats(explorer.json(files.segment_plan))


def _recording(explorer, q: dict) -> tuple[Dataset, dict, int, dict]:
    """(dataset, its segment stats, recording number n, the recording's stats row)."""
    dataset = _dataset(explorer, q)
    stats = _segment_stats(explorer, dataset)
    rows = stats.get("per_recording") or []
    n = _int(q, "n", 0, 0, MAX_PAGE_NUMBER)
    if n >= len(rows):
        raise NotFound(f"dataset {dataset.name} has {len(rows)} recordings, no recording {n}")
    return dataset, stats, n, rows[n]


def recording_list(explorer, q: dict) -> dict:
    stats = _segment_stats(explorer, _dataset(explorer, q))
    found = recordings.recordings_page(stats, _int(q, "page", 0, 0, MAX_PAGE_NUMBER), RECORDINGS_PAGE)
    return {**found, "segmented": not stats.get("planned_only"), "settings": _thresholds(explorer)}


def _thresholds(explorer) -> dict:
    """The run's values of the thresholds a try may change."""
    return recordings.thresholds_of(explorer.segment_settings.turns, explorer.segment_settings.cut)


def _result(explorer, dataset: Dataset, n: int) -> dict:
    files = dataset.files
    plan = explorer.json(files.segment_plan)
    parts = [explorer.json(str(p)) for p in sorted(Path(files.segment_part(0)).parent.glob("*.json"))]
    try:
        return explorer.json(recordings.result_file(plan, parts, n, explorer.run.root, explorer.confine))
    except recordings.Unknown as e:
        raise NotFound(f"dataset {dataset.name}: {e}") from None


def timeline(explorer, q: dict) -> dict:
    dataset, stats, n, _ = _recording(explorer, q)
    if stats.get("planned_only"):
        raise NotFound(
            f"dataset {dataset.name} recording {n} is not segmented yet: try thresholds on it, or run the "
            "segment stage (snakemake results/<dataset>/segment/stats.json) for its timeline"
        )
    result = _result(explorer, dataset, n)
    manifest = explorer.confine(dataset.files.segment_manifest)
    first = recordings.first_line(stats, n)
    lines = explorer.lines.rows(manifest, first, len(result["segments"]))
    names = [parse_speaker(line["speaker"]).speaker_id for line in lines]
    return {"n": n, **recordings.timeline(result, names), "settings": _thresholds(explorer)}


def try_segment(explorer, q: dict) -> dict:
    dataset, _, n, row = _recording(explorer, q)
    asked = {k: q[k] for k in recordings.TRY_KEYS if q.get(k)}
    source = dataset.source(row["recording"])
    if not explorer.roots.present(source):
        raise NotFound(f"{dataset.name} recording {n}: its audio file is not there")
    base = explorer.segment_settings
    try:
        return explorer.trials.cut_again((dataset.name, n), source, base, asked, row["duration"])
    except ValueError as e:
        raise BadRequest(f"{dataset.name} recording {n}: {e}") from None
    except recordings.Unknown as e:
        raise NotFound(f"{dataset.name} recording {n}: {e}") from None


def recording_audio(explorer, q: dict) -> tuple[bytes, str]:
    dataset, _, n, row = _recording(explorer, q)
    try:
        start, end = float(q.get("start", 0)), float(q.get("end", row["duration"]))
    except ValueError:
        raise BadRequest("start and end are seconds of the recording") from None
    span = {"offset": start, "duration": end - start}
    return _span(explorer, dataset.source(row["recording"]), span, f"{dataset.name} recording {n}")


ROUTES = {
    "/api/datasets": datasets,
    "/api/cuts": cuts,
    "/api/cut": cut,
    "/api/dropped": dropped,
    "/api/threshold": threshold,
    "/api/rejects": reject_reasons,
    "/api/reject_rows": reject_rows,
    "/api/links": links,
    "/api/recordings": recording_list,
    "/api/timeline": timeline,
    "/api/try_segment": try_segment,
    "/audio/cut": audio,
    "/audio/reject": reject_audio,
    "/audio/link": link_audio,
    "/audio/recording": recording_audio,
    "/picture/cut": picture,
}
