"""sharflow.report.report from the real stats of the demo corpus's stages."""

import json
import subprocess
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from sharflow.core.layout import DatasetFiles
from sharflow.core.metrics import MEASURED as METRICS
from sharflow.dataset.buckets import write_buckets
from sharflow.quality.filter import filter_quality
from sharflow.report.quality_costs import quality_view, removed_table
from sharflow.report.report import write_report
from sharflow.report.stats import COLUMNS, duration_histogram, load_dataset, summary_rows
from sharflow.shar.merge import merge_shar_stats
from sharflow.text.fields import TextSettings
from sharflow.text.job import normalize_dataset
from testkit import data_files, prepare_demo


@pytest.fixture
def stats_files(with_context, demo_shards, tmp_path):
    """Every stats file the report reads, for the demo shards (prepare and codes stats written here)."""
    shards_dir, _, shard_stats, _ = demo_shards
    context = json.loads(with_context[1].read_text())
    shar = merge_shar_stats(
        shard_stats,
        context_stats=str(with_context[1]),
        plan=DatasetFiles(str(shards_dir)).shard_plan,
        stats=str(tmp_path / "shar.json"),
        rejected_dir=str(tmp_path / "shar_rejected"),
        dataset="demo",
    )
    hours = context["hours_out"]
    prepare = {
        "records_in": context["records_in"] + 3,
        "records_out": context["records_in"],
        "rejected_total": 3,
        "rejected": {"duplicate": 2, "missing_audio": 1},
        "hours_in": hours + 0.001,
        "hours_out": hours,
    }
    (tmp_path / "prepare.json").write_text(json.dumps(prepare))
    text_stats(tmp_path)
    catalog = DatasetFiles(str(shards_dir)).catalog
    (tmp_path / "codes.json").write_text(
        json.dumps({"cuts": shar["cuts"], "audio_hours": shar["hours"] + shar["context_hours"]})
    )
    (tmp_path / "verify.json").write_text(
        json.dumps(
            {
                "cuts": shar["cuts"],
                "hours": shar["hours"],
                "shards": 4,
                "fields": ["cuts", "target_audio", "context_audio"],
            }
        )
    )
    write_buckets(catalog, str(tmp_path / "buckets.yaml"), num_buckets=6, sub_buckets=2)
    return {
        **quality_files(tmp_path),
        "prepare": str(tmp_path / "prepare.json"),
        "text": str(tmp_path / "text.json"),
        "context": str(with_context[1]),
        "shar": str(tmp_path / "shar.json"),
        "codes": {"tiny": str(tmp_path / "codes.json")},
        "buckets": str(tmp_path / "buckets.yaml"),
        "verify": str(tmp_path / "verify.json"),
        "catalog": catalog,
        "shar_dir": str(shards_dir / "shar"),  # not read by the report: for the tests
    }


def text_stats(tmp):
    """The text stage's stats of the demo's prepared records (their text read as it is: no normalizer)."""
    prepared = prepare_demo(tmp) / "prepared.jsonl"
    normalize_dataset(
        str(prepared),
        records_stats=str(prepared.parent / "stats.json"),
        out_records=str(tmp / "text" / "records.jsonl"),
        rejected_dir=str(tmp / "text" / "rejected"),
        stats=str(tmp / "text.json"),
        dataset="demo",
        settings=TextSettings(normalized_text="text"),
    )


def quality_files(tmp):
    """The quality filter's files for the demo's prepared records: seeded metrics (the ASR check's
    too), two filters, mark."""
    files = DatasetFiles(str(tmp / "quality"))
    prepared = prepare_demo(tmp) / "prepared.jsonl"
    rng = np.random.default_rng(0)
    Path(files.quality_metrics).parent.mkdir(parents=True)
    with open(files.quality_metrics, "w") as out:
        for line in range(1, len(prepared.read_text().splitlines()) + 1):
            values = {m: round(float(rng.uniform(1, 5)), 6) for m in (*METRICS, "cer", "wer")}
            out.write(json.dumps({"line": line, **values, "asr_text": "x"}) + "\n")
    filter_quality(
        records=str(prepared),
        metrics=files.quality_metrics,
        records_stats=str(prepared.parent / "stats.json"),
        kept=files.quality_kept,
        rejected_dir=files.quality_rejected,
        stats=files.quality_stats,
        filters={"dnsmos_ovrl": {"min": 3.0}, "loudness_lufs": {"min": 2.0, "max": 4.5}},
        action="mark",
        dataset="demo",
    )
    return {
        "quality": files.quality_stats,
        "records": str(prepared),
        "quality_metrics": files.quality_metrics,
    }


def test_summary_accounts_for_every_record_at_every_stage(stats_files):
    rows = summary_rows(load_dataset("demo", stats_files))
    assert [r["stage"] for r in rows] == [
        "prepare",
        "text",
        "quality",
        "context",
        "shar",
        "codes tiny (target+context audio)",
        "verify",
    ]
    for row in rows:
        assert row["records_in"] == row["records_out"] + row["rejected"], row
    assert rows[0]["rejected"] == 3 and rows[-1]["records_out"] == 56
    assert rows[1]["hours_in"] == rows[0]["hours_out"]  # each stage starts where the previous ended
    assert rows[2]["hours_in"] == rows[1]["hours_out"]
    assert rows[3]["hours_in"] == rows[2]["hours_out"]


def test_duration_histogram_is_streamed_and_exact(stats_files):
    cut_files = data_files(Path(stats_files["shar_dir"]) / "cuts")
    durations = [
        json.loads(line)["duration"]
        for f in cut_files
        for line in Path(f).read_bytes().splitlines()  # an indexed set's plain cuts files
    ]
    edges, counts, seconds = duration_histogram(stats_files["catalog"], max(durations))
    assert counts.sum() == len(durations) == 56
    assert seconds.sum() == pytest.approx(sum(durations))
    assert np.all(np.diff(edges) > 0) and edges[-1] >= max(durations)


def test_report_plots_and_summary(stats_files, tmp_path):
    out = tmp_path / "report"
    without_quality = {
        k: v for k, v in stats_files.items() if k not in ("quality", "records", "quality_metrics")
    }
    rows = write_report({"demo": stats_files, "again": without_quality}, str(out), min_similarity=0.6)
    assert len(rows) == 13  # a quality row for demo only
    for name in ("durations", "buckets", "similarity", "load", "rejects", "text", "quality", "quality_kept"):
        image = matplotlib.image.imread(out / f"{name}.png")
        assert image.shape[0] > 400  # one panel per dataset, or per metric
        assert (image[..., :3] < 0.9).any(axis=-1).mean() > 0.01, name  # something is drawn
    tsv = (out / "summary.tsv").read_text().splitlines()
    assert tsv[0].split("\t") == list(COLUMNS) and len(tsv) == 14

    # the hours each filter costs, as the quality table and the filter job see them
    quality = json.loads(Path(stats_files["quality"]).read_text())
    view = quality_view("demo", stats_files["records"], stats_files["quality_metrics"], quality)
    table = pd.read_csv(out / "quality.tsv", sep="\t")
    assert table.to_dict("records") == removed_table([view]).to_dict("records")
    together = table.set_index("filter").loc["all filters together"]
    assert 0 < together.records == quality["marked_fail"] < 56 and together.dataset == "demo"
    assert table.records.iloc[0] == quality["failing_by_metric"]["dnsmos_ovrl"]
    assert "<td>loudness_lufs in [2.0, 4.5]</td>" in (out / "quality.html").read_text()
    text = (out / "summary.html").read_text().split("<h2>Text the model reads</h2>")[1].split("<h2>")[0]
    assert "<h3>demo</h3>" in text and "<h3>again</h3>" in text
    assert text.count("train cuts lose characters to their tokenizers") == 2
    assert "normalized_text from: " in text
    assert "<code>sharflow explore</code>" in (out / "summary.html").read_text()  # names the explorer
    assert pd.read_csv(out / "summary.tsv", sep="\t").to_dict("records") == rows
    speakers = pd.read_csv(out / "speakers.tsv", sep="\t")
    assert set(speakers.dataset) == {"demo", "again"} and speakers.utterances.sum() == 2 * 56
    buckets = pd.read_csv(out / "buckets.tsv", sep="\t")
    assert buckets.groupby("dataset").cuts.sum().to_dict() == {"again": 56, "demo": 56}
    tables = (out / "tables.html").read_text()
    assert tables.count("<h2>") == 2 and "2D bins" in tables and "mean_context_similarity" in tables
    assert (
        "<td>missing_audio" not in (out / "summary.html").read_text()
    )  # reasons are in the plot, not the table
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    write_report({"demo": stats_files, "again": without_quality}, str(out), min_similarity=0.6)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first  # same stats, same bytes


def test_report_view_finds_the_plots_in_a_browser(stats_files, tmp_path, chromium):
    """A hand-made page stands in for snakemake's report here; test_workflow checks the real one."""
    from sharflow.report.view import colour_pixels, signature_colour

    write_report({"demo": stats_files}, str(tmp_path / "r"), min_similarity=0.6)
    page = tmp_path / "page.html"
    page.write_text('<html><body><img src="r/durations.png"></body></html>')
    shot = tmp_path / "shot.png"
    screenshot(chromium, page, shot)
    colour, pixels = signature_colour(str(tmp_path / "r" / "durations.png"))
    assert colour_pixels(str(shot), colour) == pytest.approx(pixels, rel=0.05)  # shown at its own size
    blank = tmp_path / "blank.html"
    blank.write_text("<html><body>nothing</body></html>")
    screenshot(chromium, blank, shot)
    assert colour_pixels(str(shot), colour) == 0


def screenshot(chromium: str, page, shot) -> None:
    """A 1000x800 headless Chromium screenshot of `page` into `shot`."""
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--screenshot={shot}",
            "--window-size=1000,800",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
