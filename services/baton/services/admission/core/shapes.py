"""Pods no node could ever take: requests beyond every node's allocatable.

The node shapes are the cluster view the bridge feeds (every known node, ready or
not: a node that is down now may come back) and the node shape of each pool the
autoscaler may grow (Cluster API capacity annotations). A pod bigger than all of
them would hold its team's quota forever, so the webhook refuses it with the node
that came closest.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from baton.services.admission.core.objects import KPod
from baton.services.admission.core.state import State

BYTES = ("memory", "ephemeral-storage")  # counted in bytes, shown in Gi


def requests(pod: KPod) -> dict[str, int]:
    """The pod's effective requests (a limit alone counts as the request), above zero."""
    names = {
        name
        for c in (*pod.spec.containers, *pod.spec.init_containers)
        for name in (*(c.resources.requests or {}), *(c.resources.limits or {}))
    }
    asked = {name: pod.gpus(name) for name in sorted(names)}
    return {name: n for name, n in asked.items() if n > 0}


def shapes(state: State) -> Iterator[tuple[str, dict[str, int]]]:
    """(what to call it, allocatable) of every node shape the cluster has or may grow;
    lazily, since the first that fits ends the search (a homogeneous cluster: one node);
    none when an autoscaled pool's shape is unknown (``State.unknown_pool``)."""
    if state.pools and state.unknown_pool():
        return
    for name, view in state.nodes.items():
        yield f"node {name}", view.node.allocatable
    for key, md in state.pools.items():
        if md.capacity:
            yield f"a new node of pool {key}", dict(md.capacity)


def never_fits(asked: dict[str, int], known: Iterable[tuple[str, dict[str, int]]]) -> str | None:
    """Why no known node shape takes ``asked``, naming the closest (fewest resources
    short, then the most of what is asked); None when one does, or none is known."""
    best: tuple[tuple[object, ...], str, dict[str, int], dict[str, int]] | None = None
    for name, allocatable in known:
        short = {r: n for r, n in asked.items() if allocatable.get(r, 0) < n}
        if not short:
            return None
        rank = (len(short), tuple(-allocatable.get(r, 0) for r in sorted(asked)), name)
        if best is None or rank < best[0]:
            best = (rank, name, allocatable, short)
    if best is None:
        return None  # no node seen yet: nothing to compare with
    _, name, allocatable, short = best
    has = ", ".join(f"{_number(r, allocatable.get(r, 0))} of the {_amount(r, n)} asked"
                    for r, n in sorted(short.items()))  # fmt: skip
    return (
        f"asks {_text(asked)}, more than any node has: the largest it could use, {name}, "
        f"has {has}; ask for less or split the work over more pods"
    )


def _number(resource: str, n: int) -> str:
    if resource == "cpu":
        return f"{n}m"
    return f"{n / 2**30:g}Gi" if resource in BYTES else str(n)


def _amount(resource: str, n: int) -> str:
    return f"{_number(resource, n)} {resource}"


def _text(asked: dict[str, int]) -> str:
    return ", ".join(_amount(r, n) for r, n in sorted(asked.items()))
