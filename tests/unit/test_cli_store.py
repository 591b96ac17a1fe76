"""``baton up``'s JetStream store: room to start, and a disabled JetStream restarted."""

from __future__ import annotations

from pathlib import Path

import pytest

from baton.libs.bus.streams import history_bytes
from baton.services.cli.store import DOWN_S, ROOM_BYTES, Disabled, store_problem

pytestmark = pytest.mark.unit
GiB = 1024**3


def test_history_is_sized_from_the_cluster() -> None:
    assert history_bytes(0) == 10 * GiB  # not known: as much as ever
    assert history_bytes(64) == 256 * 1024**2  # the floor
    assert history_bytes(3000) == 3000 * (10 * GiB // 7500)
    assert history_bytes(100_000) == 10 * GiB  # the ceiling


def test_a_store_without_room_for_the_reservations_is_named_with_the_space_needed(
    tmp_path: Path,
) -> None:
    store = tmp_path / "js"
    assert store_problem(store, nodes=64, free=1 * GiB) == ""
    said = store_problem(store, nodes=7500, free=2 * GiB)
    assert f"the JetStream store {store} has 2.00 GiB free" in said
    assert "reserve 10.00 GiB for 7500 nodes" in said and "needs 13.33 GiB free" in said


def test_nats_is_restarted_once_jetstream_stayed_disabled_and_the_store_has_room() -> None:
    disabled = Disabled(Path("/store"))
    room, full = ROOM_BYTES, ROOM_BYTES - 1
    assert not disabled.verdict(answers=False, connected=True, now=0.0, free=room)
    assert not disabled.verdict(answers=False, connected=True, now=DOWN_S - 1, free=room)
    assert not disabled.verdict(answers=False, connected=True, now=DOWN_S, free=full)  # no room
    assert disabled.verdict(answers=False, connected=True, now=DOWN_S + 1, free=room)
    assert not disabled.verdict(answers=False, connected=True, now=DOWN_S + 2, free=room)
    # answering again, or NATS away altogether (the supervisor's case), starts afresh
    assert not disabled.verdict(answers=True, connected=True, now=100.0, free=room)
    assert not disabled.verdict(answers=False, connected=False, now=200.0, free=room)
    assert disabled.down_since is None
