"""Shared counters: partitionable devices (DRA's ``sharedCounters``, ``consumesCounters``).

A driver publishes, per pool, counter sets (a GPU's memory slices) and, per device, what
it consumes of them: a MIG device takes one or more of its GPU's slices, the whole GPU
takes them all. A device can be given only while what it consumes is left, so a GPU
with a MIG device allocated is no longer whole, and a whole GPU allocated leaves no MIG
device of it to give.

``Budget`` is what is left of a node's counters once the devices already allocated or
held have taken theirs; the allocator checks and spends it pick by pick.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from baton.proto.dra import Device

SetKey = tuple[str, str, str]  # (driver, pool, counter set): unique in the cluster
Cost = tuple[tuple[SetKey, str, int], ...]  # (set, counter, amount) a device consumes


def cost_of(driver: str, pool: str, device: Device) -> Cost:
    return tuple(
        ((driver, pool, name), counter, amount)
        for name, counters in device.consumes.items()
        for counter, amount in counters.items()
    )


@dataclass(slots=True)
class Budget:
    """What is left of each counter of a node's sets: (set, counter) -> amount."""

    left: dict[tuple[SetKey, str], int]

    @classmethod
    def of(cls, sets: Mapping[SetKey, Mapping[str, int]], spent: Iterable[Cost]) -> Budget:
        left = {(key, counter): value for key, counters in sets.items()
                for counter, value in counters.items()}  # fmt: skip
        budget = cls(left)
        for cost in spent:
            budget.take(cost)
        return budget

    def fits(self, cost: Cost) -> bool:
        """Enough is left for ``cost`` (a counter of a set not published: never)."""
        return all(self.left.get((key, counter), 0) >= amount for key, counter, amount in cost)

    def take(self, cost: Cost) -> None:
        for key, counter, amount in cost:
            self.left[(key, counter)] = self.left.get((key, counter), 0) - amount

    def give(self, cost: Cost) -> None:
        for key, counter, amount in cost:
            self.left[(key, counter)] += amount

    def used(self, sets: Mapping[SetKey, Mapping[str, int]], key: SetKey) -> float:
        """The share of set ``key`` already consumed (0 untouched, 1 all of it)."""
        counters = sets.get(key, {})
        total = sum(counters.values())
        if not total:
            return 0.0
        return 1 - sum(max(0, self.left.get((key, c), 0)) for c in counters) / total

    def snapshot(self) -> tuple[int, ...]:
        """What is left, in a fixed order of (set, counter): alike nodes (one layout, the
        pool named after the node) compare equal when as much is left of each."""
        return tuple(v for _, v in sorted(self.left.items()))
