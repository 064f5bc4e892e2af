"""What each route of the explorer answers (sharflow.explore.server): plain values in, JSON-able out.

A handler takes the Explorer and the request's query (one value a name) and returns a dict or list
(sent as JSON) or (bytes, content type). A name the run does not have raises NotFound, a value that
cannot be read BadRequest.
"""

import difflib
import math

import pyarrow as pa
import pyarrow.compute as pc

from sharflow.core.audio import resolve_audio_path
from sharflow.explore import media, query, rejects, thresholds
from sharflow.explore.run import KEPT, STATUS, Dataset

MAX_PAGE = 500


class NotFound(Exception):
    """The request names nothing the run has."""


class BadRequest(Exception):
    """The request's parameters cannot be read; the message says why."""


def _dataset(explorer, q: dict) -> Dataset:
    dataset = explorer.run.dataset(q.get("dataset", ""))
    if dataset is None:
        raise NotFound(q.get("dataset"))
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
        raise NotFound(q.get("id"))
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
                "metrics": thresholds.metrics_of(table),
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
        number=_int(q, "page", 0),
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
    if metric not in thresholds.metrics_of(table):
        raise NotFound(metric)
    value = None
    if q.get("value"):
        try:
            value = float(q["value"])
        except ValueError:
            raise BadRequest(f"value must be a number, got {q['value']!r}") from None
        if not math.isfinite(value):
            raise BadRequest("value must be finite")
    found = thresholds.threshold(table, metric, value, q.get("side") or None)
    shown = [query.ORDER, "cut_id", "duration", metric, STATUS, "split", "speaker"]
    shown = [c for c in shown if c in table.schema.names]

    def rows(orders):
        return table.select(shown).take(pa.array(orders, pa.int64())).to_pylist()

    return {**found.__dict__, "below": rows(found.below), "above": rows(found.above)}


def reject_reasons(explorer, q: dict) -> list[dict]:
    return rejects.reasons(_dataset(explorer, q).files)


def _reason_file(explorer, q: dict) -> tuple[Dataset, str]:
    dataset = _dataset(explorer, q)
    path = rejects.reason_file(dataset.files, q.get("stage", ""), q.get("reason", ""))
    if path is None:
        raise NotFound(q.get("reason"))
    return dataset, explorer.confine(path)


def reject_rows(explorer, q: dict) -> dict:
    _, path = _reason_file(explorer, q)
    rows = rejects.rows(path, _int(q, "page", 0))
    for row in rows:
        row["playable"] = rejects.record_of(row) is not None
    return {"rows": rows, "page": _int(q, "page", 0)}


def reject_audio(explorer, q: dict) -> tuple[bytes, str]:
    dataset, path = _reason_file(explorer, q)
    row = rejects.row(path, _int(q, "n", 0))
    record = rejects.record_of(row) if row else None
    if record is None:
        raise NotFound("no audio")
    source = explorer.confine(dataset.source(record["audio_filepath"]))
    return media.span_wav(source, record.get("offset") or 0.0, record["duration"]), "audio/wav"


def links(explorer, q: dict) -> dict:
    path = rejects.links_file(explorer.run.root)
    if not path.exists():
        return {"rows": [], "page": 0}
    return {"rows": rejects.rows(str(path), _int(q, "page", 0)), "page": _int(q, "page", 0)}


def link_audio(explorer, q: dict) -> tuple[bytes, str]:
    path = rejects.links_file(explorer.run.root)
    row = rejects.row(str(path), _int(q, "n", 0)) if path.exists() else None
    side = q.get("side", "record")
    if row is None or side not in ("record", "matched"):
        raise NotFound("no link")
    record = row if side == "record" else row["matched"]
    root = explorer.run.audio_roots.get(record.get("dataset"))
    if root is None:
        raise NotFound(record.get("dataset"))
    source = explorer.confine(resolve_audio_path(root, record["audio_filepath"])[0])
    return media.span_wav(source, record.get("offset") or 0.0, record["duration"]), "audio/wav"


def _audio(explorer, q: dict) -> tuple[bytes, str]:
    """A cut's target or context audio: its Shar member when kept, else its source span."""
    dataset, row = _row(explorer, q)
    kind = q.get("kind", "target")
    if kind not in ("target", "context"):
        raise NotFound(kind)
    if row[STATUS] == KEPT:
        if kind == "context" and not row.get("context_file"):
            raise NotFound("no context")
        return media.member_bytes(explorer.confine(dataset.shar_member(row, kind)))
    if kind == "context":
        raise NotFound("a dropped record has no context")
    source = explorer.confine(dataset.source(row["source_file"]))
    return media.span_wav(source, row["offset"] or 0.0, row["duration"]), "audio/wav"


def audio(explorer, q: dict) -> tuple[bytes, str]:
    return _audio(explorer, q)


def picture(explorer, q: dict) -> tuple[bytes, str]:
    data, _ = _audio(explorer, q)
    samples, rate = media.decode(data)
    return media.picture(samples, rate, f"{q.get('id')} ({q.get('kind', 'target')})"), "image/png"


ROUTES = {
    "/api/datasets": datasets,
    "/api/cuts": cuts,
    "/api/cut": cut,
    "/api/dropped": dropped,
    "/api/threshold": threshold,
    "/api/rejects": reject_reasons,
    "/api/reject_rows": reject_rows,
    "/api/links": links,
    "/audio/cut": audio,
    "/audio/reject": reject_audio,
    "/audio/link": link_audio,
    "/picture/cut": picture,
}
