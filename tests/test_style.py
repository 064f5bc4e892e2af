"""Style is checked in the suite: ruff (lint and format), snakefmt, and snakemake's own linter.

The tools are pinned in the `test` extra (pyproject.toml), so a new release cannot turn main red.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from testkit import REPO

BIN = Path(sys.executable).parent
SNAKEFILES = ["Snakefile", "rules"]

# snakemake --lint findings that stay, each with its reason. Anything else fails the test.
ACCEPTED_LINTS = {
    "Specify a conda environment or container for each rule.": (
        "every job runs in the one environment sharflow is installed into (README set-up: torch, NeMo, "
        "lhotse pinned in pyproject.toml), the same on a laptop and on every Slurm node; a conda env "
        "per rule would duplicate a multi-GB NeMo install per rule"
    ),
}


def run_tool(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    done = run_tool(str(BIN / "ruff"), "check", "--no-cache", ".")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_ruff_format_changes_nothing():
    done = run_tool(str(BIN / "ruff"), "format", "--no-cache", "--check", ".")
    assert done.returncode == 0, f"run `ruff format .`:\n{done.stdout[-4000:]}{done.stderr[-2000:]}"


def test_snakefmt_changes_nothing():
    done = run_tool(str(BIN / "snakefmt"), "--check", "--compact-diff", *SNAKEFILES)
    assert done.returncode == 0, f"run `snakefmt Snakefile rules`:\n{done.stdout[-4000:]}{done.stderr[-800:]}"


def lints(text: str) -> set[tuple[str, str]]:
    """(what, title) of every finding in snakemake --lint's text output."""
    found, where = set(), None
    for line in text.splitlines():
        if m := re.match(r"Lints for (.+?) \(", line) or re.match(r"Lints for (.+?):$", line):
            where = m[1]
        elif m := re.match(r"    \* (.+?):?$", line):
            found.add((where, m[1]))
    return found


def test_lints_parser_reads_snakemakes_format():
    text = (
        "Lints for rule prepare (line 1, /x/rules/prepare.smk):\n"
        "    * Specify a conda environment or container for each rule.:\n"
        "      This way, the used software ...\n\n"
        "Lints for snakefile /x/Snakefile:\n"
        "    * Mixed rules and functions in same snakefile.:\n"
    )
    assert lints(text) == {
        ("rule prepare", "Specify a conda environment or container for each rule."),
        ("snakefile /x/Snakefile", "Mixed rules and functions in same snakefile."),
    }


def test_snakemake_lint_finds_only_accepted_findings():
    done = run_tool(str(BIN / "snakemake"), "--lint", "--cores", "1")
    output = done.stdout + done.stderr
    if done.returncode not in (0, 1) or ("Lints for" not in output and done.returncode):
        pytest.fail(f"snakemake --lint did not run:\n{output[-4000:]}")
    unexpected = sorted(f"{where}: {title}" for where, title in lints(output) if title not in ACCEPTED_LINTS)
    assert not unexpected, "snakemake --lint found:\n" + "\n".join(unexpected) + "\n\n" + output[-4000:]
