"""What a waiting gang asks of the cluster, and what one cycle already knows it refused.

A long queue is mostly gangs asking for what an earlier gang of the same kind was just
refused (the whole Philly trace: thousands of one-node jobs of a few shapes). ``ask``
reads a gang once (kept on it until one of its pods or its PodGroup changes);
``Refused`` remembers, within one cycle, the searches that found no plan and the
verdicts drawn from them, by kind, so such a gang needs no search of its own. The
cycle starts a new ``Refused`` whenever a placement takes capacity or room is made:
every search and verdict is the one a fresh computation would give.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from baton.libs.view import group_by_shape, shape_of
from baton.proto import keys
from baton.proto.k8s import GPU, Pod
from baton.proto.placement import GangUnschedulable
from baton.services.gang.core import exclusive, ordering
from baton.services.gang.core.gangs import Ask, Cluster, Gang, Kind
from baton.services.gang.core.needs import Memo, identity, shortfall, verdict
from baton.services.gang.core.topology import Search, search

KINDS_KEPT = 4096  # distinct kinds interned before the table starts again


def ask(cluster: Cluster, gang: Gang, kinds: dict[Kind, Kind]) -> Ask:
    """``gang``'s ask, kept on it (``Gang.changed`` forgets it). Equal kinds are one
    object (``kinds``), so looking one up is an identity check."""
    if gang.ask is not None:
        return gang.ask
    pods = ordering.members(cluster, gang)
    quorum, extras = _quorum(pods, ordering.min_member(cluster, gang))
    members = group_by_shape(quorum)
    shapes = tuple((shape, len(names)) for shape, names in members.items())
    required, preferred = _levels(gang)
    level, parts = exclusive.split(pods) if gang.group is None else ("", ())
    sizes = tuple(tuple((shape, len(names)) for shape, names in part.items()) for part in parts)
    digest = hash((shapes, required, preferred, level, sizes))
    kind = Kind(shapes, required, preferred, digest, exclusive=level, parts=sizes)
    if len(kinds) >= KINDS_KEPT:
        kinds.clear()
    kind = kinds.setdefault(kind, kind)
    floor = gang.group.min_resources if gang.group is not None else {}
    gang.ask = made = Ask(
        members=members, kind=kind, floor=floor, parts=parts, extras=group_by_shape(extras)
    )
    return made


def _quorum(pods: list[Pod], need: int) -> tuple[list[Pod], list[Pod]]:
    """The quorum (the ``need`` smallest members: fewest GPUs, then smallest requests,
    then name) and the members beyond it, each in name order. minMember is a quorum, as
    in scheduler-plugins and Volcano: the gang starts once that many fit together."""
    if need <= 0 or len(pods) <= need:
        return pods, []
    chosen = {p.key for p in sorted(pods, key=_smallest)[:need]}
    return [p for p in pods if p.key in chosen], [p for p in pods if p.key not in chosen]


def _smallest(pod: Pod) -> tuple[int, tuple[int, ...], str]:
    return pod.requests.get(GPU, 0), tuple(-n for n in shape_of(pod).size), pod.key


def required_level(gang: Gang) -> str:
    """The topology level the whole gang must be in ('' none)."""
    return _levels(gang)[0]


def _levels(gang: Gang) -> tuple[str, str]:
    """Required and preferred topology levels: Baton's PodGroup annotations, or an
    upstream PodGroup's topology constraint (required)."""
    if gang.group is None:
        return "", ""
    notes, constraint = gang.group.annotations, gang.group.topology
    return notes.get(keys.TOPOLOGY_REQUIRED, constraint), notes.get(keys.TOPOLOGY_PREFERRED, "")


def place(cluster: Cluster, ask: Ask, *, excluded: frozenset[str]) -> Search:
    """Where the ask's members go, outside ``excluded``: an exclusive JobSet's Jobs each in
    a domain of their own (``exclusive``), any other gang's members together
    (``topology.search``)."""
    if ask.kind.exclusive:
        return exclusive.search_exclusive(
            cluster, ask.parts, level=ask.kind.exclusive, excluded=excluded,
            members=ask.members,
        )  # fmt: skip
    return search(cluster, ask.members, required=ask.required, preferred=ask.preferred,
                  excluded=excluded)  # fmt: skip


Verdict = tuple[GangUnschedulable, tuple[object, ...]]  # the event and its ``identity``


@dataclass(slots=True)
class Refused:
    """One cycle's searches that found no plan, and the verdicts drawn from them."""

    totals: dict[Kind, bool] = field(default_factory=dict)
    searches: dict[tuple[Kind, frozenset[str]], Search] = field(default_factory=dict)
    verdicts: dict[tuple[int, str], tuple[Search, Verdict]] = field(default_factory=dict)
    counts: Memo = field(default_factory=dict)  # nodes refused by reason, by shape

    def allows(self, ask: Ask, free: dict[str, int]) -> bool:
        """Free capacity in total allows the gang (``needs.shortfall``)."""
        if ask.floor:
            return not shortfall(ask.members, free, floor=ask.floor)
        fits = self.totals.get(ask.kind)
        if fits is None:
            fits = self.totals[ask.kind] = not shortfall(ask.members, free, floor={})
        return fits

    def search(self, cluster: Cluster, ask: Ask, *, excluded: frozenset[str]) -> Search:
        """``place``, remembering within the cycle what found no plan (not for exclusive
        JobSets: where others' Jobs run changes as gangs are placed)."""
        found = self.searches.get((ask.kind, excluded))
        if found is None:
            found = place(cluster, ask, excluded=excluded)
            if found.plan is None and not ask.kind.exclusive:
                self.searches[ask.kind, excluded] = found
        return found

    def verdict(
        self, cluster: Cluster, gang: str, ask: Ask, found: Search, *, blocked_by: str, now: float
    ) -> Verdict:
        """The verdict drawn from ``found`` (the same for every gang ``found`` refused:
        the event names the first of them) and its identity."""
        seen = self.verdicts.get((id(found), blocked_by))
        if seen is not None and seen[0] is found:
            return seen[1]
        event = verdict(
            cluster, ask.members, found, gang=gang, required=ask.required,
            blocked_by=blocked_by, now=now, memo=self.counts,
        )  # fmt: skip
        made = (event, identity(event))
        self.verdicts[id(found), blocked_by] = (found, made)  # keeps ``found``: ids stay unique
        return made
