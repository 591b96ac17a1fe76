"""``python -m tests.chaos [--duration S] [--nodes N] [--seed K] [--keep DIR]``: the chaos run;
see run.py. Exit status 0 when every check passed, 1 otherwise, 2 for bad options."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from tests.chaos.run import Plan, chaos


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    p.add_argument("--duration", type=float, default=240.0, help="seconds of chaos (default 240)")
    p.add_argument("--nodes", type=int, default=32, help="simulated nodes (default 32)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--every", type=float, default=4.0, help="seconds between kills (default 4)")
    p.add_argument("--keep", type=Path, help="keep the run's logs in this folder")
    args = p.parse_args()
    if args.keep is not None and args.keep.is_dir() and any(args.keep.iterdir()):
        p.error(f"--keep {args.keep}: holds an earlier run; name a new folder or remove it")
    plan = Plan(duration=args.duration, nodes=args.nodes, seed=args.seed, every=args.every)
    report = asyncio.run(chaos(plan, keep=args.keep))
    print(report.text())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
