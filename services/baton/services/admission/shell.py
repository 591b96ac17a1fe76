"""Admission's edges: where its outputs go, the team config file, and the webhook.

The runner feeds the core nodes, pods and PodGroups (snapshot, then live) and
``TeamsLoaded`` in HISTORY's order, and publishes its routes. The core's state has
one writer, the runner: a changed team config file is validated here and published
as ``TeamsLoaded`` on ``baton.<c>.admission.teams``, which the core reads back like
any other input (so a change lands in stream order, is replayed, and its actions are
published by the runner until stored). The HTTPS webhook answers from the runner's
state, "not ready" until the core has caught up.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

import msgspec
import structlog

from baton.libs.bus import Bus, Outgoing
from baton.libs.runner import Route, Runner, action_route
from baton.libs.runtime.process import instance
from baton.libs.runtime.stopping import checkpoint, retry
from baton.libs.runtime.teams import load_teams
from baton.proto import ids, subjects
from baton.proto.actions import (
    Annotate,
    EvictGang,
    RecreatePod,
    SetLabels,
    SetTaint,
    SetTeamStatus,
)
from baton.proto.admission import (
    SUBJECT_KIND,
    AdmissionEvent,
    NodeTeamChanged,
    PodMutated,
    PodRejected,
    TeamsLoaded,
    WebhookServing,
)
from baton.services.admission import core, metrics
from baton.services.admission.core.webhook import Options
from baton.services.admission.serving import Webhook, serve_webhook
from baton.services.admission.teams import TeamConfig, TeamConfigError

log = structlog.get_logger("baton.admission")


def teams_subject(cluster: str) -> str:
    return subjects.wildcard(cluster, subjects.ADMISSION, "teams")


def webhook_subject(cluster: str) -> str:
    return subjects.wildcard(cluster, subjects.ADMISSION, "webhook")


def _node_team(cluster: str, event: NodeTeamChanged) -> tuple[str, str]:
    subject = subjects.subject(cluster, subjects.ADMISSION, "node-team", event.node)
    return subject, f"node-team:{event.node}:{event.team}:{event.at}"


def event_subject(cluster: str, event: AdmissionEvent) -> str:
    kind = SUBJECT_KIND[type(event)]
    if isinstance(event, PodMutated | PodRejected):
        key = (event.namespace, event.name.rstrip("-") or "unnamed")
    else:
        key = tuple(getattr(event, "gang", "").split("/", 1))
    try:
        return subjects.subject(cluster, subjects.ADMISSION, kind, *key)
    except subjects.InvalidName:
        return subjects.subject(cluster, subjects.ADMISSION, kind)


def _decision(cluster: str, event: AdmissionEvent) -> tuple[str, str]:
    """The same decision made again (a standby's, published on takeover) has the same id."""
    subject = event_subject(cluster, event)
    return subject, ids.make("admission", subject, msgspec.json.encode(event).decode())


ROUTES = (
    Route(
        (SetTaint, SetLabels, Annotate, EvictGang, RecreatePod, SetTeamStatus),
        to=action_route,
        action=True,
    ),
    Route(NodeTeamChanged, to=_node_team),
    Route(tuple(t for t in SUBJECT_KIND if t is not NodeTeamChanged), to=_decision),
)


def observe(state: core.State, outputs: Sequence[Any]) -> None:
    for output in outputs:
        tag = str(type(output).__struct_config__.tag)
        team = getattr(output, "team", "") or metrics.NO_TEAM
        metrics.DECISIONS.labels(type=tag, team=team).inc()


def gauges(state: core.State) -> None:
    for team in state.config.teams:
        metrics.QUEUED.labels(team=team.name).set(len(state.queues.get(team.name, [])))
        used = state.used.get(team.name, 0) + state.borrowed(team.name)
        metrics.USED.labels(team=team.name).set(used)
        metrics.QUOTA.labels(team=team.name).set(state.quota(team.name))


class Beside:
    """What runs beside admission's runner: the webhook and the team config watcher."""

    def __init__(
        self,
        *,
        bus: Bus,
        teams_file: str,
        options: Options,
        reload_s: float = 5.0,
        tls: ssl.SSLContext | None = None,
        host: str = "0.0.0.0",
        port: int = 8443,
        bound: asyncio.Future[int] | None = None,
        off: str = "no TLS certificate",
    ) -> None:
        self.bus, self.teams_file, self.options, self.reload_s = bus, teams_file, options, reload_s
        self.tls, self.host, self.port, self.bound = tls, host, port, bound
        self.off = off  # why there is no webhook, when ``tls`` is None
        self._mtime = self._stat()
        self._background: set[asyncio.Task[None]] = set()

    async def run(self, runner: Runner[core.State]) -> None:
        web_runner = None
        if self.tls is not None:
            hook = Webhook(
                state=lambda: runner.state if runner.ready else None,
                publish=self.publish_decision,
                options=self.options,
            )
            web_runner, self.port = await serve_webhook(
                hook, host=self.host, port=self.port, tls=self.tls
            )
        if self.bound is not None:
            self.bound.set_result(self.port)
        self._in_background(self._say(self.serving()))
        try:
            await self._watch_config(runner)
        finally:
            if web_runner is not None:
                await web_runner.cleanup()
            for task in list(self._background):
                task.cancel()
            await asyncio.gather(*self._background, return_exceptions=True)

    def serving(self) -> WebhookServing:
        at, me = time.time(), instance()
        if self.tls is None:
            return WebhookServing(serving=False, at=at, reason=self.off, instance=me)
        return WebhookServing(serving=True, at=at, port=self.port, instance=me)

    def publish_decision(self, event: PodMutated | PodRejected) -> None:
        """Send a webhook decision in the background; a lost one is only a missing record."""
        items = [Outgoing(event_subject(self.bus.cluster, event), event, None)]
        self._in_background(self._send(items))

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _say(self, event: WebhookServing) -> None:
        """Until the bus takes it: ``baton status`` reads the last one."""
        subject = webhook_subject(self.bus.cluster)
        await retry(lambda: self.bus.publish(subject, event), what="saying if the webhook serves")

    async def _send(self, items: list[Outgoing]) -> None:
        try:
            await self.bus.publish_many(items)
        except Exception as exc:
            log.warning("publishing decisions failed", error=repr(exc), count=len(items))

    def _stat(self) -> float:
        with contextlib.suppress(OSError):
            return Path(self.teams_file).stat().st_mtime if self.teams_file else 0.0
        return 0.0

    async def _watch_config(self, runner: Runner[core.State]) -> None:
        """Publish the team config when its file changes (a ConfigMap update swaps it)."""
        while True:
            await asyncio.sleep(self.reload_s)
            checkpoint()
            mtime = self._stat()
            if mtime == self._mtime or not runner.leader:  # the leader publishes changes
                continue
            self._mtime = mtime
            await self.reload(runner.state.config)

    async def reload(self, current: TeamConfig) -> bool:
        """Validate the file; publish it when it changed. A bad file keeps the old one."""
        try:
            config = load_teams(self.teams_file)
        except TeamConfigError as exc:
            metrics.CONFIG_ERRORS.inc()
            log.error("team config refused; keeping the previous one", error=str(exc))
            return False
        if config == current:
            return True
        event = TeamsLoaded(config=config, at=time.time())
        subject, msg_id = teams_subject(self.bus.cluster), f"teams:{event.at}"
        await retry(
            lambda: self.bus.publish(subject, event, msg_id=msg_id), what="publishing teams"
        )
        log.info("team config changed", teams=[t.name for t in config.teams])
        return True
