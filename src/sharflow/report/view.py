"""Look at a `snakemake --report` HTML file the way a user does: in a headless Chromium.

The Snakemake report is a single-page app: each result is shown after a click. For every result
this writes a copy of the report that opens that result on load, screenshots it with a headless
Chromium (Debian package `chromium`), and checks that the plot's own colours are on the page.

    python -m sharflow.report.view report.html --out report_screens/
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from sharflow.core.errors import SharflowError

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome", "headless_shell")
OPEN_RESULT = """<script>
window.addEventListener("load", () => setTimeout(() => {{
  const key = {key};
  const entry = results[key];
  const content = entry.mime_type === "text/html" ? "html" : "img";
  app.setView({{content: content, contentPath: entry.data_uri, resultPath: key}});
}}, 200));
</script>
"""


def find_browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def report_results(report_html: str) -> dict[str, dict]:
    """The report's embedded `results` table: {path: {name, mime_type, data_uri, ...}}."""
    text = Path(report_html).read_text(encoding="utf-8")
    start = text.find("var results = {")  # the report template's table, not the bundled libraries'
    if start < 0:
        raise SharflowError(
            f"{report_html}: no embedded results table; is it a snakemake --report HTML file?"
        )
    results, _ = json.JSONDecoder().raw_decode(text, start + len("var results = "))
    return results


def screenshot(
    report_html: str, key: str, out_png: str, browser: str, size: tuple[int, int] = (1400, 1100)
) -> None:
    """Screenshot of the report with result `key` opened."""
    text = Path(report_html).read_text(encoding="utf-8")
    end = text.rfind("</body>")  # the last one: bundled scripts hold the string too
    if end < 0:
        raise SharflowError(f"{report_html}: no </body>; not an HTML report")
    page = text[:end] + OPEN_RESULT.format(key=json.dumps(key)) + text[end:]
    with tempfile.TemporaryDirectory(prefix="sharflow-report-") as tmp:
        copy = Path(tmp) / "report.html"
        copy.write_text(page, encoding="utf-8")
        cmd = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={tmp}/profile",
            f"--window-size={size[0]},{size[1]}",
            "--virtual-time-budget=10000",
            f"--screenshot={Path(out_png).resolve()}",
            copy.as_uri(),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0 or not Path(out_png).exists():
            raise SharflowError(
                f"{browser} could not screenshot {report_html} ({key}): {done.stderr[-2000:]}"
            )


def _rgb(png: str) -> np.ndarray:
    import matplotlib.image

    image = matplotlib.image.imread(png)
    return np.round(image[..., :3] * 255).astype(np.int16)


def signature_colour(png: str) -> tuple[tuple[int, int, int], int] | None:
    """The most frequent saturated colour of a plot (its bars or line) and how many pixels have it."""
    pixels = _rgb(png).reshape(-1, 3)
    saturated = pixels[(pixels.max(axis=1) - pixels.min(axis=1)) > 60]
    if not len(saturated):
        return None  # e.g. a "no records rejected" panel
    colours, counts = np.unique(saturated, axis=0, return_counts=True)
    best = int(np.argmax(counts))
    return tuple(int(c) for c in colours[best]), int(counts[best])


def colour_pixels(png: str, colour: tuple[int, int, int], tolerance: int = 12) -> int:
    pixels = _rgb(png).reshape(-1, 3)
    return int(np.count_nonzero(np.abs(pixels - np.asarray(colour)).max(axis=1) <= tolerance))


def check_report(
    report_html: str, out_dir: str, plots_dir: str | None = None, browser: str | None = None
) -> dict[str, dict]:
    """Screenshot every result; for PNG results also found in plots_dir, count the plot's colour on screen."""
    browser = browser or find_browser()
    if browser is None:
        raise SharflowError(
            f"no Chromium found (looked for {', '.join(BROWSERS)}); install it: apt-get install chromium"
        )
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    found = {}
    for key, entry in sorted(report_results(report_html).items()):
        shot = str(Path(out_dir) / (Path(key).name + ".screen.png"))
        screenshot(report_html, key, shot, browser)
        info = {"screenshot": shot, "mime_type": entry.get("mime_type")}
        source = Path(plots_dir or ".") / Path(key).name
        if (
            entry.get("mime_type") == "image/png"
            and source.exists()
            and (sig := signature_colour(str(source)))
        ):
            colour, in_plot = sig
            info.update(colour=colour, plot_pixels=in_plot, screen_pixels=colour_pixels(shot, colour))
        found[key] = info
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", help="HTML file written by snakemake --report")
    parser.add_argument("--out", default="report_screens", help="folder for the screenshots")
    parser.add_argument(
        "--plots", default="results/report", help="folder holding the plots, to compare colours"
    )
    args = parser.parse_args(argv)
    try:
        found = check_report(args.report, args.out, args.plots)
    except SharflowError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for key, info in found.items():
        extra = (
            f"  plot colour {info['colour']}: {info['screen_pixels']} px on screen"
            if "colour" in info
            else ""
        )
        print(f"{key}: {info['screenshot']}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
