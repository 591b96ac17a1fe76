"""Replicas on a real nats-server: one leader per service, a hot standby that takes over,
epochs that fence a deposed leader, and actions applied once across restarts."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from prometheus_client import REGISTRY

from baton.libs.bus import Bus
from baton.libs.runner import Route, Runner, action_route
from baton.libs.runner.leasing import Fences, Held, Lease, leases_bucket
from baton.libs.runtime.settings import Base
from baton.proto import subjects
from baton.proto.actions import ActionResult, AnyAction, Cordon, SetLabels, action_subject
from baton.proto.deadletter import DeadLetter
from baton.proto.runner import Started
from baton.services.actuator import core as actuator_core
from baton.services.actuator import main as actuator_main
from baton.services.actuator.calling import Api
from tests.connected.test_runner import SPEC, pod_event
from tests.pipeline import stop, until
from tests.support.actions import take_lease
from tests.support.nats import running_nats
from tests.support.sim import running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(90)]
C = "c1"
TTL = 1.0


@contextlib.asynccontextmanager
async def replica(url: str, name: str) -> AsyncIterator[tuple[Runner[Any], Bus]]:
    bus = await Bus.connect(url, cluster=C, name=name)
    await bus.ensure_streams()
    runner = Runner(SPEC, bus=bus, settings=Base(), stop_grace=1.0,
                    lease=Lease(bus, SPEC.name, ttl=TTL))  # fmt: skip
    task = asyncio.create_task(runner.run(), name=f"replica-{name}")
    try:
        yield runner, bus
    finally:
        await stop(task, within=10.0, what=name)
        await bus.close()


async def test_one_replica_leads_the_other_stands_by_then_takes_over() -> None:
    async with running_nats() as url, replica(url, "a") as (a, bus_a):
        await until(lambda: a.leader, within=10, what="a leads")
        async with replica(url, "b") as (b, _):
            await until(lambda: b.ready, within=10, what="b caught up")
            assert not b.leader
            await bus_a.publish(*pod_event("bad-1", "gpu-1"))
            await until(lambda: "bad-1" in b.state.nodes, within=10, what="b follows a's input")
            # a dies without a word (its connection is cut): b takes over after the TTL.
            await bus_a.nc.close()
            began = time.monotonic()
            await until(lambda: b.leader, within=10, what="b takes over")
            took = time.monotonic() - began
            assert b.lease is not None and a.lease is not None and b.lease.epoch > a.lease.epoch
            assert took < 10 * TTL
            check = await Bus.connect(url, cluster=C, name="check")
            try:
                started = await check.snapshot(subjects.runner(C, "started", "toy"), Started)
                assert started[-1].instance == b.lease.holder.rsplit("/", 1)[0]
                await check.publish(*pod_event("bad-2", "gpu-2"))
                await until(lambda: "bad-2" in b.state.nodes, within=10, what="b decides")
                actions = await _all_actions(check)
            finally:
                await check.close()
            # Both cordons are on the bus once: a published one, b the other.
            assert sorted(a.node for a in actions) == ["gpu-1", "gpu-2"]


async def test_a_leader_that_leads_again_sends_its_actions_again_under_its_new_epoch() -> None:
    """Mirrors the chaos run's other stuck gang: an admission leader sent an annotation
    just as its lease ran out, so it was fenced, and its state kept the decision; when the
    same replica led again, nothing sent it again. Now a takeover sends again the actions
    it sent as leader (the actuator answers ``already`` for those applied)."""
    spec = dataclasses.replace(SPEC, routes=(Route(Cordon, to=action_route, action=True),))
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster=C, name="a")
        await bus.ensure_streams()
        lease = Lease(bus, spec.name, ttl=TTL)
        runner = Runner(spec, bus=bus, settings=Base(), stop_grace=1.0, lease=lease)
        task = asyncio.create_task(runner.run(), name="replica-a")
        try:
            await until(lambda: runner.leader and runner.ready, within=10, what="a leads")
            first = lease.epoch
            await bus.publish(*pod_event("bad-1", "gpu-1"))
            await until(lambda: "bad-1" in runner.state.nodes, within=10, what="a decides")
            lease._lose("paused past its TTL (the test)")
            await until(lambda: runner.leader and lease.epoch > first, within=10,
                        what="a leads again under a new epoch")  # fmt: skip
            actions = await _in_order(bus, "action", AnyAction, 2)  # the stream keeps both
        finally:
            await stop(task, within=10.0, what="replica-a")
            await bus.close()
    said = sorted((a.id, a.epoch) for a in actions)
    assert said == [("cordon-gpu-1", first), ("cordon-gpu-1", lease.epoch)], said


async def _all_actions(bus: Bus) -> list[Any]:
    deadline = time.monotonic() + 10
    while True:
        info = await bus.js.stream_info(subjects.stream_name(C, "actions"))
        if info.state.messages >= 2 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    return await bus.snapshot(subjects.wildcard(C, "action", ">"), AnyAction)


@contextlib.asynccontextmanager
async def deposed(bus: Bus, key: str = "admission") -> AsyncIterator[tuple[Lease, Lease]]:
    """``(old, new)``: ``old`` led, stopped renewing (paused) without giving the lease up,
    and ``new`` took it over with a higher epoch; ``new`` keeps renewing until the end."""
    old = Lease(bus, key, ttl=TTL)
    holding = asyncio.create_task(old.run())
    await until(lambda: old.leader, within=10, what="the old leader")
    holding.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await holding
    new = Lease(bus, key, ttl=TTL)
    taking = asyncio.create_task(new.run())
    try:
        await until(lambda: new.leader and new.epoch > old.epoch, within=10, what="new leader")
        yield old, new
    finally:
        taking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await taking


async def test_actions_of_a_deposed_leader_or_past_their_expiry_are_answered_stale() -> None:
    """An admission leader at epoch E is replaced (epoch E' > E); an action the old one
    sends afterwards is answered stale, as is one whose producer said it expires. One
    claiming epoch 0 or an epoch ahead of the lease's is refused and dead-lettered."""
    async with running_nats() as url, running_sim(nodes=2) as sim:
        bus = await Bus.connect(url, cluster=C, name="test")
        await bus.ensure_streams()
        async with deposed(bus) as (old, new):
            client = await sim.api_client()
            node = sim.cluster.node_names()[0]
            limits = actuator_core.Limits(qps=0, backoff_base=0.05)
            abus = await Bus.connect(url, cluster=C, name="actuator")
            settings = actuator_main.Settings()
            actuator = actuator_main.runner(abus, settings, api=Api(client), limits=limits)
            running = asyncio.create_task(actuator.run())
            try:
                labels = {
                    "deposed": SetLabels(id="l-old", by="admission", at=1.0, epoch=old.epoch,
                                         node=node, labels={"t.baton.io/old": "1"}),
                    "current": SetLabels(id="l-new", by="admission", at=1.0, epoch=new.epoch,
                                         node=node, labels={"t.baton.io/new": "1"}),
                    "expired": SetLabels(id="l-exp", by="admission", at=1.0, expires=2.0,
                                         epoch=new.epoch, node=node,
                                         labels={"t.baton.io/exp": "1"}),
                    "zero": SetLabels(id="l-zero", by="admission", at=1.0, node=node,
                                      labels={"t.baton.io/zero": "1"}),
                    "future": SetLabels(id="l-future", by="admission", at=1.0,
                                        epoch=new.epoch + 1000, node=node,
                                        labels={"t.baton.io/future": "1"}),
                }  # fmt: skip
                dead = bus.consume(subjects.wildcard(C, subjects.DEADLETTER, ">"), type_=DeadLetter)
                for action in labels.values():
                    await bus.publish(action_subject(C, action), action, msg_id=action.id)
                results = await _results(bus, 5)
                letters = [(await asyncio.wait_for(anext(aiter(dead)), 20)).event for _ in range(2)]
                await dead.close()
            finally:
                await stop(running, within=10, what="actuator")
                await abus.close()
                await client.close()
                await bus.close()
        outcome = {r.action_id: (r.outcome, r.error) for r in results}
        assert outcome["l-new"][0] == "applied"
        assert outcome["l-old"][0] == "stale" and "older than its leader's" in outcome["l-old"][1]
        assert outcome["l-exp"][0] == "stale" and "expired" in outcome["l-exp"][1]
        assert outcome["l-zero"] == ("failed", "refused: admission's action carries no lease epoch")
        assert (
            outcome["l-future"][0] == "failed"
            and "is ahead of its lease's" in outcome["l-future"][1]
        )
        assert sorted(letter.reason for letter in letters) == sorted(
            [outcome["l-zero"][1], outcome["l-future"][1]]
        )
        assert {letter.error_class for letter in letters} == {"bad-input"}
        written = sim.store.get("nodes", None, node)["metadata"]["labels"]
        assert "t.baton.io/new" in written
        assert not {
            "t.baton.io/old",
            "t.baton.io/exp",
            "t.baton.io/zero",
            "t.baton.io/future",
        } & set(written)


async def test_a_new_leaders_copy_of_a_fenced_decision_is_applied() -> None:
    """Mirrors the chaos run's stuck gang: the deposed admission leader's annotation (epoch
    E) reaches ACTIONS first and is fenced; the new leader decided the same (the same id,
    epoch E'). Both copies must be stored (the msg id carries the epoch) and the new one
    applied; the fenced answer says so, so a producer does not forget its own copy."""
    async with running_nats() as url, running_sim(nodes=1) as sim:
        bus = await Bus.connect(url, cluster=C, name="test")
        await bus.ensure_streams()
        async with deposed(bus) as (old, new):
            client = await sim.api_client()
            node = sim.cluster.node_names()[0]
            decided = SetLabels(id="admit-1", by="admission", at=1.0, node=node,
                                labels={"t.baton.io/admitted": "1"})  # fmt: skip
            abus = await Bus.connect(url, cluster=C, name="actuator")
            limits = actuator_core.Limits(qps=0, backoff_base=0.05)
            actuator = actuator_main.runner(abus, actuator_main.Settings(), api=Api(client),
                                            limits=limits)  # fmt: skip
            try:
                for epoch in (old.epoch, new.epoch):  # the deposed leader's copy first
                    copy = msgspec.structs.replace(decided, epoch=epoch)
                    subject, msg_id = action_route(C, copy)
                    await bus.publish(subject, copy, msg_id=msg_id)
                running = asyncio.create_task(actuator.run())
                answers = await _in_order(bus, "result", ActionResult, 2)
                await stop(running, within=10, what="actuator")
            finally:
                await abus.close()
                await client.close()
                await bus.close()
        said = [(r.action_id, r.outcome, r.fenced) for r in answers]
        assert said == [("admit-1", "stale", True), ("admit-1", "applied", False)], said
        written = sim.store.get("nodes", None, node)["metadata"]["labels"]
        assert written.get("t.baton.io/admitted") == "1"


async def _in_order(bus: Bus, domain: str, type_: Any, count: int) -> list[Any]:
    """The first ``count`` messages under ``baton.<c>.<domain>.>``, in stream order (two
    copies of one action, or two answers to one id, both kept)."""
    got: list[Any] = []
    async with bus.consume(subjects.wildcard(C, domain, ">"), type_=type_) as sub:
        async with asyncio.timeout(20):
            async for msg in sub:
                got.append(msg.event)
                await msg.ack()
                if len(got) >= count:
                    break
    return got


async def _results(bus: Bus, count: int) -> list[ActionResult]:
    got: dict[str, ActionResult] = {}
    async with bus.consume(subjects.wildcard(C, "result", ">"), type_=ActionResult) as sub:
        async with asyncio.timeout(20):
            async for msg in sub:
                got[msg.event.action_id] = msg.event
                await msg.ack()
                if len(got) >= count:
                    break
    return list(got.values())


async def test_an_action_applied_before_a_restart_is_not_applied_again() -> None:
    """The same action delivered again to a fresh actuator (its in-memory LRU gone) is
    answered ``already`` from the done-record, without another write to the API."""
    async with running_nats() as url, running_sim(nodes=1) as sim:
        bus = await Bus.connect(url, cluster=C, name="test")
        await bus.ensure_streams()
        client = await sim.api_client()
        node = sim.cluster.node_names()[0]
        epoch = await take_lease(bus, "admission")
        action = SetLabels(id="once-1", by="admission", at=1.0, epoch=epoch, node=node,
                           labels={"t.baton.io/x": "1"})  # fmt: skip
        limits = actuator_core.Limits(qps=0, backoff_base=0.05)
        already = ("action.label.v1", "already")
        try:
            for run, msg_id in enumerate(("first", "second")):  # stored twice: two deliveries
                before = (patches(sim), answered(*already))
                abus = await Bus.connect(url, cluster=C, name=f"actuator-{run}")
                actuator = actuator_main.runner(
                    abus, actuator_main.Settings(), api=Api(client), limits=limits
                )
                running = asyncio.create_task(actuator.run())
                await bus.publish(action_subject(C, action), action, msg_id=msg_id)
                await until(lambda a=actuator: a.state.seen, within=20, what="the action handled")
                await stop(running, within=10, what="actuator")
                await abus.close()
                after = (patches(sim), answered(*already))
                if run == 0:
                    assert after[0] == before[0] + 1  # applied: one patch
                else:
                    assert after == (before[0], before[1] + 1)  # already: no write
            (result,) = await _results(bus, 1)  # one result per action id (msg id dedup)
            assert result.outcome == "applied"
        finally:
            await client.close()
            await bus.close()


def answered(action_type: str, outcome: str) -> float:
    value = REGISTRY.get_sample_value(
        "baton_actuator_actions_total", {"type": action_type, "outcome": outcome}
    )
    return value or 0.0


def patches(sim: Any) -> float:
    """Node patches simcluster has answered 200 to."""
    labels = {"verb": "PATCH", "resource": "nodes", "subresource": "", "code": "200"}
    return float(sim.metric("apiserver_request_total", **labels))


async def test_fences_read_every_leader_epoch_from_the_bucket() -> None:
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster=C, name="test")
        await bus.ensure_streams()
        first, second = Lease(bus, "balloon", ttl=TTL), Lease(bus, "balloon", ttl=TTL)
        holding = asyncio.create_task(first.run())
        await until(lambda: first.leader, within=10, what="a first leader")
        holding.cancel()
        await asyncio.gather(holding, return_exceptions=True)
        await first.release()
        holding = asyncio.create_task(second.run())
        await until(lambda: second.leader, within=10, what="a second leader")
        fences = Fences()
        following = asyncio.create_task(fences.follow(bus))
        try:
            await until(lambda: fences.epochs.get("balloon") == second.epoch, within=10,
                        what="the epoch read")  # fmt: skip
            assert second.epoch > first.epoch
            assert fences.stale("balloon", second.epoch) == ""
            assert "older than its leader's" in fences.stale("balloon", first.epoch)
            assert fences.stale("balloon", 0) == ""  # no lease claimed: not fenced
            assert fences.stale("gang", 5) == ""  # a service with no leader yet
            assert (await bus.js.stream_info("KV_BATON_C1_LEASES")).config.name
        finally:
            for task in (holding, following):
                task.cancel()
            await asyncio.gather(holding, following, return_exceptions=True)
            await bus.close()


async def test_a_wall_clock_ahead_neither_steals_a_lease_nor_delays_a_takeover() -> None:
    """A replica whose clock runs 8 TTLs ahead: it stands by while the leader renews,
    and once it leads and dies, the next standby takes over within the TTL (plus its
    reads). With renewal times compared, it took the lease at once, and its death kept
    the lease 8 TTLs past its last renewal."""
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster=C, name="test")
        await bus.ensure_streams()
        honest = Lease(bus, "gang", ttl=TTL)
        ahead = Lease(bus, "gang", ttl=TTL, clock=lambda: time.time() + 8 * TTL)
        later = Lease(bus, "gang", ttl=TTL)
        tasks = [asyncio.create_task(honest.run())]
        try:
            await until(lambda: honest.leader, within=10, what="the honest leader")
            tasks.append(asyncio.create_task(ahead.run()))
            await _renewals(bus, "gang", by=honest.holder, count=3 * 3,
                            what="the leader renewing for 3 TTLs beside the skewed")  # fmt: skip
            assert honest.leader and not ahead.leader
            tasks[0].cancel()  # the honest leader stops renewing, without giving the lease up
            await until(lambda: ahead.leader, within=10, what="the skewed standby takes over")
            tasks.append(asyncio.create_task(later.run()))
            await _renewals(
                bus, "gang", by=ahead.holder, count=1, what="the skewed leader renewing"
            )
            tasks[1].cancel()  # the skewed leader dies
            await until(lambda: later.leader, within=3 * TTL,
                        what="a takeover within the TTL after the skewed leader died")  # fmt: skip
            assert later.epoch > ahead.epoch > honest.epoch
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await bus.close()


async def _renewals(bus: Bus, key: str, *, by: str, count: int, what: str) -> None:
    """Wait until ``by`` has written the lease ``key`` ``count`` times from now."""
    watcher = await (await leases_bucket(bus)).watch(key, include_history=False)
    seen = -1  # the first entry is the key's current value
    try:
        async with asyncio.timeout(10):
            async for entry in watcher:
                held = (
                    msgspec.json.decode(entry.value, type=Held) if entry and entry.value else None
                )
                seen += held is not None and held.holder == by
                if seen >= count:
                    return
    except TimeoutError:
        raise AssertionError(f"{what}: {seen} of {count} renewals in 10 s") from None
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]
