"""The reflector's cache, kept by pure functions: watch changes and relists -> object events.

The cache maps an object's key to the last state seen. A relist (after 410 Gone,
or on start, seeded with what the bus already holds) is diffed against it: objects
that vanished meanwhile become deletions carrying their last known state, and only
objects whose resourceVersion changed become upserts. The functions update the
cache in place (it holds 100k pods) and return the resulting operations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from baton.libs.kube.kinds import Change, Obj
from baton.proto import k8s

Cache = dict[str, Obj]
Operation = tuple[k8s.Op, Obj]
KeyFn = Callable[[Obj], str]


def relist(cache: Cache, listed: Iterable[Obj], *, key: KeyFn) -> list[Operation]:
    """Replace ``cache`` with ``listed``; return deletions for what vanished, then upserts.

    An object recreated under the same name (new uid) is reported as a deletion of
    the old one followed by an upsert of the new one.
    """
    fresh: Cache = {}
    upserts: list[Operation] = []
    deletes: list[Operation] = []
    for obj in listed:
        k = key(obj)
        fresh[k] = obj
        old = cache.get(k)
        if old is None or old.resource_version != obj.resource_version:
            if old is not None and old.uid != obj.uid:
                deletes.append(("delete", old))
            upserts.append(("upsert", obj))
    deletes.extend(("delete", old) for k, old in cache.items() if k not in fresh)
    cache.clear()
    cache.update(fresh)
    return deletes + upserts


def apply(cache: Cache, change: Change, *, key: KeyFn) -> Operation | None:
    """Fold one watch change into ``cache``; None when it changes nothing we published."""
    k = key(change.obj)
    old = cache.get(k)
    if change.type == "DELETED":
        if old is None:
            return None
        del cache[k]
        return ("delete", change.obj)
    if old is not None and old.resource_version == change.obj.resource_version:
        return None
    cache[k] = change.obj
    return ("upsert", change.obj)
