"""Admission's I/O: nodes, pods and PodGroups from the bus into the core; actions and
decisions out; the team config file watched for changes; the HTTPS webhook.

The core's state lives in memory only and is rebuilt at start from the K8S stream
(current state of every object); the webhook answers "not ready" until then.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog
import yaml
from aiohttp import web

from libs.bus import Bus, Outgoing
from libs.service import CoreStatus, Input, run_core
from proto import subjects
from proto.actions import Action, Annotate, EvictGang, SetLabels, SetTaint
from proto.admission import SUBJECT_KIND, AdmissionEvent, NodeTeamChanged, PodMutated, PodRejected
from proto.k8s import K8sEvent
from services.admission import core, metrics
from services.admission.serving import Webhook, serve_webhook
from services.admission.teams import DEFAULT, TeamConfig, TeamConfigError, parse
from services.admission.webhook import Options

log = structlog.get_logger("baton.admission")


def load_teams(path: str) -> TeamConfig:
    """Read and validate the team config; '' means the default (one team owns all)."""
    if not path:
        return DEFAULT
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise TeamConfigError(f"{path}: {exc}") from None
    try:
        return parse(data)
    except TeamConfigError as exc:
        raise TeamConfigError(f"{path}: {exc}") from None


def route(cluster: str, output: Any) -> tuple[str, str | None] | None:
    """Output -> (subject, msg id)."""
    match output:
        case SetTaint() | SetLabels():
            kind = "taint" if isinstance(output, SetTaint) else "label"
            return subjects.subject(cluster, subjects.ACTION, kind, output.node), output.id
        case Annotate():
            key = (output.namespace, output.name)
            return subjects.subject(cluster, subjects.ACTION, "annotate", *key), output.id
        case EvictGang():
            namespace, _, name = output.gang.partition("/")
            return subjects.subject(
                cluster, subjects.ACTION, "evict-gang", namespace, name
            ), output.id
        case Action():
            return None
        case NodeTeamChanged():
            subj = subjects.subject(cluster, subjects.ADMISSION, "node-team", output.node)
            return subj, f"node-team:{output.node}:{output.team}:{output.at}"
        case AdmissionEvent():
            return _event_subject(cluster, output), None
    return None


def _event_subject(cluster: str, event: AdmissionEvent) -> str:
    kind = SUBJECT_KIND[type(event)]
    if isinstance(event, PodMutated | PodRejected):
        key = (event.namespace, event.name.rstrip("-") or "unnamed")
    else:
        key = tuple(getattr(event, "gang", "").split("/", 1))
    try:
        return subjects.subject(cluster, subjects.ADMISSION, kind, *key)
    except subjects.InvalidName:
        return subjects.subject(cluster, subjects.ADMISSION, kind)


class Admission:
    def __init__(
        self, *, bus: Bus, teams_file: str, options: Options, reload_s: float = 5.0
    ) -> None:
        self.bus = bus
        self.cluster = bus.cluster
        self.teams_file = teams_file
        self.options = options
        self.reload_s = reload_s
        self.status: CoreStatus[core.State] = CoreStatus(core.initial(load_teams(teams_file)))
        self._mtime = self._stat()
        self._background: set[asyncio.Task[None]] = set()

    @property
    def ready(self) -> bool:
        return self.status.caught_up

    def state(self) -> core.State | None:
        return self.status.state if self.status.caught_up else None

    async def run(
        self,
        *,
        tls: ssl.SSLContext | None = None,
        host: str = "0.0.0.0",
        port: int = 8443,
        bound: asyncio.Future[int] | None = None,
    ) -> None:
        await self.bus.ensure_streams()
        runner: web.AppRunner | None = None
        if tls is not None:
            hook = Webhook(state=self.state, publish=self.publish_decision, options=self.options)
            runner, port = await serve_webhook(hook, host=host, port=port, tls=tls)
        if bound is not None:
            bound.set_result(port)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._watch_config())
                group.create_task(self._gauges())
                group.create_task(
                    run_core(
                        self.bus,
                        name="admission",
                        core_step=self._step,
                        state=self.status.state,
                        inputs=self._inputs(),
                        route=lambda o: route(self.cluster, o),
                        status=self.status,
                    )
                )
        finally:
            if runner is not None:
                await runner.cleanup()
            for task in list(self._background):
                task.cancel()
            await asyncio.gather(*self._background, return_exceptions=True)

    def _inputs(self) -> list[Input]:
        wild = subjects.wildcard
        return [
            Input(wild(self.cluster, subjects.K8S, kind, ">"), K8sEvent, "last_per_subject")
            for kind in ("node", "podgroup", "pod")
        ]

    def _step(self, state: core.State, event: Any, now: float) -> tuple[core.State, Sequence[Any]]:
        state, outputs = core.step(state, event, now)
        for output in outputs:
            metrics.DECISIONS.labels(type=type(output).__name__).inc()
        return state, outputs

    def publish_decision(self, event: PodMutated | PodRejected) -> None:
        """Send a webhook decision in the background; a lost one is only a missing record."""
        target = route(self.cluster, event)
        if target is None:
            return
        items = [Outgoing(target[0], event, target[1])]
        task = asyncio.get_running_loop().create_task(self._send(items))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _send(self, items: list[Outgoing]) -> None:
        try:
            await self.bus.publish_many(items)
        except Exception as exc:
            log.warning("publishing decisions failed", error=repr(exc), count=len(items))

    # -- team config ----------------------------------------------------------------

    def _stat(self) -> float:
        with contextlib.suppress(OSError):
            return Path(self.teams_file).stat().st_mtime if self.teams_file else 0.0
        return 0.0

    async def _watch_config(self) -> None:
        """Reload the team config when its file changes (a ConfigMap update swaps it)."""
        while True:
            await asyncio.sleep(self.reload_s)
            mtime = self._stat()
            if mtime == self._mtime:
                continue
            self._mtime = mtime
            await self.reload()

    async def reload(self) -> bool:
        try:
            config = load_teams(self.teams_file)
        except TeamConfigError as exc:
            metrics.CONFIG_ERRORS.inc()
            log.error("team config refused; keeping the previous one", error=str(exc))
            return False
        if config == self.status.state.config:
            return True
        event = core.TeamsLoaded(config=config, at=time.time())
        state, outputs = self._step(self.status.state, event, event.at)
        self.status.state = state
        items = [
            Outgoing(t[0], o, t[1]) for o in outputs if (t := route(self.cluster, o)) is not None
        ]
        await self._send(items)
        log.info("team config loaded", teams=[t.name for t in config.teams], actions=len(items))
        return True

    async def _gauges(self) -> None:
        while True:
            state = self.status.state
            for team in state.config.teams:
                metrics.QUEUED.labels(team=team.name).set(len(state.queues.get(team.name, [])))
                metrics.USED.labels(team=team.name).set(
                    state.used.get(team.name, 0) + state.borrowed(team.name)
                )
                metrics.QUOTA.labels(team=team.name).set(state.quota(team.name))
            await asyncio.sleep(5)
