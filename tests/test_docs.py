"""The docs: a README that is a front page, a mkdocs site that builds strictly, and reference pages
generated from the code and schema that are current and complete."""

import json
import re
import shutil
import subprocess
import sys

import yaml

from sharflow.context.part import REASONS as CONTEXT_REASONS
from sharflow.core.metrics import METRICS
from sharflow.dataset.catalog import FRAGMENT_SCHEMA
from sharflow.identity.links import REASONS as SPLITS_REASONS
from sharflow.prepare.manifest import REASONS as PREPARE_REASONS
from sharflow.quality.filter import REASONS as QUALITY_REASONS
from sharflow.report.reference import write_pages
from sharflow.shar.shard import REASONS as SHAR_REASONS
from sharflow.text.fields import REASONS as TEXT_REASONS
from testkit import README, REPO

DOCS = REPO / "docs"
REFERENCE = DOCS / "pages" / "reference"
MKDOCS = [
    sys.executable,
    "-m",
    "mkdocs",
    "build",
    "--strict",
]  # not --quiet: it hides the warnings --strict counts


def table_rows(page: str) -> dict[str, list[str]]:
    """{first cell without backticks: the other cells} of every Markdown table row of a page."""
    rows, lines = {}, (REFERENCE / page).read_text().splitlines()
    for line, following in zip(lines, [*lines[1:], ""], strict=True):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if cells and not set(cells[0]) <= {"-"} and not following.startswith("|---"):  # not a header
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def schema_paths(node: dict, prefix: str = "") -> dict[str, dict]:
    """Every key of the schema file by its dotted path, read from the YAML itself (not with the code
    that writes the page): sections (keys with keys of their own) are walked into."""
    out = {}
    for name, sub in node.get("properties", {}).items():
        path = f"{prefix}.{name}" if prefix else name
        entries = sub.get("additionalProperties")
        if "properties" in sub:
            out |= schema_paths(sub, path)
        elif isinstance(entries, dict) and "properties" in entries:
            if sub.get("default", {}) != {}:
                out[path] = sub
            out |= schema_paths(entries, f"{path}.<name>")
        else:
            out[path] = sub
    return out


def test_the_generated_reference_pages_are_current():
    assert write_pages(REFERENCE, check=True) == [], (
        "run: python -m sharflow.report.reference docs/pages/reference"
    )


def test_the_config_reference_lists_every_schema_key_with_its_default():
    keys = schema_paths(yaml.safe_load((REPO / "config" / "schema.yaml").read_text()))
    rows = table_rows("config.md")
    assert {"context.min_similarity", "datasets.<name>.manifest", "codecs.<name>.backend"} <= set(keys)
    sections = {path for path, shown in rows.items() if shown[0] == "(section)"}
    held_out = {f"splits.{split}" for split in ("dev_unseen", "test_unseen", "dev_seen", "test_seen")}
    asr = {"quality.asr", "segment.asr"}
    assert set(rows) - sections == set(keys) and sections == {*asr, "identity.voices", *held_out}
    for path, node in keys.items():
        shown = rows[path][0]
        if "default" in node:
            assert json.loads(shown.strip("`")) == node["default"], path
        else:
            assert shown == "required", path


def test_the_reference_lists_every_reason_metric_and_column():
    reasons = table_rows("reasons.md")
    stages = (PREPARE_REASONS, TEXT_REASONS, QUALITY_REASONS, SPLITS_REASONS, CONTEXT_REASONS, SHAR_REASONS)
    for stage in stages:
        assert set(stage) <= set(reasons)
    assert set(table_rows("metrics.md")) == {m.name for m in METRICS}
    columns = table_rows("catalog.md")
    extra = {"split", "tokens", "frames_<codec>", "context_frames_<codec>"}
    assert set(FRAGMENT_SCHEMA.names) | extra == set(columns)


def test_the_site_builds_strictly_and_a_broken_link_fails_it(tmp_path):
    done = subprocess.run(
        [*MKDOCS, "-f", str(DOCS / "mkdocs.yml"), "-d", str(tmp_path / "site")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "config" / "index.html").is_file()
    broken = tmp_path / "docs"
    shutil.copytree(DOCS, broken)
    with open(broken / "pages" / "codes.md", "a", encoding="utf-8") as f:
        f.write("\nSee [nowhere](no-such-page.md).\n")
    done = subprocess.run(
        [*MKDOCS, "-f", str(broken / "mkdocs.yml"), "-d", str(tmp_path / "broken")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0 and "no-such-page.md" in done.stdout + done.stderr


def test_the_readme_is_a_front_page_whose_links_resolve():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert len(local) >= 10
    missing = [link for link in local if not (REPO / link).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"
