"""Tables about a dataset, made with pandas from its catalog: per speaker, per bucket, and the card.

Per-speaker figures are aggregated one catalog batch at a time, the batches' partial aggregates
folded into one as they pass FOLD_ROWS (memory grows with the number of speakers, not cuts). Bucket
occupancy and percentiles read whole numeric columns (8 bytes per cut each), as the bucket bins
themselves do.
"""

import numpy as np
import pandas as pd

from sharflow.core.metrics import CATALOG_METRICS
from sharflow.core.splits import SPLITS
from sharflow.dataset.buckets import read_catalog_lengths, sampler_bin_2d_of, sampler_bucket_of
from sharflow.dataset.catalog import column_names, iter_batches, read_columns

PERCENTILES = (0, 1, 5, 25, 50, 75, 95, 99, 100)


# Per-speaker rows the batches' partial aggregates may hold before they are folded into one: a shuffled
# catalog's every batch holds most speakers, so kept apart they would grow with batches x speakers
FOLD_ROWS = 1 << 18


def _fold(partials: list[pd.DataFrame]) -> pd.DataFrame:
    """Partial per-speaker aggregates as one: counts and sums added, minimums the least."""
    grouped = pd.concat(partials).groupby(level=0, sort=False)
    out = grouped.sum()
    out["min_context_similarity"] = grouped["min_context_similarity"].min()
    return out


def speaker_table(catalog: str) -> pd.DataFrame:
    """One row per speaker: utterances, hours, mean and min context similarity, and the mean of every
    quality metric the catalog has; most hours first (ties by speaker)."""
    metrics = [m for m in CATALOG_METRICS if m in column_names(catalog)]
    columns = ["speaker", "duration", "context_similarity", *metrics]
    partials = []
    for batch in iter_batches(catalog, columns):
        df = batch.to_pandas()
        df["speaker"] = df["speaker"].astype(str)
        floats = df.select_dtypes("float32").columns  # summed in float64: the same in any batching
        df[floats] = df[floats].astype("float64")
        grouped = df.groupby("speaker", sort=False, observed=True)
        part = grouped.agg(
            utterances=("duration", "size"),
            seconds=("duration", "sum"),
            similarity_sum=("context_similarity", "sum"),
            similarity_n=("context_similarity", "count"),
            min_context_similarity=("context_similarity", "min"),
        )
        for m in metrics:
            part[f"{m}_sum"] = grouped[m].sum()
            part[f"{m}_n"] = grouped[m].count()
        partials.append(part)
        if sum(map(len, partials)) > FOLD_ROWS:
            partials = [_fold(partials)]
    if not partials:
        return pd.DataFrame(
            columns=["utterances", "hours", "mean_context_similarity", "min_context_similarity"]
        )
    sums = _fold(partials)
    mins = sums["min_context_similarity"]
    table = pd.DataFrame(
        {
            "utterances": sums["utterances"].astype("int64"),
            "hours": sums["seconds"] / 3600,
            "mean_context_similarity": sums["similarity_sum"]
            / sums["similarity_n"].where(sums["similarity_n"] > 0),
            "min_context_similarity": mins,
        }
    )
    for m in metrics:
        table[f"mean_{m}"] = sums[f"{m}_sum"] / sums[f"{m}_n"].where(sums[f"{m}_n"] > 0)
    table.index.name = "speaker"
    return table.reset_index().sort_values(["hours", "speaker"], ascending=[False, True], ignore_index=True)


def bucket_occupancy(catalog: str, buckets: dict) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Cuts and hours per 1D bucket (as lhotse's sampler assigns them), and per 2D bin (NeMo's strict
    2D bucketing; cuts it fits in no bin are a row of their own) when buckets.yaml has 2D bins."""
    durations, lengths, counted = read_catalog_lengths(catalog)
    bins = buckets["bucket_duration_bins"]
    which = sampler_bucket_of(durations, bins)
    upper = [*bins, float("inf")]
    lower = [0.0, *bins]
    one = (
        pd.DataFrame({"bucket": which, "duration": durations})
        .groupby("bucket")["duration"]
        .agg(["size", "sum"])
    )
    one = one.reindex(range(len(upper)), fill_value=0)
    table_1d = pd.DataFrame(
        {
            "bucket": range(len(upper)),
            "duration_from": lower,
            "duration_to": upper,
            "cuts": one["size"].to_numpy(),
            "hours": one["sum"].to_numpy() / 3600,
        }
    )
    if "bucket_duration_bins_2d" not in buckets:
        return table_1d, None
    bins_2d = buckets["bucket_duration_bins_2d"]
    where = sampler_bin_2d_of(durations, lengths, bins_2d, buckets.get("max_tps"))
    two = pd.DataFrame({"bin": where, "duration": durations}).groupby("bin")["duration"].agg(["size", "sum"])
    two = two.reindex([*range(len(bins_2d)), -1], fill_value=0)
    table_2d = pd.DataFrame(
        {
            "bin": [str(i) for i in range(len(bins_2d))] + ["none (dropped)"],
            "max_duration": [b[0] for b in bins_2d] + [np.nan],
            f"max_{'tokens' if 'tokens' in counted else 'characters'}": [b[1] for b in bins_2d] + [np.nan],
            "cuts": two["size"].to_numpy(),
            "hours": two["sum"].to_numpy() / 3600,
        }
    )
    return table_1d, table_2d


def split_table(catalog: str) -> pd.DataFrame | None:
    """One row per split of a catalog with splits (None without): utterances, hours, speakers. Read a
    batch at a time; memory grows with the speakers."""
    if "split" not in column_names(catalog):
        return None
    utterances, seconds, speakers = {}, {}, {}
    for batch in iter_batches(catalog, ["split", "speaker", "duration"], split=None):
        df = batch.to_pandas().astype({"split": str, "speaker": str})
        for split, group in df.groupby("split", sort=False):
            utterances[split] = utterances.get(split, 0) + len(group)
            seconds[split] = seconds.get(split, 0.0) + float(group.duration.sum())
            speakers.setdefault(split, set()).update(group.speaker)
    order = [s for s in SPLITS if s in utterances]
    return pd.DataFrame(
        {
            "utterances": [utterances[s] for s in order],
            "hours": [seconds[s] / 3600 for s in order],
            "speakers": [len(speakers[s]) for s in order],
        },
        index=order,
    )


def percentiles(values: np.ndarray) -> dict[str, float]:
    values = values[~np.isnan(values)] if values.dtype.kind == "f" else values
    if len(values) == 0:
        return {}
    return {f"p{p}": float(v) for p, v in zip(PERCENTILES, np.percentile(values, PERCENTILES), strict=True)}


def dataset_card(
    dataset: str,
    catalog: str,
    buckets: dict,
    verify: dict,
    splits: dict | None = None,
    identity: dict | None = None,
    leaks: list | None = None,
    text: dict | None = None,
    segment: dict | None = None,
) -> str:
    """results/<dataset>/DATASET.md: what the dataset holds, in Markdown (with splits, `splits` is
    the splits job's stats, `identity` the identity job's, `leaks` the shard plan's; `text` the text
    stage's; `segment` the segment stage's, for a long_form dataset)."""
    cols = read_columns(catalog, ["duration", "context_similarity", "source_sample_rate", "sample_rate"])
    speakers = speaker_table(catalog)
    languages = pd.Series(dtype="float64")
    for batch in iter_batches(catalog, ["language", "duration"]):
        df = batch.to_pandas()
        part = df.groupby(df["language"].astype(str))["duration"].sum()
        languages = languages.add(part, fill_value=0.0)
    durations = cols["duration"]
    frame = pd.DataFrame(
        {
            "duration (s)": percentiles(durations),
            "context similarity": percentiles(cols["context_similarity"].astype(np.float64)),
        }
    ).T
    rates = pd.Series(cols["source_sample_rate"]).value_counts().sort_index()
    shar_rates = pd.Series(cols["sample_rate"]).value_counts().sort_index()
    lines = [
        f"# {dataset}",
        "",
        f"- **{len(durations):,} utterances, {durations.sum() / 3600:.3f} hours** in "
        f"{verify['shards']} shards (fields: {', '.join(verify['fields'])})",
        f"- **{len(speakers):,} speakers**; most hours: "
        + ", ".join(f"`{r.speaker}` ({r.hours:.3f} h)" for r in speakers.head(3).itertuples()),
        "- **languages** (hours): "
        + ", ".join(f"{lang} {sec / 3600:.3f}" for lang, sec in languages.sort_index().items()),
        "- **source sample rates** (utterances): " + ", ".join(f"{r} Hz: {n}" for r, n in rates.items()),
        "- **Shar audio sample rates** (utterances): "
        + ", ".join(f"{r} Hz: {n}" for r, n in shar_rates.items()),
        f"- **buckets**: {buckets['num_buckets']} duration buckets, bins {buckets['bucket_duration_bins']}",
        "",
        *segment_section(segment),
        *_text_section(catalog, text),
        *_splits_section(catalog),
        *identity_section(dataset, splits, identity, leaks or []),
        *similarity_section(catalog),
        "## Percentiles" + (" (train)" if "split" in column_names(catalog) else ""),
        "",
        markdown_table(frame),
        "",
        "Query the rest with pandas: `pd.read_parquet(catalog.parquet)` (README: Explore your dataset).",
        "",
    ]
    return "\n".join(lines)


def text_loss(catalog: str) -> dict[str, int]:
    """Of the train cuts: how many (`cuts`), how many lose characters to their tokenizers
    (`dropping`: tokenizer_dropped_chars > 0) and how many were not measured (`unmeasured`: null)."""
    out = {"cuts": 0, "dropping": 0, "unmeasured": 0}
    if "tokenizer_dropped_chars" not in column_names(catalog):  # none measured
        for batch in iter_batches(catalog, ["cut_id"]):
            out["cuts"] += len(batch)
            out["unmeasured"] += len(batch)
        return out
    for batch in iter_batches(catalog, ["tokenizer_dropped_chars"]):
        column = batch.column(0)
        values = column.fill_null(0).to_numpy(zero_copy_only=False)
        out["cuts"] += len(column)
        out["dropping"] += int(np.count_nonzero(values > 0))
        out["unmeasured"] += column.null_count
    return out


def dropped_text_warning(catalogs: dict[str, str]) -> str | None:
    """One line for the end of a run whose train cuts hand the model text its tokenizers skip in part
    (`catalogs`: {dataset: catalog path}); None when no train cut does."""
    losses = {name: text_loss(path) for name, path in sorted(catalogs.items())}
    dropping = {name: n["dropping"] for name, n in losses.items() if n["dropping"]}
    if not dropping:
        return None
    unmeasured = sum(n["unmeasured"] for n in losses.values())
    return (
        (f"not measured: {unmeasured:,} train cuts; of the others, " if unmeasured else "")
        + f"{sum(dropping.values()):,} train cuts lose characters to their tokenizers ("
        + ", ".join(f"{name}: {n:,} of {losses[name]['cuts']:,}" for name, n in dropping.items())
        + "): the model never reads them; see each DATASET.md, or drop them with quality.filters: "
        "{tokenizer_dropped_chars: {max: 0}}"
    )


def _text_section(catalog: str, text: dict | None) -> list[str]:
    """The card's section on the text the model reads: the train cuts that lose characters, and what
    the text stage found (sharflow.text.summary)."""
    if text is None:
        return []
    from sharflow.text.summary import loss_line, text_lines

    loss = text_loss(catalog)
    measured = loss["cuts"] - loss["unmeasured"]
    lines = [
        "## Text the model reads",
        "",
        f"- **{loss_line(loss['dropping'], measured, loss['unmeasured'], 'train cuts')}**",
        *(f"- {line}" for line in text_lines(text)),
        "",
    ]
    return lines


NEMO_MIN_SIMILARITY = 0.6  # min_context_speaker_similarity in NVIDIA's MagpieTTS fine-tuning guide
TITANET = "nemo:titanet"  # the scale it is documented on (TitaNet's embeddings)


def similarity_section(catalog: str) -> list[str]:
    """The train cuts' context speaker similarity: what measured it, and what a filter at NeMo's
    documented 0.6 would drop here (on another embedder's scale the same number means another thing)."""
    cols = read_columns(catalog, ["duration", "context_similarity"])
    sims = cols["context_similarity"].astype(np.float64)
    measured = np.isfinite(sims)
    if not measured.any():
        return []
    scales = set()
    if "context_embedder" in column_names(catalog):
        for batch in iter_batches(catalog, ["context_embedder"]):
            scales |= {s for s in batch.column(0).unique().to_pylist() if s is not None}
    below = measured & (sims < NEMO_MIN_SIMILARITY)
    hours = cols["duration"][below].sum() / 3600
    by = ", ".join(f"`{s}`" for s in sorted(scales)) or "an embedder the cuts do not name (made before)"
    on_titanet = bool(scales) and all(s.startswith(TITANET) for s in scales)
    counts = [f"{int((measured & (sims < t)).sum()):,}" for t in (0.5, 0.6, 0.7, 0.8, 0.9)]
    return [
        "## Context speaker similarity",
        "",
        f"Measured by {by} on {measured.sum():,} cuts (percentiles below). NeMo's sampler drops a cut "
        "whose `context_speaker_similarity` is below `min_context_speaker_similarity`; NVIDIA's MagpieTTS "
        f"fine-tuning guide sets {NEMO_MIN_SIMILARITY}, measured by TitaNet. At {NEMO_MIN_SIMILARITY} it "
        f"would drop **{below.sum():,} of {measured.sum():,} cuts ({hours:.3f} h, "
        f"{100 * below.sum() / measured.sum():.1f} %)** here"
        + (
            ", on TitaNet's own scale."
            if on_titanet
            else ", though these similarities are not on TitaNet's scale: to use NVIDIA's threshold as "
            "documented, measure with TitaNet (`context.embedder: nemo`, docs: context)."
        ),
        "",
        "| cuts with similarity below | 0.5 | 0.6 | 0.7 | 0.8 | 0.9 |",
        "|---|---|---|---|---|---|",
        "| | " + " | ".join(counts) + " |",
        "",
    ]


def segment_section(segment: dict | None) -> list[str]:
    """The card's section on the long recordings the segments were cut from (sharflow.segment)."""
    if not segment:
        return []
    from sharflow.segment.summary import segment_lines

    lines = segment_lines(segment)
    return ["## Cut from long recordings", "", f"- **{lines[0]}**", *(f"- {line}" for line in lines[1:]), ""]


def _splits_section(catalog: str) -> list[str]:
    """The card's splits table (docs: splits); the figures above it are train's."""
    splits = split_table(catalog)
    if splits is None:
        return []
    rows = ["| split | utterances | hours | speakers |", "|---|---|---|---|"]
    rows += [
        f"| {r.Index} | {r.utterances:,} | {r.hours:.3f} | {r.speakers:,} |" for r in splits.itertuples()
    ]
    return ["## Splits", "", "The figures above are the train split's.", "", *rows, ""]


def identity_section(dataset: str, splits: dict | None, identity: dict | None, leaks: list) -> list[str]:
    """The card's "held out by content" section: what the identity job linked in this dataset's
    train (per reason, the dataset matched, examples), exact duplicates, empty held-out splits, and
    held-out audio kept in shards made before (`leaks`, sharflow.shar.plan)."""
    if not splits:
        return []
    lines = ["## Held out by content", ""]
    if leaks:
        lines.append(
            f"- **Held-out audio in shards made before: {len(leaks):,} record(s)**, kept there "
            "(shar.leaks: report; set it to rebuild and rerun to remake those shards without them): "
            + "; ".join(f"shard {x['shard']}: `{x['cut_id']}` ({x['reason']})" for x in leaks[:10])
            + (" ..." if len(leaks) > 10 else "")
        )
    rejected = splits.get("rejected", {})
    if identity:
        reasons = [r for r in identity["by_reason"] if r != "duplicate_in_train"]
        counts = ", ".join(f"`{r}` {rejected.get(r, 0):,}" for r in reasons)
        lines.append(f"- Train records rejected as held-out utterances again: {counts}")
        pairs = {k: v for k, v in identity["by_dataset_pair"].items() if k.startswith(f"{dataset} <- ")}
        if pairs:
            lines.append(
                "- Links found, by held-out dataset (among the text stage's records: some may have left at "
                "quality before splits): "
                + ", ".join(f"{k.split(' <- ')[1]} ({v:,})" for k, v in pairs.items())
            )
        dup = identity.get("train_duplicates", {})
        lines.append(
            f"- Exact duplicates within train (all datasets): {dup.get('found', 0):,} "
            f"(identity.train_duplicates: {dup.get('action', 'keep')}; here dropped "
            f"{rejected.get('duplicate_in_train', 0):,}, marked {splits.get('marked_duplicates', 0):,})"
        )
        lines += _linked_speakers(dataset, identity.get("speakers"))
        examples = [e for rows in identity["examples"].values() for e in rows if e["dataset"] == dataset][:5]
        if examples:
            lines += ["", "| train record | reason | matched (split, dataset) | score |", "|---|---|---|---|"]
            lines += [
                f"| {e['audio_filepath']} @ {e['offset']} | {e['reason']} | "
                f"{e['matched'].get('audio_filepath') or 'speaker ' + e['matched']['speaker']} "
                f"({e['matched']['split']}, {e['matched']['dataset']}) | {e['score']} |"
                for e in examples
            ]
    for e in splits.get("empty_splits", []):
        lines.append(f"- **Empty split**: {e['message']}")
    return [*lines, ""]


def _linked_speakers(dataset: str, speakers: dict | None) -> list[str]:
    """The card's line on this dataset's speakers linked to held-out unseen ones, and its closest
    pair not linked (sharflow.identity.voices)."""
    if not speakers:
        return []

    def pair(p):
        return (
            f"{p['speaker']['speaker']} ~ {p['held_out']['dataset']}:{p['held_out']['speaker']} "
            f"({p['held_out']['split']}, {p['how']}, similarity {p['similarity']})"
        )

    linked = [pair(p) for p in speakers["linked"] if p["speaker"]["dataset"] == dataset]
    near = [pair(p) for p in speakers["near_misses"] if p["speaker"]["dataset"] == dataset][:1]
    return [
        "- Speakers linked to held-out unseen speakers (their train records rejected): "
        + (", ".join(linked) if linked else "none")
        + (f"; the closest pair not linked: {near[0]}" if near else "")
    ]


def markdown_table(frame: pd.DataFrame) -> str:
    """A DataFrame as a Markdown table, numbers to 3 decimals."""
    head = ["", *map(str, frame.columns)]
    rows = [
        [str(index), *(f"{v:.3f}" for v in values)]
        for index, values in zip(frame.index, frame.to_numpy(), strict=True)
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def write_dataset_card(
    dataset: str,
    *,
    catalog: str,
    buckets: str,
    verify: str,
    out: str,
    splits: str | None = None,
    identity: str | None = None,
    plan: str | None = None,
    text: str | None = None,
    segment: str | None = None,
) -> str:
    """Write results/<dataset>/DATASET.md (see dataset_card) and return its text; `plan` (the shard
    plan) says the leaks kept in shards made before, `text` is the text stage's stats."""
    import yaml

    from sharflow.core.atomic import atomic_file, read_json

    with open(buckets, encoding="utf-8") as f:
        bins = yaml.safe_load(f)
    text = dataset_card(
        dataset,
        catalog,
        bins,
        read_json(verify),
        read_json(splits) if splits else None,
        read_json(identity) if identity else None,
        read_json(plan).get("leaks", []) if plan else [],
        read_json(text) if text else None,
        read_json(segment) if segment else None,
    )
    with atomic_file(out, "w", encoding="utf-8") as f:
        f.write(text)
    return text
