"""The report's tables: summary.html/.tsv, tables.html with speakers.tsv and buckets.tsv, and
quality.html/.tsv (what each threshold costs), made with pandas."""

import html
from pathlib import Path

import pandas as pd

from sharflow.core.atomic import atomic_file
from sharflow.dataset.tables import bucket_occupancy, speaker_table, split_table
from sharflow.report.quality_costs import QualityView, removed_table
from sharflow.report.stats import COLUMNS, DatasetStats

SHOWN_SPEAKERS = 50  # speakers in tables.html; speakers.tsv has all


PAGE_STYLE = """
body { font-family: sans-serif; margin: 1em; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { border: 1px solid #bbb; padding: 4px 10px; text-align: right; }
th { background: #eee; }
"""


def _page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{PAGE_STYLE}</style></head><body>\n{body}\n</body></html>\n"
    )


def _html_table(frame: pd.DataFrame, floats: str = "{:.4f}") -> str:
    return frame.to_html(index=False, border=0, float_format=floats.format, na_rep="")


def identity_html(datasets: list[DatasetStats]) -> str:
    """The summary's "held out by content" section (docs: splits): links per reason and dataset
    pair, exact duplicates, example pairs with their scores, and held-out splits left empty."""
    identity = next((ds.identity for ds in datasets if ds.identity), None)
    empty = [e["message"] for ds in datasets if ds.splits for e in ds.splits.get("empty_splits", [])]
    if identity is None and not empty:
        return ""
    parts = ["<h2>Held out by content</h2>"]
    if identity:
        reasons = pd.DataFrame(
            [
                {
                    "train dataset": ds.name,
                    **{r: (ds.splits or {}).get("rejected", {}).get(r, 0) for r in identity["by_reason"]},
                }
                for ds in datasets
            ]
        )
        parts.append(
            f"<p>{identity['held_out']:,} held-out records indexed; train records linked to them, and "
            f"exact duplicates within train ({identity['train_duplicates']['found']:,} found, "
            f"identity.train_duplicates: {html.escape(identity['train_duplicates']['action'])}), "
            "as the splits jobs rejected them:</p>"
        )
        parts.append(_html_table(reasons))
        pairs = pd.DataFrame(
            [{"train <- held out": k, "links": v} for k, v in identity["by_dataset_pair"].items()],
            columns=["train <- held out", "links"],
        )
        parts.append(_html_table(pairs))
        examples = [
            {
                "reason": e["reason"],
                "train record": _where(e),
                "matched": _where(e["matched"]),
                "split": e["matched"]["split"],
                "score": e["score"],
            }
            for rows in identity["examples"].values()
            for e in rows
        ]
        if examples:
            parts.append("<h3>Examples</h3>" + _html_table(pd.DataFrame(examples)))
        parts.append(_speakers_html(identity.get("speakers", {})))
    if empty:
        parts.append(
            "<h3>Empty held-out splits</h3><ul>"
            + "".join(f"<li>{html.escape(m)}</li>" for m in empty)
            + "</ul>"
        )
    return "\n".join(parts)


def segment_html(datasets: list[DatasetStats]) -> str:
    """The summary's section on the long recordings of long_form datasets (sharflow.segment)."""
    from sharflow.segment.summary import segment_lines

    long_form = [ds for ds in datasets if ds.segment]
    if not long_form:
        return ""
    parts = ["<h2>Cut from long recordings</h2>"]
    for ds in long_form:
        items = "".join(f"<li>{html.escape(line)}</li>" for line in segment_lines(ds.segment))
        parts.append(f"<h3>{html.escape(ds.name)}</h3><ul>{items}</ul>")
    return "\n".join(parts) + "\n"


def text_html(datasets: list[DatasetStats]) -> str:
    """The summary's "text the model reads" section: per dataset, the train cuts that lose characters
    to their tokenizers and what the text stage found (sharflow.text.summary)."""
    from sharflow.dataset.tables import text_loss
    from sharflow.text.summary import loss_line, text_lines

    parts = ["<h2>Text the model reads</h2>"]
    for ds in datasets:
        loss = text_loss(ds.catalog)
        measured = loss["cuts"] - loss["unmeasured"]
        items = [
            f"<b>{html.escape(loss_line(loss['dropping'], measured, loss['unmeasured'], 'train cuts'))}</b>",
            *(html.escape(line) for line in text_lines(ds.text)),
        ]
        parts.append(
            f"<h3>{html.escape(ds.name)}</h3><ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"
        )
    return "\n".join(parts) + "\n"


def _speakers_html(speakers: dict) -> str:
    """Speakers linked to held-out unseen ones (by id, voice or the config), and the closest pairs
    not linked, with their voice similarity: what to check by ear and confirm or deny."""
    if not speakers:
        return ""
    rules = speakers.get("rules")
    head = (
        f"<h3>Speakers linked to held-out unseen speakers</h3><p>{speakers['speakers']:,} speakers, "
        f"{speakers['held_out_unseen']:,} held out unseen"
        + (
            f"; voices compared where both have {rules['min_seconds']:g} s of audio "
            f"({speakers['with_enough_audio']:,} speakers), linked at similarity {rules['min_similarity']:g} "
            "or more (identity.voices)"
            if rules
            else "; voices not compared (identity.voices.enabled: false)"
        )
        + ".</p>"
    )

    def rows(pairs):
        return pd.DataFrame(
            [
                {
                    "speaker": f"{p['speaker']['dataset']}:{p['speaker']['speaker']}",
                    "held out": (
                        f"{p['held_out']['dataset']}:{p['held_out']['speaker']} ({p['held_out']['split']})"
                    ),
                    "how": p["how"],
                    "similarity": p["similarity"],
                    "decided at": p["decided_similarity"],
                }
                for p in pairs
            ],
            columns=["speaker", "held out", "how", "similarity", "decided at"],
        )

    out = [
        head,
        _html_table(rows(speakers["linked"])) if speakers["linked"] else "<p>No speaker is linked.</p>",
    ]
    if speakers["near_misses"]:
        out += ["<p>Closest pairs not linked:</p>", _html_table(rows(speakers["near_misses"]))]
    return "\n".join(out)


def _where(e: dict) -> str:
    if "audio_filepath" not in e:  # a held-out speaker (sharflow.identity.voices)
        return f"{e['dataset']}: speaker {e['speaker']} (by {e['how']})"
    return f"{e['dataset']}: {e['audio_filepath']} @ {e['offset']}"


EXPLORE = (
    "<h3>Listen</h3><p>Every cut (target and context audio), every reject and what each quality threshold "
    "keeps, in a browser: run <code>sharflow explore</code> in the run's folder, then open "
    "http://127.0.0.1:8050/ (docs: explore).</p>\n"
)


def write_summary(
    rows: list[dict], verify: dict[str, dict], html_path: str, tsv_path: str, identity: str = ""
) -> None:
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    with atomic_file(tsv_path, "w", encoding="utf-8") as f:
        frame.to_csv(f, sep="\t", index=False, lineterminator="\n")
    checks = "".join(
        f"<li>{html.escape(ds)}: {v['shards']} shards × {len(v['fields'])} fields verified, "
        f"{v['cuts']} cuts</li>"
        for ds, v in sorted(verify.items())
    )
    shown = frame.rename(columns=lambda c: c.replace("_", " "))
    body = (
        "<h2>Records and hours through every stage</h2>\n"
        + _html_table(shown)
        + f"\n<h3>Verify</h3><ul>{checks}</ul>\n"
        + identity
        + EXPLORE
    )
    with atomic_file(html_path, "w", encoding="utf-8") as f:
        f.write(_page("sharflow summary", body))


def write_tables(datasets: list[DatasetStats], out: Path, shown_speakers: int = SHOWN_SPEAKERS) -> None:
    """tables.html (per-speaker and per-bucket tables of every dataset), speakers.tsv, buckets.tsv."""
    parts, speaker_frames, bucket_frames = [], [], []
    for ds in datasets:
        speakers = speaker_table(ds.catalog)
        one, two = bucket_occupancy(ds.catalog, ds.buckets)
        speaker_frames.append(speakers.assign(dataset=ds.name))
        bucket_frames.append(one.assign(dataset=ds.name))
        more = len(speakers) - shown_speakers
        parts.append(f"<h2>{html.escape(ds.name)}</h2>")
        splits = split_table(ds.catalog)
        if splits is not None:  # docs: splits; the tables below are train's
            parts.append("<h3>Splits (hours and speakers; the tables below are train's)</h3>")
            parts.append(_html_table(splits.rename_axis("split").reset_index()))
        parts.append(
            f"<h3>Speakers ({len(speakers)}; most hours first"
            + (f", {more} more in speakers.tsv" if more > 0 else "")
            + ")</h3>"
        )
        parts.append(_html_table(speakers.head(shown_speakers)))
        parts.append("<h3>Duration buckets (as lhotse's sampler fills them)</h3>")
        parts.append(_html_table(one))
        if two is not None:
            parts.append("<h3>2D bins (as NeMo's strict 2D bucketing fills them)</h3>")
            parts.append(_html_table(two))
    with atomic_file(out / "tables.html", "w", encoding="utf-8") as f:
        f.write(_page("sharflow tables", "\n".join(parts)))
    for name, frames in (("speakers.tsv", speaker_frames), ("buckets.tsv", bucket_frames)):
        frame = pd.concat(frames, ignore_index=True)
        frame = frame[["dataset", *(c for c in frame.columns if c != "dataset")]]
        with atomic_file(out / name, "w", encoding="utf-8") as f:
            frame.to_csv(f, sep="\t", index=False, lineterminator="\n", float_format="%.6f")


def write_quality_table(views: list[QualityView], html_path: str, tsv_path: str) -> None:
    """Hours each filter removes (drop) or marks failing (mark) alone, and all filters together."""
    frame = removed_table(views)
    with atomic_file(tsv_path, "w", encoding="utf-8") as f:
        frame.to_csv(f, sep="\t", index=False, lineterminator="\n", float_format="%.6f")
    parts = [
        f"<h2>{html.escape(v.dataset)} (action: {html.escape(v.action)}, "
        f"{v.hours_measured:.4f} h measured)</h2>\n" + _html_table(frame[frame.dataset == v.dataset])
        for v in views
    ]
    body = "\n".join(parts) or "<p>The quality stage is off (quality.enabled: false).</p>"
    with atomic_file(html_path, "w", encoding="utf-8") as f:
        f.write(_page("sharflow quality filters", "<h1>Hours each quality filter removes</h1>\n" + body))
