"""What the simulated workload controllers (``jobs``, ``jobsets``, ``mpijobs``) share.

Each controller follows the store (a listener, like the kubelets) and keeps a queue of
the objects to reconcile: a change to an object, or to anything it owns (found through
the ``ownerReferences`` entry with ``controller: true``), queues the owner, and is kept
in an index by owner, as a real controller's informer keeps one: a reconcile reads what
its object owns without listing the namespace (at 7,500 nodes the LLM mix leaves tens of
thousands of finished pods in a team's namespace). ``workers`` tasks per controller take
objects off the queue in order, as a real controller's workers take keys off its work
queue: an object is never reconciled by two workers at once (one queued again while it
is being reconciled waits for that reconcile to end), but different objects are, so one
whose pods wait on a slow webhook does not hold the others. Objects are created through
the API server's admission hooks (``create``), as a real controller's requests are, so
Baton's webhook sees a controller's pods as it sees a user's. A reconcile that hits an
API error is retried after ``RETRY_S`` simulated seconds; one whose spec the real API
server would have refused (objects the simulation stores in-process are not decoded) is
logged and left alone.
Owned objects of a deleted owner are deleted, as the garbage collector does with
background propagation.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from baton.services.simcluster.api.store import ApiError, Store
from baton.services.simcluster.clock import Clock, timestamp

log = structlog.get_logger("simcluster.controllers")
Obj = dict[str, Any]
Create = Callable[[str, Obj], Awaitable[Obj]]  # (store key, object) -> the object created
Key = tuple[str, str]  # (namespace, name)
Child = tuple[str, str, str]  # (store key, namespace, name) of an owned object
RETRY_S = 1.0


class Controller:
    """Reconciles objects of ``resource`` (a store key) whose ``kind`` owns others."""

    resource = ""
    kind = ""
    name = ""  # its work queue's name (``workqueue_depth{name}``), as upstream names it
    workers = 1  # objects reconciled at once (upstream: ``--concurrent-*-syncs``)

    def __init__(self, store: Store, *, clock: Clock, create: Create) -> None:
        self.store = store
        self.clock = clock
        self.create = create
        self._queue: dict[Key, None] = {}  # an ordered set
        self._busy: set[Key] = set()  # being reconciled now
        self._children: dict[str, dict[Child, None]] = {}  # owner uid -> what it controls
        self._owner: dict[Child, str] = {}  # an owned object -> its controller's uid
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # following the store

    def on_change(self, event: str, res: str, obj: Obj) -> None:
        meta = obj["metadata"]
        namespace = meta.get("namespace", "")
        if res == self.resource:
            self.queue(namespace, meta["name"])
            if event == "DELETED":
                self.collect(namespace, meta.get("uid", ""))
                self.forget(meta.get("uid", ""))
            return
        self._index(event, res, obj)
        if owner := controller_of(obj, self.kind):
            self.owned_changed(event, res, obj)
            self.queue(namespace, owner)

    def _index(self, event: str, res: str, obj: Obj) -> None:
        """Keep ``obj`` under the owner of this kind that controls it now, if any."""
        meta = obj["metadata"]
        child = (res, meta.get("namespace", ""), meta["name"])
        mine = event != "DELETED" and bool(controller_of(obj, self.kind))
        uid = controller_uid(obj) if mine else ""
        before = self._owner.pop(child, "")
        if before and before != uid:
            siblings = self._children[before]
            del siblings[child]
            if not siblings:
                del self._children[before]
        if uid:
            self._owner[child] = uid
            self._children.setdefault(uid, {})[child] = None

    def owned_changed(self, event: str, res: str, obj: Obj) -> None:
        """A controller may remember something about what it owns (a pod that went)."""

    def forget(self, uid: str) -> None:
        """The owner ``uid`` was deleted: drop what was remembered of it."""

    def queue(self, namespace: str, name: str) -> None:
        self._queue[namespace, name] = None
        self._wake.set()

    @property
    def depth(self) -> int:
        """Objects waiting to be reconciled."""
        return len(self._queue)

    # reconciling

    def start(self) -> None:
        for res in self.collects:  # what the store held before this controller followed it
            for obj, _ in self.store.entries(res, None):
                self._index("ADDED", res, obj)
        self._tasks = [
            asyncio.create_task(self._run(), name=f"simcluster-{self.resource}-{i}")
            for i in range(self.workers)
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _next(self) -> Key | None:
        """The first queued object no worker is reconciling, off the queue."""
        key = next((k for k in self._queue if k not in self._busy), None)
        if key is not None:
            del self._queue[key]
        return key

    async def _run(self) -> None:
        while True:
            key = self._next()
            if key is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            self._busy.add(key)
            try:
                await self._reconcile(key)
            finally:
                self._busy.discard(key)
                if key in self._queue:  # queued again meanwhile: a waiting worker may take it
                    self._wake.set()

    async def _reconcile(self, key: Key) -> None:
        try:
            obj = self.store.get(self.resource, key[0], key[1])
        except ApiError:
            return  # gone: its owned objects were collected
        try:
            await self.reconcile(obj)
        except ApiError as exc:
            log.info("reconcile retried", kind=self.kind, key="/".join(key), error=str(exc))
            self.clock.call_later(RETRY_S, self.queue, *key)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # A spec the real API server's validation would have refused: the
            # object is left alone, the controller goes on with the others.
            log.warning("object not reconciled: invalid spec", kind=self.kind,
                        key="/".join(key), error=repr(exc))  # fmt: skip

    async def reconcile(self, obj: Obj) -> None:
        raise NotImplementedError

    # helpers

    def owned(self, res: str, namespace: str, uid: str) -> list[Obj]:
        """The objects of ``res`` in ``namespace`` whose controller is ``uid`` (from the
        index: no list of the namespace), in the order they were created."""
        found = (
            self.store.lookup(res, (ns, name))
            for kind, ns, name in self._children.get(uid, ())
            if kind == res and ns == namespace
        )
        # (an object orphaned since is not routed here: its controller is checked again)
        return [e[0] for e in found if e is not None and controller_uid(e[0]) == uid]

    def collect(self, namespace: str, uid: str) -> None:
        """Delete what the deleted owner ``uid`` controlled (background propagation)."""
        for res in self.collects:
            for obj in self.owned(res, namespace, uid):
                self.delete(res, obj)

    # what this kind owns: indexed from the store at start, deleted with its owner
    collects: tuple[str, ...] = ()

    def delete(self, res: str, obj: Obj) -> None:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            return
        with contextlib.suppress(ApiError):
            self.store.delete(res, meta.get("namespace"), meta["name"])

    def write_status(self, obj: Obj, status: Obj) -> None:
        """Replace ``obj``'s status when it differs (no write, no event otherwise)."""
        if (obj.get("status") or {}) == status:
            return
        meta = obj["metadata"]

        def put(o: Obj) -> None:
            o["status"] = status

        self.store.mutate(self.resource, meta.get("namespace"), meta["name"], put)


def route(controllers: Sequence[Controller], event: str, res: str, obj: Obj) -> None:
    """A store change to the controller of its kind and, when the object has an owner,
    to every controller (most changes are pods of no owner: they cost one lookup)."""
    owned = bool(obj["metadata"].get("ownerReferences"))
    for controller in controllers:
        if owned or res == controller.resource:
            controller.on_change(event, res, obj)


def owner_reference(obj: Obj) -> Obj:
    """The ``ownerReferences`` entry of an object ``obj`` controls."""
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def _controller_ref(obj: Obj) -> Obj | None:
    refs = obj["metadata"].get("ownerReferences") or ()
    return next((r for r in refs if r.get("controller")), None)


def controller_of(obj: Obj, kind: str) -> str:
    """The name of ``obj``'s controller when it is a ``kind``, else ""."""
    ref = _controller_ref(obj)
    return ref.get("name", "") if ref is not None and ref.get("kind") == kind else ""


def controller_uid(obj: Obj) -> str:
    ref = _controller_ref(obj)
    return ref.get("uid", "") if ref is not None else ""


def condition(status: Obj, kind: str) -> Obj | None:
    return next((c for c in status.get("conditions") or () if c.get("type") == kind), None)


def is_true(status: Obj, kind: str) -> bool:
    found = condition(status, kind)
    return found is not None and found.get("status") == "True"


def set_condition(status: Obj, kind: str, value: str, reason: str, message: str) -> None:
    """Add or update condition ``kind``; its transition time moves only when its value does."""
    conditions = status.setdefault("conditions", [])
    found = condition(status, kind)
    now = timestamp()
    if found is None:
        conditions.append({"type": kind, "status": value, "reason": reason, "message": message,
                           "lastProbeTime": now, "lastTransitionTime": now})  # fmt: skip
        return
    if found["status"] != value:
        found["lastTransitionTime"] = now
    found.update(status=value, reason=reason, message=message)
