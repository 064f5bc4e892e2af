import pytest

from sharflow.report.dag import parse_dot, render_dag

DAG = """Building DAG of jobs...
digraph snakemake_dag {
    graph[bgcolor=white, margin=0];
	0[label = "all", color = "0.00 0.6 0.85", style="rounded"];
	1[label = "prepare\\ndataset: demo", color = "0.33 0.6 0.85", style="rounded"];
	2[label = "prepare\\ndataset: other", color = "0.33 0.6 0.85", style="rounded"];
	1 -> 0
	2 -> 0
}
"""


def test_parse_tolerates_log_lines_and_reads_labels():
    nodes, edges = parse_dot(DAG)
    assert nodes == {"0": "all", "1": "prepare\ndataset: demo", "2": "prepare\ndataset: other"}
    assert edges == [("1", "0"), ("2", "0")]


def test_not_a_graph_is_refused():
    with pytest.raises(ValueError, match="digraph"):
        parse_dot("Error: something else")


def test_matplotlib_engine_writes_svg(tmp_path):
    render_dag(DAG, tmp_path / "g.svg", engine="matplotlib")
    svg = (tmp_path / "g.svg").read_text()
    assert svg.count("dataset: ") == 2 and ">all<" in svg
