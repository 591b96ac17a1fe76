"""The search for one pod's devices on one node: every claim's requests and constraints.

Devices are tried in slice order, slices in name order, with backtracking; a value fixed
by an earlier pick (a ``matchAttribute`` constraint) narrows later picks to the devices
that have it. ``Devices.allocate`` builds a search from what it keeps.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field

from baton.libs.view.counters import Budget, Cost
from baton.libs.view.selectors import SUPPORTED, Selector, SelectorError, compile_selector
from baton.proto.dra import (
    AttributeValue,
    Device,
    DeviceClass,
    DeviceRequest,
    DeviceResult,
    ResourceClaim,
)

MAX_STEPS = 100_000  # picks one allocation may try before it gives up

DeviceId = tuple[str, str, str]  # (driver, pool, device): unique in the cluster
Key = tuple[type, AttributeValue]  # an attribute's value, its type apart (True is not 1)
Buckets = dict[Key, list[int]]  # value -> positions of the devices that have it


@dataclass(frozen=True, slots=True)
class NodeDevice:
    """One device a driver publishes on a node."""

    id: DeviceId
    device: Device

    @property
    def driver(self) -> str:
        return self.id[0]


def key_of(value: AttributeValue | None) -> Key | None:
    return None if value is None else (type(value), value)


@dataclass(slots=True)
class _Want:
    """One request to meet: ``count`` devices out of ``candidates`` (positions in the
    node's devices, ascending); per constraint of it, the candidates by value."""

    claim: ResourceClaim
    request: DeviceRequest
    kind: tuple[str, ...]  # its class and selectors: wants of one kind draw on one set
    count: int
    candidates: list[int]
    constraints: list[int]
    buckets: list[Buckets]


@dataclass(slots=True)
class Search:
    node: str
    devices: tuple[NodeDevice, ...]
    taken: dict[DeviceId, str]
    # shared counters (partitionable devices): what is left, what each device consumes
    budget: Budget | None = None
    costs: list[Cost] = field(default_factory=list)  # by position; empty: none consume
    wants: list[_Want] = field(default_factory=list)
    attributes: list[str] = field(default_factory=list)  # per constraint
    about: list[str] = field(default_factory=list)  # per constraint: for reasons
    matching: dict[tuple[str, ...], list[int]] = field(default_factory=dict)  # by kind
    free: dict[tuple[str, ...], list[int]] = field(default_factory=dict)  # by kind
    splits: dict[tuple[tuple[int, ...], str], tuple[list[int], Buckets]] = field(
        default_factory=dict
    )

    def add(self, claim: ResourceClaim, classes: dict[str, DeviceClass]) -> str:
        """Add the claim's requests and constraints; why it cannot be met ("" if it may)."""
        first = len(self.wants)
        for r in claim.requests:
            if (cls := classes.get(r.device_class)) is None:
                where = f"request {r.name!r} of ResourceClaim {claim.key}"
                if not r.device_class:
                    return f"{where}: Baton reads only requests of one DeviceClass (`exactly`)"
                return f"{where}: DeviceClass {r.device_class!r} does not exist"
            kind = (cls.name, *cls.selectors, "", *r.selectors)
            if kind not in self.free and (why := self._matching(kind, cls, r, claim)):
                return why
            matching, free = self.matching[kind], self.free[kind]
            if len(free) < r.count or (r.count == 0 and (len(free) < len(matching) or not free)):
                what = f"DeviceClass {cls.name}" + (" meeting its selectors" * bool(r.selectors))
                return (
                    f"request {r.name!r} of ResourceClaim {claim.key} wants "
                    f"{f'{r.count} devices' if r.count else 'all devices'} of {what}: "
                    f"{self.node} has {self._has(kind)}"
                )
            self.wants.append(_Want(claim, r, kind, r.count or len(free), free, [], []))
        return self._constrain(claim, self.wants[first:])

    def _has(self, kind: tuple[str, ...]) -> str:
        """How many devices of ``kind`` the node has, how many free, who has the others."""
        matching = self.matching[kind]
        busy = [self.devices[i].id for i in matching if self.devices[i].id in self.taken]
        return f"{len(matching) or 'none'}" + (
            f", {len(matching) - len(busy)} free ({len(busy)} taken: {self._who(busy)})"
            if busy
            else f", {len(matching)} free" * bool(matching)
        )

    def _who(self, ids: Iterable[DeviceId]) -> str:
        owners = sorted({self.taken[i] for i in ids})
        more = f" and {len(owners) - 3} more" if len(owners) > 3 else ""
        return ", ".join(owners[:3]) + more

    def enough(self) -> str:
        """Requests of one kind together want no more devices than are free of it."""
        kinds: dict[tuple[str, ...], list[_Want]] = {}
        for w in self.wants:
            kinds.setdefault(w.kind, []).append(w)
        for kind, wants in kinds.items():
            free = sum(1 for i in self.matching[kind] if self.devices[i].id not in self.taken)
            if len(wants) > 1 and (total := sum(w.count for w in wants)) > free:
                names = ", ".join(repr(w.request.name) for w in wants[:3])
                names += f" and {len(wants) - 3} more" if len(wants) > 3 else ""
                claims = ", ".join(dict.fromkeys(w.claim.key for w in wants))
                what = f"DeviceClass {kind[0]}" + (" meeting their selectors" if kind[-1] else "")
                return (
                    f"requests {names} of ResourceClaims {claims} want {total} devices of "
                    f"{what} together: {self.node} has {self._has(kind)}"
                )
        return ""

    def _matching(
        self, kind: tuple[str, ...], cls: DeviceClass, r: DeviceRequest, claim: ResourceClaim
    ) -> str:
        """The node's devices of ``kind``, all and free; why not when a selector is odd."""
        selectors: list[Selector] = []
        owners = [f"DeviceClass {cls.name}"] * len(cls.selectors)
        owners += [f"request {r.name!r} of ResourceClaim {claim.key}"] * len(r.selectors)
        for expression, owner in zip((*cls.selectors, *r.selectors), owners, strict=True):
            try:
                selectors.append(compile_selector(expression))
            except SelectorError as err:
                return f"selector {expression!r} of {owner}: {SUPPORTED} ({err.detail})"
        self.matching[kind] = [
            i
            for i, d in enumerate(self.devices)
            if all(
                (not s.drivers or s.drivers == {d.driver}) and s.test(d.device, d.driver)
                for s in selectors
            )
        ]
        self.free[kind] = [i for i in self.matching[kind] if self.devices[i].id not in self.taken]
        return ""

    def _constrain(self, claim: ResourceClaim, wants: list[_Want]) -> str:
        named = {w.request.name: w for w in wants}
        for c in claim.constraints:
            index, attribute = len(self.attributes), c.match_attribute
            among = [named[n] for n in dict.fromkeys(c.requests) if n in named] or (
                [] if c.requests else wants
            )
            self.attributes.append(attribute)
            self.about.append(f"matchAttribute {attribute} of ResourceClaim {claim.key}")
            for w in among:
                having, buckets = self._split(w.candidates, attribute)
                if len(having) < w.count or (
                    w.request.count == 0 and len(having) < len(w.candidates)
                ):
                    return (
                        f"request {w.request.name!r} of ResourceClaim {claim.key} wants "
                        f"{w.count} devices with attribute {attribute} (a matchAttribute "
                        f"constraint): {self.node} has {len(having)} free"
                    )
                w.candidates = having
                w.constraints.append(index)
                w.buckets.append(buckets)
            if among and not any(
                all(len(w.buckets[-1].get(v, ())) >= w.count for w in among)
                for v in among[0].buckets[-1]
            ):
                names = ", ".join(repr(w.request.name) for w in among)
                return (
                    f"constraint {self.about[-1]}: no value of it is shared by enough free "
                    f"devices on {self.node} for requests {names}"
                )
        return ""

    def _split(self, candidates: list[int], attribute: str) -> tuple[list[int], Buckets]:
        """The candidates that have ``attribute``, and those by its value."""
        memo = (tuple(candidates), attribute)
        if (found := self.splits.get(memo)) is None:
            buckets: Buckets = {}
            for i in candidates:
                if (value := key_of(self.devices[i].device.attributes.get(attribute))) is not None:
                    buckets.setdefault(value, []).append(i)
            found = self.splits[memo] = (sorted(i for b in buckets.values() for i in b), buckets)
        return found

    def run(self) -> dict[str, list[DeviceResult]] | str:
        """Backtrack over the wants in order, each's picks in ascending position."""
        fixed: list[Key | None] = [None] * len(self.attributes)
        used = [False] * len(self.devices)
        picks: list[list[int]] = [[] for _ in self.wants]
        steps = 0
        budget, costs = self.budget, self.costs

        def place(w: int, start: int) -> bool | None:  # None: out of steps
            nonlocal steps
            while w < len(self.wants) and len(picks[w]) == self.wants[w].count:
                w, start = w + 1, 0
            if w == len(self.wants):
                return True
            want, need = self.wants[w], self.wants[w].count - len(picks[w])
            pool = want.candidates
            for n, c in enumerate(want.constraints):  # a value fixed: only devices with it
                if (value := fixed[c]) is not None:
                    pool = min(pool, want.buckets[n].get(value, []), key=len)
            for j in range(bisect_left(pool, start), len(pool) - need + 1):
                i = pool[j]
                if used[i]:
                    continue
                steps += 1
                if steps > MAX_STEPS:
                    return None
                cost = costs[i] if costs else ()
                if cost and budget is not None and not budget.fits(cost):
                    continue  # what it shares with an earlier pick is spent
                attributes = self.devices[i].device.attributes
                # A bucket of an earlier constraint may hold a device that lacks a later
                # constraint's attribute (candidates were narrowed after it): not eligible.
                values = [key_of(attributes.get(self.attributes[c])) for c in want.constraints]
                if any(
                    v is None or fixed[c] not in (None, v)
                    for c, v in zip(want.constraints, values, strict=True)
                ):
                    continue
                fixing = [c for c in want.constraints if fixed[c] is None]
                for c, v in zip(want.constraints, values, strict=True):
                    fixed[c] = v
                used[i] = True
                picks[w].append(i)
                if cost and budget is not None:
                    budget.take(cost)
                if (found := place(w, i + 1)) is not False:
                    return found
                if cost and budget is not None:
                    budget.give(cost)
                picks[w].pop()
                used[i] = False
                for c in fixing:
                    fixed[c] = None
            return False

        found = place(0, 0)
        claims = ", ".join(dict.fromkeys(w.claim.key for w in self.wants))
        if not found:
            about = "; ".join(self.about) or "no constraints"
            if self.taken:
                about += f"; {len(self.taken)} devices there taken: {self._who(self.taken)}"
            return (
                f"no choice of free devices on {self.node} meets every request and constraint "
                f"of ResourceClaims {claims} at once ({about})"
                if found is False
                else f"gave up after {MAX_STEPS} tries to find devices on {self.node} for {claims}"
            )
        out: dict[str, list[DeviceResult]] = {}
        for want, chosen in zip(self.wants, picks, strict=True):
            out.setdefault(want.claim.key, []).extend(
                DeviceResult(request=want.request.name, driver=d, pool=p, device=n)
                for d, p, n in (self.devices[i].id for i in chosen)
            )
        return out
