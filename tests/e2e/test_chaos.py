"""The short chaos run (the long one: ``just chaos``), docs/reliability.md's command run
as written: replicas killed, NATS restarted, a leader paused past its lease, a node's
state beyond its shape, forged action kinds and epochs, a replica whose clock runs
ahead, a JetStream store that fills up and is freed; afterwards no gang is partly bound,
no node over-allocated, every action answered once, every job placed, and NATS (auth
on, one nkey per service, as ``baton up`` runs it) refused nothing. Its report is read
as a user reads it: the exit status, the counts, a PASS line for each check."""

from __future__ import annotations

import re

import pytest

from tests.e2e.test_readme import Shell, shell  # noqa: F401 - the fixture
from tests.readme import ROOT, scenario

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

CHECKS = (
    "NATS refused no service (auth on)",
    "forged kinds and epochs refused, none applied",
    "a skewed replica neither steals a lease nor slows a takeover",
    "a full store is seen (not ready) and, freed, works again by itself",
)


def test_baton_keeps_its_promises_while_its_pieces_die(shell: Shell) -> None:  # noqa: F811
    (line,) = scenario("chaos", "docs/reliability.md")  # 60 s, 16 nodes: ~15 s of it full
    (shell.cwd / "tests").symlink_to(ROOT / "tests")  # run from a clone's root, as written
    done = shell.attempt(line, timeout=400)
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    report = re.search(r"^chaos: 60 s, 16 nodes, 2 replicas of ", done.stdout, re.M)
    assert report is not None, done.stdout[-6000:]
    text = done.stdout[report.start() :]  # after its own log lines
    kills = re.search(r"^kills: (\d+) \(", text, re.M)
    assert kills is not None and int(kills.group(1)) >= 8, text
    assert " s: NATS killed, back after " in text, text
    assert " s: paused gang leader " in text, text
    assert " s: forged node " in text, text
    actions = re.search(r"^actions: (\d+)$", text, re.M)
    assert actions is not None and int(actions.group(1)) > 0, text
    assert not re.search(r"^FAIL ", text, re.M), text
    for check in CHECKS:
        assert re.search(rf"^PASS {re.escape(check)}: ", text, re.M), (check, text)
    kept = shell.cwd / line.split("--keep ")[1] / "logs"
    assert (kept / "nats.log").stat().st_size > 0  # --keep: the run's logs are there
