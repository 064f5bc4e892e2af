"""Render Snakemake's `--dag` / `--rulegraph` DOT output to an image.

Graphviz's `dot` is used when it is installed. Machines set up with pip alone have no `dot`, so a
small layered layout drawn with matplotlib stands in: nodes in rows by longest path from the
sources, edges as arrows. Usage:

    snakemake --profile profiles/local --rulegraph | python -m sharflow.report.dag -o dag.png

(`--dag`/`--rulegraph` never run jobs. Adding `-n` makes Snakemake print "Building DAG of jobs..."
on stdout before the graph; the text before `digraph` is dropped here, so that works too.)
"""

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

_NODE_RE = re.compile(r'^\s*(\w+)\s*\[label\s*=\s*"((?:[^"\\]|\\.)*)"', re.MULTILINE)
_EDGE_RE = re.compile(r"^\s*(\w+)\s*->\s*(\w+)", re.MULTILINE)


def _graph_text(text: str) -> str:
    start = text.find("digraph")
    if start < 0:
        raise ValueError("no 'digraph' found: is this the output of snakemake --dag or --rulegraph?")
    return text[start:]


def parse_dot(text: str) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Nodes (id -> label, DOT `\\n` escapes turned into newlines) and edges of a Snakemake DOT graph."""
    text = _graph_text(text)
    nodes = {nid: label.replace("\\n", "\n") for nid, label in _NODE_RE.findall(text)}
    edges = [(a, b) for a, b in _EDGE_RE.findall(text) if a in nodes and b in nodes]
    if not nodes:
        raise ValueError("no nodes found: is this the output of snakemake --dag or --rulegraph?")
    return nodes, edges


def render_dag(dot_text: str, out: str | Path, engine: str = "auto") -> str:
    """Write the graph to `out` (format from its suffix: png, svg or pdf); return the engine used.

    engine: "dot" (Graphviz), "matplotlib", or "auto" (dot when on PATH).
    """
    out = Path(out)
    if engine == "auto":
        engine = "dot" if shutil.which("dot") else "matplotlib"
    if engine == "dot":
        subprocess.run(
            ["dot", f"-T{out.suffix.lstrip('.')}", "-o", str(out)],
            input=_graph_text(dot_text),
            text=True,
            check=True,
        )
        return engine
    _render_matplotlib(*parse_dot(dot_text), out)
    return engine


def _layers(nodes: dict[str, str], edges: list[tuple[str, str]]) -> dict[str, int]:
    parents: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        parents[b].append(a)
    depth: dict[str, int] = {}

    def visit(n: str) -> int:
        if n not in depth:
            depth[n] = 0  # guards against cycles, which a Snakemake DAG never has
            depth[n] = 1 + max((visit(p) for p in parents[n]), default=-1)
        return depth[n]

    for n in nodes:
        visit(n)
    return depth


def _render_matplotlib(nodes: dict[str, str], edges: list[tuple[str, str]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # labels stay text in SVG: searchable, selectable

    depth = _layers(nodes, edges)
    rows: dict[int, list[str]] = {}
    for n in sorted(nodes, key=lambda n: (depth[n], nodes[n], n)):
        rows.setdefault(depth[n], []).append(n)
    width = max(len(r) for r in rows.values())
    pos = {n: ((i + 0.5) * width / len(row), -d) for d, row in rows.items() for i, n in enumerate(row)}
    fig, ax = plt.subplots(figsize=(max(4, 2.2 * width), max(3, 1.2 * len(rows))))
    for a, b in edges:
        ax.annotate(
            "",
            xy=pos[b],
            xytext=pos[a],
            arrowprops={"arrowstyle": "->", "color": "grey", "lw": 1.5, "shrinkA": 14, "shrinkB": 14},
        )
    for n, (x, y) in pos.items():
        ax.text(
            x,
            y,
            nodes[n],
            ha="center",
            va="center",
            fontsize=9,
            bbox={"boxstyle": "round", "fc": "white", "ec": "tab:blue", "lw": 1.5},
        )
    ax.set_xlim(-0.2, width + 0.2)
    ax.set_ylim(-len(rows) + 0.4, 0.6)
    ax.axis("off")
    fig.savefig(out, bbox_inches="tight", dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", required=True, help="image to write (.png, .svg or .pdf)")
    parser.add_argument("--engine", choices=["auto", "dot", "matplotlib"], default="auto")
    parser.add_argument("dot_file", nargs="?", help="DOT file (default: standard input)")
    args = parser.parse_args(argv)
    text = Path(args.dot_file).read_text() if args.dot_file else sys.stdin.read()
    engine = render_dag(text, args.out, args.engine)
    print(f"wrote {args.out} with {engine}", file=sys.stderr)


if __name__ == "__main__":
    main()
