"""Which nodes a fault hits: named nodes, a label selector, a pool, a random few. Pure.

A :class:`Target` narrows the cluster's nodes in order: ``nodes`` (exactly these) or
else every node matching ``selector`` and ``pool``; then ``count`` (N of them) or
``share`` (that fraction, rounded, at least one when the share is > 0) picked at random
with ``seed``, so the same seed picks the same nodes from the same candidates.

In text (the fault trace's ``node`` column, ``baton sim fault`` arguments)::

    gpu-00012                  one node
    gpu-00012 gpu-00013        a list (spaces or ';')
    label:baton.io/rack=gpu-rack-003
    random:5  random:5@h100    5 nodes of the cluster, or of pool h100
    share:0.1  share:0.1@h100  a tenth of them
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

import msgspec


class TargetError(ValueError):
    """The target cannot be understood; the message says why."""


class Target(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    nodes: tuple[str, ...] = ()
    selector: str = ""  # a label selector
    pool: str = ""  # baton.io/pool
    count: int | None = None  # this many, at random
    share: float | None = None  # this fraction, at random
    seed: int = 0

    def __post_init__(self) -> None:
        if self.count is not None and self.share is not None:
            raise TargetError("count and share: give one, not both")
        if self.count is not None and self.count < 0:
            raise TargetError(f"count: expected >= 0, got {self.count}")
        if self.share is not None and not 0 <= self.share <= 1:
            raise TargetError(f"share: expected 0..1, got {self.share}")
        if self.nodes and (self.selector or self.pool):
            raise TargetError("nodes: give names or a selector/pool, not both")

    @property
    def random(self) -> bool:
        return self.count is not None or self.share is not None


def nodes(*names: str) -> Target:
    return Target(nodes=tuple(names))


def choose(target: Target, candidates: Sequence[str]) -> list[str]:
    """The nodes of ``candidates`` (already narrowed by names/selector/pool) it hits, sorted."""
    pool = sorted(set(candidates))
    if target.count is not None:
        k = min(target.count, len(pool))
    elif target.share is not None:
        k = min(len(pool), max(1 if target.share > 0 else 0, round(target.share * len(pool))))
    else:
        return pool
    return sorted(random.Random(target.seed).sample(pool, k))


def parse(text: str, *, seed: int = 0) -> Target:
    """A Target from its text form (see the module doc); TargetError names what is wrong."""
    text = text.strip()
    kind, sep, rest = text.partition(":")
    if not sep or kind not in ("label", "random", "share"):
        names = tuple(n for n in re.split(r"[\s;]+", text) if n)
        if not names:
            raise TargetError("node: empty; expected a node, a list, label:, random: or share:")
        return Target(nodes=names)
    if kind == "label":
        return Target(selector=rest.strip(), seed=seed)
    amount, _, pool = rest.partition("@")
    try:
        if kind == "random":
            return Target(count=int(amount), pool=pool.strip(), seed=seed)
        return Target(share=float(amount), pool=pool.strip(), seed=seed)
    except ValueError as exc:
        if isinstance(exc, TargetError):
            raise
        raise TargetError(f"{kind}: not a number: {amount!r}") from None
