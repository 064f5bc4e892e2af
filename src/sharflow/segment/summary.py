"""What the segment stage's stats say, in lines for the dataset card and the report."""


def segment_lines(stats: dict) -> list[str]:
    """Where every second of a long_form dataset's recordings went: kept in segments, dropped by reason;
    its speakers, and how many were linked across recordings."""
    total = stats["seconds_in"]

    def share(seconds: float) -> str:
        return f"{seconds / 3600:.3f} h ({100 * seconds / total:.1f} %)" if total else "0 h"

    dropped = {k: v for k, v in stats["seconds"].items() if k != "kept" and v}
    lines = [
        f"{stats['recordings']:,} recordings, {total / 3600:.3f} hours: {stats['segments']:,} segments keep "
        f"{share(stats['seconds']['kept'])}",
        "dropped: " + (", ".join(f"{k} {share(v)}" for k, v in dropped.items()) or "nothing"),
    ]
    if "speakers" in stats:
        linked = f", {stats['linked']:,} of them linked across recordings by voice" if stats["linked"] else ""
        lines.append(f"{stats['speakers']:,} speakers{linked}")
    return lines
