"""The short chaos run (the long one: ``just chaos``): replicas killed, NATS restarted, a
leader paused past its lease, a node's state beyond its shape, forged action kinds and
epochs, a replica whose clock runs ahead, a JetStream store that fills up and is freed;
afterwards no gang is partly bound, no node
over-allocated, every action answered once, every job placed, and NATS (auth on, one
nkey per service, as ``baton up`` runs it) refused nothing."""

from __future__ import annotations

import pytest

from tests.chaos.run import Plan, chaos

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]


async def test_baton_keeps_its_promises_while_its_pieces_die() -> None:
    report = await chaos(Plan(duration=60.0, nodes=16, every=4.0, seed=3))  # 15 s full
    text = report.text()
    assert report.ok, text
    assert len(report.kills) >= 8, text
    assert any("NATS killed" in e for e in report.events), text
    assert any("paused gang leader" in e for e in report.events), text
    assert any("forged node" in e for e in report.events), text
    assert report.counts["actions"] > 0, text
    assert report.checks["NATS refused no service (auth on)"][0], text
    assert report.checks["forged kinds and epochs refused, none applied"][0], text
    assert report.checks["a skewed replica neither steals a lease nor slows a takeover"][0], text
    assert report.checks["a full store is seen (not ready) and, freed, works again by itself"][0], (
        text
    )
