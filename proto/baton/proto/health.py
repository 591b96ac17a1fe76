"""Node health: the health service's decisions, and the inputs it publishes for itself.

Subjects (EVENTS stream), ``<node>`` a node name as a subject token:

| subject | payload (``type``) | by | when |
|---|---|---|---|
| ``health.state.<node>`` | ``StateChanged`` (``health.state.v1``) | core | a node changes state |
| ``health.withheld.<node>`` | ``Withheld`` (``health.withheld.v1``) | core | a rail holds it |
| ``health.remediate.<node>`` | ``Remediate`` (``health.remediate.v1``) | core | reboot, replace |
| ``health.silence.<node>`` | ``Silence`` (``health.silence.v1``) | shell | heartbeats stopped |
| ``health.heard.<node>`` | ``Heard`` (``health.heard.v1``) | shell | heartbeats came back |
| ``health.control`` | ``Control`` (``health.control.v1``) | ``baton health pause`` | pause switch |

Silence, Heard and Control are inputs of the health core: heartbeats are not kept in
HISTORY (too many), so the shell turns their absence into recorded events, and a
replay of the core sees exactly what the live core saw. ``at`` is the event's time.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from baton.proto import subjects

STATE: Final = "state"
WITHHELD: Final = "withheld"
REMEDIATE: Final = "remediate"
SILENCE: Final = "silence"
HEARD: Final = "heard"
CONTROL: Final = "control"

NodeState = Literal[
    "healthy",  # in service, no evidence
    "suspect",  # evidence seen, not counted yet (duration, flap damping)
    "withheld",  # evidence counts, but a rail (level cap, pause, opt-out) holds the verdict
    "quarantined",  # NoSchedule baton.io/unhealthy: no new work; running jobs may checkpoint
    "draining",  # + NoExecute baton.io/draining: the gang service restarts its gangs elsewhere
    "remediating",  # label baton.io/remediation: reboot|replace, for a fixer or the autoscaler
    "validating",  # NoSchedule baton.io/preflight: a preflight pod checks the node
    "opted-out",  # label baton.io/health-opt-out: "true": health leaves the node alone
]
Remedy = Literal["reboot", "replace"]


def subject(cluster: str, kind: str, node: str) -> str:
    """``baton.<cluster>.health.<kind>.<node>``; raises InvalidName for a bad node name."""
    return subjects.subject(cluster, subjects.HEALTH, kind, node)


def control_subject(cluster: str) -> str:
    return f"{subjects.PREFIX}.{subjects.check_cluster(cluster)}.{subjects.HEALTH}.{CONTROL}"


class Evidence(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One signal behind a verdict: which rule, what was seen, since when, from where."""

    rule: str  # a row of a rules table, e.g. "xid-79", "gpu-lost", "Ready", "heartbeat"
    detail: str  # what was seen, in words ("GPU 3 (0000:3b:00): Xid 79, fallen off the bus")
    since: float  # first seen (this episode)
    source: str = ""  # the input kind: telemetry.xid, telemetry.gpu, k8s.node, health.silence


class HealthEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type"):
    node: str
    at: float


class StateChanged(HealthEvent, frozen=True, tag="health.state.v1"):
    """A node's health state changed: ``previous`` -> ``state``, ``reason`` in words, with
    the evidence in force. ``remedy`` is set from remediating on."""

    state: NodeState
    previous: NodeState
    reason: str
    evidence: tuple[Evidence, ...] = ()
    remedy: str = ""


class Withheld(HealthEvent, frozen=True, tag="health.withheld.v1"):
    """A verdict a safety rail holds back ("would quarantine"), with the rail and why.
    Published when the reason changes, never dropped silently. ``rail``: ``rack``,
    ``block``, ``pool``, ``cluster`` (the level cap of that domain), ``paused`` or
    ``opt-out``."""

    would: str  # "quarantine", "drain", "recheck"
    rail: str
    reason: str
    evidence: tuple[Evidence, ...] = ()


class Remediate(HealthEvent, frozen=True, tag="health.remediate.v1"):
    """The node needs ``remedy``; the autoscaler (or a fixer watching the node label
    ``baton.io/remediation``) acts on it."""

    remedy: Remedy
    evidence: tuple[Evidence, ...] = ()


class Silence(HealthEvent, frozen=True, tag="health.silence.v1"):
    """No heartbeat from the node's agent since ``last_beat`` (more than ``after_s``)."""

    last_beat: float
    after_s: float


class Heard(HealthEvent, frozen=True, tag="health.heard.v1"):
    """The node's agent beats again after a Silence."""

    last_beat: float


class Control(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type",
              tag="health.control.v1"):  # fmt: skip
    """The pause switch: while paused, health takes no node out of service (verdicts are
    published as withheld, rail ``paused``); returning nodes is never paused."""

    at: float
    paused: bool
    by: str = ""
    reason: str = ""


class Note(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The node annotation ``baton.io/health`` (JSON): who changed the node, why, when.
    Read back when the service starts, so a restart resumes each node where it was."""

    state: NodeState
    since: float
    by: str = "baton-health"
    reason: str = ""
    evidence: tuple[Evidence, ...] = ()
    remedy: str = ""
    validated: float = 0.0  # last passing preflight (0: never)


class HealthPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """What of the health settings decisions depend on (recorded in ``runner.started``)."""

    # evidence
    after_s: dict[str, float] = {}  # rule -> seconds it must hold before it counts (overrides)
    flap_window_s: float = 600.0  # a rule that goes bad this often within the window counts
    flap_count: int = 3
    nvlink_errors_max: int = 100
    zombie_mib_max: int = 1024
    disk_full_ratio: float = 0.95
    # the state machine
    drain_grace_s: float = 300.0  # quarantined -> draining, for jobs to checkpoint
    drain_timeout_s: float = 900.0  # draining -> remediating even if pods linger
    remediation_recheck_s: float = 600.0  # remediating: try a preflight this often
    # active checks
    preflight: bool = True
    new_node_s: float = 3600.0  # a node first seen this young is checked before any work
    preflight_namespace: str = "baton-system"
    preflight_image: str = "nvcr.io/nvidia/cloud-native/dcgm:3.3.8-1-ubuntu22.04"
    preflight_command: tuple[str, ...] = ("dcgmi", "diag", "-r", "2")
    preflight_timeout_s: float = 900.0
    max_testing: int = 8  # nodes under test at once (periodic checks); the floor for the rest
    testing_share: float = 0.25  # new and returning nodes under test at once: share of nodes
    recheck_days: float = 7.0  # coverage goal: every idle node validated within N days
    recheck_retry_s: float = 600.0  # a due node that is busy is looked at again after this
    # safety rails
    cap_rack: float = 0.25  # share of a domain that may be out (quarantined..remediating)
    cap_block: float = 0.2
    cap_pool: float = 0.2
    cap_cluster: float = 0.2
    cap_min: int = 1  # nodes a domain may always have out, whatever its size
    release_interval_s: float = 10.0  # slow start: releases per interval start at 1, double
    release_max: int = 64
    probation_s: float = 600.0  # a node failing again this soon after release resets it
    paused: bool = False  # the pause switch as the service started (last Control)
