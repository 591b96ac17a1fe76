"""``python -m tests.bench [topic ...]`` (``just bench``): run benchmark modules.

Each ``tests/bench/bench_<topic>.py`` has a ``main()`` that measures and prints a
markdown table, with its raw baseline measured in the same run where one applies.
Record results in docs/benchmarks.md with the command, the machine and the date.
"""

from __future__ import annotations

import importlib
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent


def topics() -> list[str]:
    return sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))


def main(argv: list[str]) -> int:
    wanted = argv or topics()
    unknown = sorted(set(wanted) - set(topics()))
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(topics())}")
        return 2
    print(f"# Baton benchmarks: {time.strftime('%Y-%m-%d')}, {platform.node()}, ", end="")
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}\n")
    for topic in wanted:
        print(f"## {topic}\n", flush=True)
        started = time.perf_counter()
        importlib.import_module(f"tests.bench.bench_{topic}").main()
        print(f"\n({topic} took {time.perf_counter() - started:.1f}s)\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
