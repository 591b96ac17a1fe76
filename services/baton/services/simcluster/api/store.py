"""The object store behind simcluster's API: plain Kubernetes JSON dicts, one RV.

Used in-process by the simulation and by the HTTP server. Objects it returns are
read-only snapshots: every write stores a fresh dict (copy on write), so a reference
held by a caller never changes under it. Edit with :meth:`Store.mutate`, which copies,
applies your function, bumps the resourceVersion and notifies. Single-threaded: call
it from the event loop's thread only.

Every write gets the next resourceVersion (one counter for all resources), goes into
the change ring for watchers (serialized once) and is then passed to listeners in
order, even when a listener writes from inside its callback.
"""

from __future__ import annotations

import builtins
import random
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec

from baton.services.simcluster.api import objects
from baton.services.simcluster.api.history import Change, Predicate, Ring, Watcher
from baton.services.simcluster.api.objects import ApiError, not_found
from baton.services.simcluster.api.resources import resource
from baton.services.simcluster.api.selectors import (
    combine,
    field_equals,
    field_predicate,
    label_predicate,
)

__all__ = ["ApiError", "Listener", "Store"]

Listener = Callable[[str, str, dict[str, Any]], None]
Entry = tuple[dict[str, Any], bytes]  # (object, its JSON encoding)
Objects = list[dict[str, Any]]
Entries = list[Entry]
Keys = list[tuple[str, str]]
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
NODE_FIELD = "spec.nodeName"
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class Store:
    def __init__(
        self,
        *,
        history: int = 100_000,
        clock: Callable[[], float] = time.time,
        seed: int | None = None,
    ) -> None:
        self._rv = 0
        self._objs: dict[str, dict[str, dict[str, Entry]]] = {}  # res -> ns -> name -> entry
        self._sorted: dict[str, Keys] = {}
        # pods by spec.nodeName, as the API server's watch cache indexes them (what each
        # kubelet lists): a field-selected list of one node's pods reads its own few
        self._on_node: dict[str, set[tuple[str, str]]] = {}
        self.ring = Ring(history)
        self._watchers: dict[str, set[Watcher]] = {}
        self._listeners: list[Listener] = []
        self._pending: deque[Change] = deque()
        self._dispatching = False
        self._clock = clock
        self._rng = random.Random(seed)
        for ns in DEFAULT_NAMESPACES:
            self.create("namespaces", {"metadata": {"name": ns}})
        for pc in objects.SYSTEM_PRIORITY_CLASSES:
            self.create("priorityclasses", pc)

    @property
    def rv(self) -> int:
        return self._rv

    def now(self) -> float:
        return self._clock()

    # reads

    def get(self, res: str, namespace: str | None, name: str) -> dict[str, Any]:
        return self._entry(res, namespace, name)[0]

    def get_raw(self, res: str, namespace: str | None, name: str) -> bytes:
        return self._entry(res, namespace, name)[1]

    def _entry(self, res: str, namespace: str | None, name: str) -> Entry:
        entry = self._objs.get(res, {}).get(namespace or "", {}).get(name)
        if entry is None:
            raise not_found(res, name)
        return entry

    def list(
        self,
        res: str,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> tuple[Objects, int]:
        """Matching objects and the resourceVersion they are current at."""
        pred = self.predicate(res, label_selector, field_selector)
        found = self.entries(res, namespace, pred, field=field_selector)
        return [obj for obj, _ in found], self._rv

    def predicate(
        self, res: str, label_selector: str = "", field_selector: str = ""
    ) -> Predicate | None:
        """Compiled selectors; raises SelectorError on a bad one."""
        return combine(
            label_predicate(label_selector), field_predicate(field_selector, resource(res).fields)
        )

    def entries(
        self, res: str, namespace: str | None, pred: Predicate | None = None, *, field: str = ""
    ) -> Entries:
        """Objects of ``res`` (in ``namespace``) that ``pred`` holds for; ``field``, the
        field selector ``pred`` came from, may name a node whose pods are indexed."""
        node = field_equals(field, NODE_FIELD) if res == "pods" else None
        if node is not None:
            keys = sorted(self._on_node.get(node, ()))
            found = (self.lookup(res, k) for k in keys if namespace in (None, k[0]))
            return [e for e in found if e is not None and (pred is None or pred(e[0]))]
        by_ns = self._objs.get(res, {})
        spaces = [by_ns.get(namespace or "", {})] if namespace is not None else by_ns.values()
        if pred is None:
            return [e for space in spaces for e in space.values()]
        return [e for space in spaces for e in space.values() if pred(e[0])]

    def sorted_keys(self, res: str) -> Keys:
        """(namespace, name) of every object of ``res`` in key order (for paging)."""
        keys = self._sorted.get(res)
        if keys is None:
            keys = sorted((ns, n) for ns, space in self._objs.get(res, {}).items() for n in space)
            self._sorted[res] = keys
        return keys

    def counts(self) -> dict[str, int]:
        return {res: sum(map(len, by_ns.values())) for res, by_ns in self._objs.items()}

    def lookup(self, res: str, key: tuple[str, str]) -> Entry | None:
        return self._objs.get(res, {}).get(key[0], {}).get(key[1])

    # writes

    def create(self, res: str, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        r = resource(res)
        meta = dict(obj.get("metadata") or {})
        ns = (meta.get("namespace") or "default") if r.namespaced else ""
        if r.namespaced:
            meta["namespace"] = ns
            if ns not in self._objs.get("namespaces", {}).get("", {}):
                raise not_found("namespaces", ns)
        space = self._objs.setdefault(res, {}).setdefault(ns, {})
        name = meta.get("name") or ""
        if not name and meta.get("generateName"):
            name = objects.generated_name(meta["generateName"], self._rng)
            while name in space:
                name = objects.generated_name(meta["generateName"], self._rng)
        objects.validate_name(r.kind, name)
        if name in space:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{res} "{name}" already exists',
                details={"name": name, "kind": res},
            )
        meta.update(
            name=name,
            uid=str(uuid.UUID(int=self._rng.getrandbits(128), version=4)),
            creationTimestamp=objects.timestamp(self._clock()),
            generation=1,
        )
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(key, None)
        new = {"apiVersion": r.api_version, "kind": r.kind, **obj}
        new.update(apiVersion=r.api_version, kind=r.kind, metadata=meta)
        if res == "pods":
            objects.resolve_priority(new, find=self._priority_class, default=self._default_class())
        objects.apply_defaults(res, new)
        objects.validate(res, new)
        if dry_run:
            dry: dict[str, Any] = _decode(_encode(new))
            dry["metadata"].pop("resourceVersion", None)  # as upstream: never stored, no version
            return dry
        self._sorted.pop(res, None)
        return self._write(res, ns, name, _decode(_encode(new)), "ADDED", None)

    def _priority_class(self, name: str) -> dict[str, Any] | None:
        entry = self._objs.get("priorityclasses", {}).get("", {}).get(name)
        return None if entry is None else entry[0]

    def _default_class(self) -> dict[str, Any] | None:
        classes = self._objs.get("priorityclasses", {}).get("", {}).values()
        defaults = [pc for pc, _ in classes if pc.get("globalDefault")]
        return min(defaults, key=lambda pc: pc.get("value", 0), default=None)

    def replace(self, res: str, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Store ``obj`` in place of the current one; 409 if its resourceVersion is stale."""
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or "" if resource(res).namespaced else ""
        old = self.get(res, ns, meta.get("name") or "")
        sent_rv = meta.get("resourceVersion")
        if sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f"Operation cannot be fulfilled on {res} "
                f'"{meta["name"]}": the object has been modified; please apply '
                "your changes to the latest version and try again",
                details={"name": meta["name"], "kind": res},
            )
        return self._update(res, old, _decode(_encode(obj)), dry_run=dry_run)

    def mutate(
        self,
        res: str,
        namespace: str | None,
        name: str,
        fn: Callable[[dict[str, Any]], None],
        *,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Apply ``fn`` to a private copy of the object and store the result."""
        old_obj, old_raw = self._entry(res, namespace, name)
        new = _decode(old_raw)
        fn(new)
        return self._update(res, old_obj, new, dry_run=dry_run)

    def _update(
        self, res: str, old: dict[str, Any], new: dict[str, Any], *, dry_run: bool = False
    ) -> dict[str, Any]:
        om, nm = old["metadata"], new.setdefault("metadata", {})
        for key in ("name", "namespace", "uid", "creationTimestamp"):
            if key in om:
                nm[key] = om[key]
            else:
                nm.pop(key, None)
        new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
        nm["generation"] = om.get("generation", 1) + (new.get("spec") != old.get("spec"))
        if "deletionTimestamp" in om:
            nm.setdefault("deletionTimestamp", om["deletionTimestamp"])
        if dry_run:  # the object as it would be stored, at the version it replaces
            nm["resourceVersion"] = om["resourceVersion"]
            return new
        return self._write(res, om.get("namespace", ""), om["name"], new, "MODIFIED", old)

    def delete(
        self,
        res: str,
        namespace: str | None,
        name: str,
        *,
        grace_seconds: int | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Delete now, or, for a bound running pod, start graceful termination.

        ``dry_run``: the answer the delete would give; nothing changes.
        """
        obj = self.get(res, namespace, name)
        if res == "pods" and grace_seconds != 0 and _graceful(obj):
            grace = (
                grace_seconds
                if grace_seconds is not None
                else obj["spec"].get("terminationGracePeriodSeconds", 30)
            )
            current = obj["metadata"].get("deletionGracePeriodSeconds")
            if current is not None and current <= grace:
                return obj
            deadline = objects.timestamp(self._clock() + grace)
            return self.mutate(
                res,
                namespace,
                name,
                lambda o: o["metadata"].update(
                    deletionTimestamp=deadline, deletionGracePeriodSeconds=grace
                ),
                dry_run=dry_run,
            )
        if dry_run:
            return obj
        if res == "namespaces":
            for other, by_ns in list(self._objs.items()):
                for member in list(by_ns.get(name, {})):
                    self.delete(other, name, member, grace_seconds=0)
        return self._remove(res, namespace or "", name)

    def _remove(self, res: str, ns: str, name: str) -> dict[str, Any]:
        old = self._objs[res][ns].pop(name)[0]
        self._sorted.pop(res, None)
        if res == "pods":
            self._index(ns, name, old, None)
        gone = {**old, "metadata": {**old["metadata"], "resourceVersion": str(self._rv + 1)}}
        return self._write(res, ns, name, gone, "DELETED", None, keep=False)

    def _write(
        self,
        res: str,
        ns: str,
        name: str,
        obj: dict[str, Any],
        kind: str,
        prev: dict[str, Any] | None,
        *,
        keep: bool = True,
    ) -> dict[str, Any]:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        raw = _encode(obj)
        if keep:
            space = self._objs[res][ns]
            if res == "pods":
                was = space.get(name)
                self._index(ns, name, was[0] if was else None, obj)
            space[name] = (obj, raw)
        change = Change(self._rv, kind, res, ns, obj, raw, prev)
        self.ring.append(change)
        for watcher in self._watchers.get(res, ()):
            watcher.offer(change)
        self._pending.append(change)
        self._dispatch()
        return obj

    def _index(self, ns: str, name: str, old: dict[str, Any] | None, new: dict[str, Any] | None
               ) -> None:  # fmt: skip
        was = (old or {}).get("spec", {}).get("nodeName") or ""
        now = (new or {}).get("spec", {}).get("nodeName") or ""
        if was == now and old is not None and new is not None:
            return
        if old is not None:
            self._on_node.get(was, set()).discard((ns, name))
        if new is not None:
            self._on_node.setdefault(now, set()).add((ns, name))

    # following changes

    def add_listener(self, fn: Listener) -> None:
        """Call ``fn(event_type, res, obj)`` after every change, in resourceVersion order."""
        self._listeners.append(fn)

    def _dispatch(self) -> None:
        if self._dispatching:
            return
        self._dispatching = True
        try:
            while self._pending:
                change = self._pending.popleft()
                for fn in self._listeners:
                    fn(change.type, change.res, change.obj)
        finally:
            self._dispatching = False

    def watch(
        self,
        res: str,
        *,
        namespace: str | None,
        predicate: Predicate | None,
        since: int,
        capacity: int,
    ) -> Watcher:
        """A watcher holding every matching change after ``since`` (Expired if too old)."""
        watcher = Watcher(res=res, namespace=namespace, predicate=predicate, capacity=2**62)
        for change in self.ring.since(since):  # the backlog is not the client's slowness
            if change.res == res:
                watcher.offer(change)
        watcher.capacity = capacity
        watcher.last_rv = max(since, watcher.last_rv)
        self._watchers.setdefault(res, set()).add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        watcher.close()
        self._watchers.get(watcher.res, set()).discard(watcher)

    def watchers(self) -> builtins.list[Watcher]:
        return [w for ws in self._watchers.values() for w in ws]


def _graceful(pod: dict[str, Any]) -> bool:
    """Bound, not yet finished pods terminate gracefully; others go at once."""
    phase = (pod.get("status") or {}).get("phase")
    return bool(pod.get("spec", {}).get("nodeName")) and phase not in ("Succeeded", "Failed")
