"""Reading a fault trace: a CSV of faults to replay against the simulated cluster.

Columns ``time_s,node,kind,detail,duration_s``:

- ``time_s``: seconds after the replay starts (divided by ``--speed``);
- ``node``: a target (see :mod:`targets`): ``gpu-00012``, ``gpu-00012 gpu-00013``,
  ``label:baton.io/rack=gpu-rack-003``, ``random:5@h100``, ``share:0.1``;
- ``kind``: a fault kind (:data:`faults.KINDS`), or ``node-ready``/``gpu-heal`` to heal;
- ``detail``: ``key=value`` pairs (``xid=79 gpu=3``), may be empty;
- ``duration_s``: heal the same nodes after this long; ``0`` keeps the fault.

Random targets are seeded with the replay's seed plus the line number, so a trace
replays the same way every time. A bad row raises :class:`TraceError` naming its line
and column. Pure.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable

import msgspec

from baton.services.simcluster.world import targets
from baton.services.simcluster.world.faults import ALIASES, Fault, FaultError, parse_detail
from baton.services.simcluster.world.targets import Target, TargetError

COLUMNS = ("time_s", "node", "kind", "detail", "duration_s")


class TraceError(ValueError):
    """The fault trace is malformed; the message names the line and column."""


class TraceRow(msgspec.Struct, frozen=True, kw_only=True):
    line: int
    time_s: float
    target: Target
    fault: Fault
    duration_s: float = 0.0
    heal: bool = False


def parse(lines: Iterable[str], *, seed: int = 0, source: str = "fault trace") -> list[TraceRow]:
    reader = csv.DictReader(lines)
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise TraceError(f"{source}: line 1: missing columns {', '.join(missing)}")
    return [_row(row, line=reader.line_num, seed=seed, source=source) for row in reader]


def _row(row: dict[str, str], *, line: int, seed: int, source: str) -> TraceRow:
    where = f"{source}: line {line}"

    def seconds(column: str) -> float:
        text = (row.get(column) or "").strip() or "0"
        try:
            value = float(text)
        except ValueError:
            raise TraceError(f"{where}: {column}: not a number: {text!r}") from None
        if value < 0:
            raise TraceError(f"{where}: {column}: negative: {text!r}")
        return value

    kind = (row.get("kind") or "").strip()
    heal = False
    if kind in ALIASES:
        kind, heal = ALIASES[kind]
    try:
        target = targets.parse(row.get("node") or "", seed=seed + line)
    except TargetError as exc:
        raise TraceError(f"{where}: node: {exc}") from None
    try:
        fault = parse_detail(kind, row.get("detail") or "")
    except FaultError as exc:
        column = "" if str(exc).startswith("kind:") else "detail: "
        raise TraceError(f"{where}: {column}{exc}") from None
    return TraceRow(
        line=line,
        time_s=seconds("time_s"),
        target=target,
        fault=fault,
        duration_s=seconds("duration_s"),
        heal=heal,
    )
