"""A gang bound onto balloon nodes: the actuator deletes the balloons first, then binds;
a balloon it cannot delete fails the action with nothing bound."""

from __future__ import annotations

import msgspec
import pytest

from baton.proto.actions import Binding
from tests.connected.test_actuator import NS, Env, actuator, bind_gang, env, make_pods

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]
__all__ = ["env"]  # the fixture


async def balloons(env: Env, nodes: list[str]) -> list[Binding]:
    held = []
    for node in nodes:
        name = f"balloon-{node}"
        body = {"metadata": {"name": name, "namespace": NS, "labels": {"baton.io/balloon": "true"}},
                "spec": {"nodeName": node, "priority": -10,
                         "containers": [{"name": "main", "image": "pause"}]}}  # fmt: skip
        created = await env.core.create_namespaced_pod(NS, body)
        held.append(Binding(namespace=NS, pod=name, uid=created.metadata.uid, node=node))
    return held


async def test_balloons_are_deleted_then_the_gang_is_bound(env: Env) -> None:
    nodes, pods = env.nodes[:2], ["b-0", "b-1"]
    await make_pods(env, pods)
    held = await balloons(env, nodes)
    action = msgspec.structs.replace(
        bind_gang("g-balloon", list(zip(pods, nodes, strict=True))), evict=tuple(held)
    )
    async with actuator(env):
        await env.publish(action)
        result = await env.result("g-balloon")
    assert result.outcome == "applied", result.error
    assert [await env.pod(b.pod) for b in held] == [None, None]
    assert [await env.node_name(p) for p in pods] == nodes


async def test_a_balloon_that_cannot_be_deleted_fails_the_gang_with_nothing_bound(
    env: Env,
) -> None:
    nodes, pods = env.nodes[:2], ["c-0", "c-1"]
    await make_pods(env, pods)
    held = await balloons(env, nodes)
    wrong = msgspec.structs.replace(held[1], uid="not-its-uid")  # the precondition fails
    action = msgspec.structs.replace(
        bind_gang("g-stuck", list(zip(pods, nodes, strict=True))), evict=(held[0], wrong)
    )
    async with actuator(env):
        await env.publish(action)
        result = await env.result("g-stuck")
    assert result.outcome == "failed" and "nothing bound" in result.error
    assert [await env.node_name(p) for p in pods] == ["", ""]
