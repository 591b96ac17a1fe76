"""The in-process Store: one resourceVersion, snapshots, ordered notifications."""

from __future__ import annotations

import random
from typing import Any

import pytest

from baton.services.simcluster.api.history import Expired
from baton.services.simcluster.api.store import ApiError, Store

pytestmark = pytest.mark.unit
SPEC = {"containers": [{"name": "main"}]}


def pod(name: str, ns: str = "default", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {**SPEC, **spec}}


def test_every_write_takes_the_next_resource_version() -> None:
    store = Store(clock=lambda: 0.0, seed=1)
    start = store.rv
    a = store.create("pods", pod("a"))
    n = store.create("nodes", {"metadata": {"name": "n"}})
    b = store.mutate("pods", "default", "a", lambda p: p["spec"].update(nodeName="n"))
    assert [int(o["metadata"]["resourceVersion"]) for o in (a, n, b)] == [
        start + 1,
        start + 2,
        start + 3,
    ]
    assert b["metadata"]["generation"] == 2 and a["metadata"]["uid"] == b["metadata"]["uid"]
    assert a["metadata"]["creationTimestamp"] == "1970-01-01T00:00:00Z"


def test_returned_objects_are_snapshots() -> None:
    store = Store()
    before = store.create("pods", pod("a"))
    store.mutate("pods", "default", "a", lambda p: p["metadata"].update(labels={"x": "1"}))
    assert "labels" not in before["metadata"]
    assert store.get("pods", "default", "a")["metadata"]["labels"] == {"x": "1"}


def test_replace_with_stale_resource_version_conflicts() -> None:
    store = Store()
    obj = store.create("nodes", {"metadata": {"name": "n"}})
    store.replace("nodes", {**obj, "spec": {"unschedulable": True}})
    with pytest.raises(ApiError) as err:
        store.replace("nodes", {**obj, "spec": {}})
    assert (err.value.code, err.value.reason) == (409, "Conflict")


def test_a_secret_is_kept_as_sent_with_the_api_servers_default_type() -> None:
    """Secrets are kept, not run (docs/simcluster.md): docs/security.md's
    ``kubectl create secret generic`` sends no type; the API server makes it Opaque."""
    store = Store()
    store.create("namespaces", {"metadata": {"name": "baton-system"}})
    data = {"auth.conf": "YXV0aA=="}
    made = store.create("secrets", {"metadata": {"name": "nats-auth", "namespace": "baton-system"},
                                    "data": data})  # fmt: skip
    tls = store.create("secrets", {"metadata": {"name": "t", "namespace": "baton-system"},
                                   "type": "kubernetes.io/tls", "data": {}})  # fmt: skip
    assert (made["type"], made["data"]) == ("Opaque", data)
    assert tls["type"] == "kubernetes.io/tls"
    assert store.get("secrets", "baton-system", "nats-auth")["data"] == data


def test_create_checks_namespace_name_and_duplicates() -> None:
    store = Store()
    for bad, code in (
        (pod("a", ns="nope"), 404),
        (pod("Bad"), 422),
        ({"metadata": {"name": "x"}, "spec": {}}, 422),
    ):
        with pytest.raises(ApiError) as err:
            store.create("pods", bad)
        assert err.value.code == code
    store.create("pods", pod("a"))
    with pytest.raises(ApiError) as dup:
        store.create("pods", pod("a"))
    assert dup.value.reason == "AlreadyExists"


def test_listeners_see_changes_in_order_even_when_they_write() -> None:
    store = Store()
    seen: list[tuple[str, str, str]] = []

    def bind_on_add(kind: str, res: str, obj: dict[str, Any]) -> None:
        seen.append((kind, res, obj["metadata"]["resourceVersion"]))
        if kind == "ADDED" and res == "pods":
            store.mutate(
                "pods", "default", obj["metadata"]["name"], lambda p: p["spec"].update(nodeName="n")
            )

    store.add_listener(bind_on_add)
    store.add_listener(lambda k, r, o: seen.append((k, r, o["metadata"]["resourceVersion"])))
    store.create("pods", pod("a"))
    rvs = [int(rv) for _, _, rv in seen]
    assert rvs == sorted(rvs) and [k for k, _, _ in seen] == ["ADDED"] * 2 + ["MODIFIED"] * 2


def test_bound_pods_terminate_gracefully_unbound_go_at_once() -> None:
    store = Store()
    store.create("pods", pod("bound", nodeName="n"))
    store.create("pods", pod("loose"))
    store.delete("pods", "default", "loose")
    assert store.list("pods")[0][0]["metadata"]["name"] == "bound"
    terminating = store.delete("pods", "default", "bound", grace_seconds=10)
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 10
    assert (
        store.delete("pods", "default", "bound")["metadata"]["resourceVersion"]
        == terminating["metadata"]["resourceVersion"]
    )  # a longer grace changes nothing
    gone = store.delete("pods", "default", "bound", grace_seconds=0)
    assert int(gone["metadata"]["resourceVersion"]) == store.rv and store.list("pods")[0] == []


def test_deleting_a_namespace_deletes_its_objects() -> None:
    store = Store()
    store.create("namespaces", {"metadata": {"name": "team-a"}})
    store.create("pods", pod("a", ns="team-a", nodeName="n"))
    store.delete("namespaces", None, "team-a")
    assert store.list("pods")[0] == []
    with pytest.raises(ApiError):
        store.get("namespaces", None, "team-a")


def test_watch_from_before_the_ring_is_expired() -> None:
    store = Store(history=3)
    start = store.rv
    for i in range(5):
        store.create("nodes", {"metadata": {"name": f"n{i}"}})
    with pytest.raises(Expired):
        store.watch("nodes", namespace=None, predicate=None, since=start, capacity=10)
    watcher = store.watch("nodes", namespace=None, predicate=None, since=store.rv - 2, capacity=10)
    assert watcher.drain().count(b"\n") == 2
    store.unwatch(watcher)


def test_pods_listed_by_node_from_the_index_are_those_a_scan_finds() -> None:
    """``spec.nodeName=X`` is answered from an index kept on every write (create, bind,
    move, graceful and immediate delete, a namespace deleted): always what a scan finds."""
    rng = random.Random(7)
    store = Store(clock=lambda: 0.0, seed=1)
    store.create("namespaces", {"metadata": {"name": "team"}})
    nodes = ["n0", "n1", "n2", ""]
    for i in range(300):
        name, ns = f"p{rng.randrange(40)}", rng.choice(["default", "team"])
        exists = name in {p["metadata"]["name"] for p in store.list("pods", namespace=ns)[0]}
        op = rng.random()
        if not exists:
            node = rng.choice(nodes)
            store.create("pods", pod(name, ns, **({"nodeName": node} if node else {})))
        elif op < 0.4:
            store.mutate("pods", ns, name, lambda p: p["spec"].update(nodeName=rng.choice(nodes)))
        else:
            store.delete("pods", ns, name, grace_seconds=rng.choice([0, None]))
        if i == 250:
            store.delete("namespaces", None, "team")
            store.create("namespaces", {"metadata": {"name": "team"}})
    for node in nodes[:3]:
        for ns in (None, "default", "team"):
            for extra in ("", ",metadata.namespace!=team"):
                selector = f"spec.nodeName={node}{extra}"
                every = store.list("pods", namespace=ns)[0]
                scan = [p for p in every if p["spec"].get("nodeName") == node
                        and (not extra or p["metadata"]["namespace"] != "team")]  # fmt: skip
                found = store.list("pods", namespace=ns, field_selector=selector)[0]
                key = lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])  # noqa: E731
                assert sorted(map(key, found)) == sorted(map(key, scan)), selector
    indexed = sum(len(keys) for keys in store._on_node.values())
    assert indexed == len(store.list("pods")[0])  # nothing deleted is kept in it
