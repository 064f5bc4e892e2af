"""What a dataset's text stats say about the text the model reads, in sentences for people.

The dataset card and the run report show them; each is one plain-text line (the caller adds its
markup). They name what is wrong and what to set: a spoken form normalized again, digits or
symbols kept, characters the tokenizers skip, records whose tokenizers cannot be measured here.
"""

MOST_COMMON = 10  # dropped symbols named


def loss_line(dropping: int, measured: int, unmeasured: int, what: str = "records") -> str:
    """How many of `what` lose characters to their tokenizers, the ones not measured first: no figure
    of loss stands over records that were not measured ("not measured: 56 of 56 records")."""
    lost = f"{dropping:,} of {measured:,} measured {what} lose characters to their tokenizers"
    if not unmeasured:
        return f"{dropping:,} of {measured:,} {what} lose characters to their tokenizers"
    return f"not measured: {unmeasured:,} of {measured + unmeasured:,} {what}; " + lost


def text_lines(stats: dict) -> list[str]:
    """The text stage's findings for one dataset (`stats`: its text/stats.json)."""
    sources = stats["normalized_text_source"]
    lines = ["normalized_text from: " + ", ".join(f"{k} {n:,}" for k, n in sources.items())]
    if sources.get("renormalized"):
        lines.append(
            f"{sources['renormalized']:,} spoken forms of the manifest held digits or symbols and were "
            "normalized again (the manifest's kept as manifest_normalized_text)"
        )
    left = stats.get("symbols_left_by_source", {})
    if stats["symbols_left"]:
        lines.append(
            f"{stats['symbols_left']:,} spoken forms keep digits or symbols ("
            + ", ".join(f"{k} {n:,}" for k, n in left.items())
            + "): datasets.<name>.unnormalizable: reject drops them"
        )
    cov = stats["coverage"]
    lost = loss_line(cov["records_dropping"], cov["measured"], cov["unmeasured"])
    if cov["records_dropping"]:
        symbols = " ".join(repr(s) for s in list(stats["dropped_symbols"])[:MOST_COMMON])
        lost += f" ({cov['symbols_dropped']:,} in all; most often {symbols})"
    lines.append(lost)
    for name, what in stats.get("unmeasured_tokenizers", {}).items():
        lines.append(f"{what['records']:,} records not measured with {name}: {what['why']}")
    return lines
