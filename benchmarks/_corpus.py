"""Benchmark corpora built from the demo corpus through the real prepare and context stages."""

import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "demo"


def snakemake_command(work: Path, *args: str) -> list[str]:
    """The snakemake CLI on the repo's workflow in `work` (config at work/config.yaml, local profile)."""
    return [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(work),
        "--configfile",
        str(work / "config.yaml"),
        "--profile",
        str(REPO / "profiles" / "local"),
        *args,
    ]


def proc_status_mb(field: str) -> float:
    """A field of /proc/self/status (VmRSS, VmHWM, ...) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def prepare(folder: Path, manifest: Path, audio_root: Path):
    """The prepare stage (one worker) into a layout.DatasetFiles at `folder`; (files, records)."""
    from sharflow.core.layout import DatasetFiles
    from sharflow.prepare.job import prepare_dataset

    files = DatasetFiles(str(folder))
    prepare_dataset(
        str(manifest),
        prepared=files.prepared,
        rejected_dir=files.prepare_rejected,
        stats=files.prepare_stats,
        dataset="demo",
        audio_root=str(audio_root),
        workers=1,
    )
    return files, [json.loads(x) for x in Path(files.prepared).read_text().splitlines()]


def demo_with_context(tmp: Path) -> Path:
    """with_context.jsonl of the demo corpus (prepare + context stages, one part, one worker)."""
    files, _ = prepare(tmp / "demo", DEMO / "manifest.json", DEMO / "audio")
    context_stage(files, audio_root=DEMO / "audio", workers=1)
    return Path(files.with_context)


def context_stage(
    files, *, audio_root: Path, workers: int, device: str = "cpu", out=None, measured=None
) -> None:
    """The context stage (plan, one part, merge) over the prepared records of `files` (a
    sharflow.core.layout.DatasetFiles), into `out` (another, default `files`), reading the quality
    parts' embeddings with `measured` (a sharflow.context.part.MeasuredEmbeddings)."""
    from sharflow.context.merge import merge_context
    from sharflow.context.part import PartSettings, run_context_part
    from sharflow.context.plan import plan_context

    out = out or files
    plan_context(
        files.prepared,
        plan=out.context_plan,
        parts=1,
        grouping={"preset": "speaker"},
        cost_per_audio_second=1e6,
    )
    part = out.context_part(0)
    run_context_part(
        0,
        prepared=files.prepared,
        plan=out.context_plan,
        out=part,
        settings=PartSettings(audio_root=str(audio_root)),
        device=device,
        workers=workers,
        measured=measured,
    )
    merge_context(
        part_records=[part.records],
        part_rejected=[part.rejected],
        part_stats=[part.stats],
        records_stats=files.prepare_stats,
        with_context=out.with_context,
        rejected_dir=out.context_rejected,
        stats=out.context_stats,
        dataset="demo",
    )


def repeated_with_context(tmp: Path, copies: int) -> tuple[Path, Path, list[dict]]:
    """The demo's with_context records `copies` times, each copy's audio in its own folder.

    Returns (with_context.jsonl, audio root, records).
    """
    base = [json.loads(x) for x in demo_with_context(tmp).read_text().splitlines()]
    root = tmp / "audio"
    records = []
    for i in range(copies):
        shutil.copytree(DEMO / "audio", root / f"copy{i:02d}")
        for r in base:
            records.append(
                dict(
                    r,
                    audio_filepath=f"copy{i:02d}/{r['audio_filepath']}",
                    context_audio_filepath=f"copy{i:02d}/{r['context_audio_filepath']}",
                )
            )
    path = tmp / "with_context.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path, root, records


def repeated_demo(tmp: Path, times: int, link: bool = False) -> tuple[Path, Path]:
    """The demo manifest `times` over, each copy's audio in its own folder (same speakers, distinct files).

    Returns (manifest, audio root). link=True symlinks the audio folders instead of copying them.
    """
    root = tmp / "audio"
    root.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(times):
        if link:
            (root / f"copy{i}").symlink_to(DEMO / "audio", target_is_directory=True)
        else:
            shutil.copytree(DEMO / "audio", root / f"copy{i}")
        for line in (DEMO / "manifest.json").read_text().splitlines():
            record = json.loads(line)
            record["audio_filepath"] = f"copy{i}/{record['audio_filepath']}"
            lines.append(json.dumps(record))
    manifest = tmp / "manifest.json"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest, root
