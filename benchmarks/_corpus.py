"""Benchmark corpora built from the demo corpus through the real prepare and context stages."""

import json
import shutil
from pathlib import Path

DEMO = Path(__file__).resolve().parents[1] / "demo"


def demo_with_context(tmp: Path) -> Path:
    """with_context.jsonl of the demo corpus (prepare + context stages, one part, one worker)."""
    from sharflow.context import PartSettings, merge_context, plan_context, run_context_part
    from sharflow.prepare import prepare_dataset

    prep, ctx = tmp / "prep", tmp / "ctx"
    prepare_dataset(str(DEMO / "manifest.json"), str(prep / "p.jsonl"), str(prep / "r"), str(prep / "s.json"),
                    dataset="demo", audio_root=str(DEMO / "audio"), workers=1)
    plan_context(str(prep / "p.jsonl"), str(ctx / "plan.json"), parts=1, grouping={"preset": "speaker"},
                 cost_per_audio_second=1e6)
    parts = [str(ctx / f) for f in ("part.jsonl", "part.rej.jsonl", "part.stats.json")]
    run_context_part(str(prep / "p.jsonl"), str(ctx / "plan.json"), 0, *parts,
                     settings=PartSettings(audio_root=str(DEMO / "audio")), device="cpu", workers=1)
    merge_context([parts[0]], [parts[1]], [parts[2]], str(prep / "s.json"), str(ctx / "w.jsonl"), str(ctx / "rej"),
                  str(ctx / "stats.json"), dataset="demo")
    return ctx / "w.jsonl"


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
            records.append(dict(r, audio_filepath=f"copy{i:02d}/{r['audio_filepath']}",
                                context_audio_filepath=f"copy{i:02d}/{r['context_audio_filepath']}"))
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
