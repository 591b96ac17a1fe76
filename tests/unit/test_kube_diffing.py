from __future__ import annotations

import pytest

from baton.libs.kube import diffing
from baton.libs.kube.kinds import NODES, PODS, Change
from baton.proto import k8s

pytestmark = pytest.mark.unit


def pod(name: str, rv: str, uid: str = "") -> k8s.Pod:
    return k8s.Pod(namespace="ns", name=name, uid=uid or f"uid-{name}", resource_version=rv)


def test_first_list_upserts_everything() -> None:
    cache: diffing.Cache = {}
    ops = diffing.relist(cache, [pod("a", "1"), pod("b", "2")], key=PODS.key)
    assert ops == [("upsert", pod("a", "1")), ("upsert", pod("b", "2"))]
    assert set(cache) == {"ns/a", "ns/b"}


def test_relist_emits_deletions_for_vanished_and_upserts_only_changed() -> None:
    cache: diffing.Cache = {"ns/a": pod("a", "1"), "ns/b": pod("b", "2"), "ns/c": pod("c", "3")}
    ops = diffing.relist(cache, [pod("a", "1"), pod("b", "5"), pod("d", "6")], key=PODS.key)
    assert ops == [("delete", pod("c", "3")), ("upsert", pod("b", "5")), ("upsert", pod("d", "6"))]
    assert cache == {"ns/a": pod("a", "1"), "ns/b": pod("b", "5"), "ns/d": pod("d", "6")}


def test_relist_of_a_recreated_object_deletes_the_old_uid_first() -> None:
    cache: diffing.Cache = {"ns/a": pod("a", "1", uid="old")}
    ops = diffing.relist(cache, [pod("a", "9", uid="new")], key=PODS.key)
    assert ops == [("delete", pod("a", "1", uid="old")), ("upsert", pod("a", "9", uid="new"))]


def test_relist_with_nothing_changed_emits_nothing() -> None:
    cache: diffing.Cache = {"ns/a": pod("a", "1")}
    assert diffing.relist(cache, [pod("a", "1")], key=PODS.key) == []


@pytest.mark.parametrize(
    ("before", "change", "operation", "after"),
    [
        ({}, Change(type="ADDED", obj=pod("a", "1")), ("upsert", pod("a", "1")), {"ns/a": "1"}),
        (
            {"ns/a": "1"},
            Change(type="MODIFIED", obj=pod("a", "2")),
            ("upsert", pod("a", "2")),
            {"ns/a": "2"},
        ),
        ({"ns/a": "1"}, Change(type="MODIFIED", obj=pod("a", "1")), None, {"ns/a": "1"}),
        ({"ns/a": "1"}, Change(type="DELETED", obj=pod("a", "3")), ("delete", pod("a", "3")), {}),
        ({}, Change(type="DELETED", obj=pod("a", "3")), None, {}),
    ],
)
def test_apply_watch_change(
    before: dict[str, str],
    change: Change,
    operation: diffing.Operation | None,
    after: dict[str, str],
) -> None:
    cache: diffing.Cache = {k: pod(k.split("/")[1], rv) for k, rv in before.items()}
    assert diffing.apply(cache, change, key=PODS.key) == operation
    assert {k: v.resource_version for k, v in cache.items()} == after


def test_cluster_scoped_keys_are_names() -> None:
    cache: diffing.Cache = {}
    node = k8s.Node(name="gpu-1", uid="n", resource_version="1")
    diffing.relist(cache, [node], key=NODES.key)
    assert list(cache) == ["gpu-1"]
