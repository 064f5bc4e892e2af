"""`sharflow explore`: start the explorer on a finished run (sharflow.explore), until Ctrl-C.

sharflow explore                       # the run in this folder, config/config.yaml, port 8050
sharflow explore --run /scratch/run1 --configfile run1.yaml --port 8060

It prints the address to open, with the token every request that reads the run must carry
(sharflow.explore.access): http://127.0.0.1:8050/?token=...
"""

import argparse
import logging
import sys
import time
from pathlib import Path

from sharflow.core.config import load_yaml
from sharflow.core.errors import SharflowError
from sharflow.explore.access import is_loopback
from sharflow.explore.run import Run
from sharflow.explore.server import serve

DEFAULT_CONFIG = "config/config.yaml"
log = logging.getLogger("sharflow.explore")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sharflow", description="sharflow's tools beside the workflow")
    commands = p.add_subparsers(dest="command", required=True)
    explore = commands.add_parser("explore", help="look at and listen to a finished run in a browser")
    explore.add_argument("--run", default=".", help="the folder the workflow ran in (holds results/)")
    explore.add_argument(
        "--configfile", help=f"the run's config (default: <run>/{DEFAULT_CONFIG}, as snakemake reads it)"
    )
    explore.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default: this machine only; to look from another machine, forward the "
        "port with ssh -L rather than binding another address)",
    )
    explore.add_argument("--port", type=int, default=8050, help="port (0: any free one)")
    explore.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="another name the browser reaches the server by (a proxy's, a node's); repeatable",
    )
    return p


def explore(
    run_dir: str, configfile: str | None, host: str, port: int, allow_hosts: tuple[str, ...] = ()
) -> None:
    config_path = Path(configfile) if configfile else Path(run_dir) / DEFAULT_CONFIG
    if not config_path.is_file():
        raise SharflowError(f"{config_path}: no such config; name the run's with --configfile")
    run = Run(run_dir, load_yaml(config_path) or {})
    if not run.datasets:
        raise SharflowError(
            f"{Path(run_dir).resolve()}/results holds no dataset catalog of {config_path}: run the workflow "
            "first (snakemake --profile profiles/local), or name its folder with --run"
        )
    server = serve(run, host, port, allow_hosts)
    if not is_loopback(host):
        log.warning(
            "listening on %s, not this machine only: anyone who reaches it and has the token reads every "
            "transcript, speaker and clip of the run; keep the link to yourself",
            host,
        )
    began = time.perf_counter()
    server.RequestHandlerClass.explorer.warm()  # the catalogs read now: the first page comes at once
    log.info("read %s in %.1f s", ", ".join(run.datasets), time.perf_counter() - began)
    print(f"sharflow explorer on {server.url} (Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        explore(args.run, args.configfile, args.host, args.port, tuple(args.allow_host))
    except SharflowError as e:
        print(f"sharflow: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
