"""Same decisions before and after a change to the gang core: a digest of every output
of the core on the bench workloads (the 7,500-node spans stream, the Philly harness on
40 and 48 nodes, the 7,500-node replay session at 1,000x), for the code in a checkout.

    git archive <old commit> libs proto services tests | tar -x -C /tmp/old
    python -m tests.bench.gang_decisions /tmp/old   # then: python -m tests.bench.gang_decisions .

Equal digests: identical decisions (bindings, verdicts, restarts, action ids).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
import time
from pathlib import Path
from typing import Any


def main(root: str) -> None:
    here = Path(__file__).resolve().parents[3] / "shared/traces/philly.csv"
    os.environ.setdefault("BATON_PHILLY", str(here))
    sys.path.insert(0, str(Path(root).resolve()))
    for name in [
        m for m in sys.modules if m.split(".")[0] in ("services", "tests", "libs", "proto")
    ]:
        del sys.modules[name]
    import msgspec

    bench = importlib.import_module("tests.bench.bench_gang")
    replay = importlib.import_module("tests.bench.bench_replay")
    builders = importlib.import_module("tests.support.builders")
    core = importlib.import_module("baton.services.gang.core")
    print("code from", core.__file__)
    step, digest = core.step, hashlib.sha256()

    def recording(state: Any, event: Any, now: float) -> Any:
        state, outputs = step(state, event, now)
        for output in outputs:
            digest.update(msgspec.json.encode(output))
        return state, outputs

    core.step = recording
    workloads = {
        "spans (7,500 nodes)": bench.spans,
        "philly, 40 nodes": lambda: bench.run_baton(bench.philly(), builders.racks(racks=5)),
        "philly, 48 nodes": lambda: bench.run_baton(bench.philly(), builders.racks(racks=6)),
        "replay session, 7,500 nodes, 1,000x": lambda: replay.synthesize(
            bench.philly(), speed=1000.0
        ),
    }
    for label, run in workloads.items():
        digest, started = hashlib.sha256(), time.perf_counter()
        run()
        print(f"{label}: {digest.hexdigest()[:16]} ({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
