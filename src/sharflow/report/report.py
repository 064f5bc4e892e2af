"""The run report: a summary table and plots from every stage's stats (results/report/).

Everything comes from the stats files the stages write and from each dataset's catalog (streamed
into fixed histograms, or aggregated a batch at a time by sharflow.dataset.tables), so the report job's
memory does not grow with the dataset. The plots are PNGs flagged for `snakemake --report`;
summary.html is the table the report shows (summary.tsv the same for scripts), tables.html the
per-speaker and per-bucket tables (speakers.tsv, buckets.tsv in full).
"""

import logging
from pathlib import Path

from sharflow.report.pages import (
    identity_html,
    segment_html,
    text_html,
    write_quality_table,
    write_summary,
    write_tables,
)
from sharflow.report.plots import (
    plot_buckets,
    plot_durations,
    plot_load,
    plot_quality,
    plot_quality_kept,
    plot_rejects,
    plot_similarity,
    plot_text,
)
from sharflow.report.quality_costs import quality_view
from sharflow.report.stats import duration_histogram, load_dataset, summary_rows

log = logging.getLogger(__name__)


def write_report(datasets: dict[str, dict], out_dir: str, *, min_similarity: float) -> list[dict]:
    """All plots and the summary for `datasets` ({name: files, see load_dataset}) into out_dir."""
    loaded = [load_dataset(name, files) for name, files in sorted(datasets.items())]
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    histograms = {ds.name: duration_histogram(ds.catalog, ds.buckets["max_duration"]) for ds in loaded}
    out = Path(out_dir)
    plot_durations(loaded, histograms, str(out / "durations.png"))
    plot_similarity(loaded, min_similarity, str(out / "similarity.png"))
    plot_rejects(loaded, str(out / "rejects.png"))
    plot_text(loaded, str(out / "text.png"))
    plot_load(loaded, str(out / "load.png"))
    plot_buckets(loaded, histograms, str(out / "buckets.png"))
    views = [quality_view(ds.name, ds.records, ds.quality_metrics, ds.quality) for ds in loaded if ds.quality]
    plot_quality(views, str(out / "quality.png"))
    plot_quality_kept(views, str(out / "quality_kept.png"))
    write_quality_table(views, str(out / "quality.html"), str(out / "quality.tsv"))
    rows = [row for ds in loaded for row in summary_rows(ds)]
    write_summary(
        rows,
        {ds.name: ds.verify for ds in loaded},
        str(out / "summary.html"),
        str(out / "summary.tsv"),
        segment_html(loaded) + text_html(loaded) + identity_html(loaded),
    )
    write_tables(loaded, out)
    log.info("report: %d datasets, %d summary rows, plots in %s", len(loaded), len(rows), out_dir)
    return rows
