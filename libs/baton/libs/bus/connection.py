"""``Bus``: one NATS connection per service, its JetStream context, and the verbs.

Connects with reconnects forever (a service never gives up on NATS: it waits,
logs, and carries on where it was), declares the cluster's streams, publishes
with dedup ids and consumes typed messages. ``bus.nc`` and ``bus.js`` are the
plain nats-py objects for anything special.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import msgspec
import nats
import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from baton.libs.bus import publishing, snapshotting, storage, streams
from baton.libs.bus.consuming import Delivery, Subscription, consumer_config
from baton.libs.runtime.nkey import SEED_SETTING, seed_file_public_key
from baton.libs.runtime.stopping import checkpoint
from baton.proto import subjects

log = structlog.get_logger("baton.bus")


def credentials(url: str) -> tuple[str, str]:
    """(user name or "", the URL without its password, for logs) of a NATS URL."""
    first = url.split(",")[0]
    parsed = urlsplit(first if "://" in first else f"nats://{first}")
    user = unquote(parsed.username or "")
    if parsed.password is None:
        return user, url
    host = parsed.hostname or ""
    shown = f"{parsed.scheme}://{user}:***@{host}" + (f":{parsed.port}" if parsed.port else "")
    return user, shown


def inbox_prefix(public_key: str) -> str:
    """The reply subjects of the nkey user ``public_key``: the only ones it may read
    (``libs.runner.access``), so no user sees another's JetStream deliveries."""
    return f"_INBOX_{public_key}"


def auth_options(
    *, seed_file: str = "", ca_file: str = "", token_file: str = "", inbox: str = ""
) -> dict[str, Any]:
    """nats-py ``connect`` options for an nkey user (``seed_file``: its seed, ``SU...``)
    and TLS with a private CA (``ca_file``). ``SettingsError`` names a bad seed.
    ``token_file``: instead of a seed, send this file's text as ``auth_token``, read
    again at every (re)connect (a projected ServiceAccount token rotates), with replies
    on ``inbox`` (the auth callout lets an agent read its own; ``access.agent_inbox``)."""
    options: dict[str, Any] = {}
    if seed_file:
        public = seed_file_public_key(seed_file, setting=SEED_SETTING)
        options |= {"nkeys_seed": seed_file, "inbox_prefix": inbox_prefix(public)}
    elif token_file:
        options["token"] = TokenFile(token_file)
        if inbox:
            options["inbox_prefix"] = inbox
    if ca_file:
        options["tls"] = ssl.create_default_context(cafile=ca_file)
    return options


class TokenFile:
    """nats-py's token callback: the file's text, read at every (re)connect; ``sent``
    is what the last CONNECT carried, so a rotation can be noticed (``Bus``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.sent = ""

    def read(self) -> str:
        try:
            return Path(self.path).read_text().strip()
        except OSError as exc:  # the server refuses an empty token; the next try reads again
            log.warning("nats token unreadable", path=self.path, error=exc.strerror)
            return ""

    def __call__(self) -> str:
        self.sent = self.read()
        return self.sent


def env_auth_options(env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """``auth_options`` from ``BATON_NATS_NKEY_SEED_FILE`` and ``BATON_NATS_CA_FILE``: how
    the ``baton`` tools (status, tail, why, replay) connect as the operator."""
    return auth_options(seed_file=env.get(SEED_SETTING, ""),
                        ca_file=env.get("BATON_NATS_CA_FILE", ""))  # fmt: skip


class StreamsMissing(RuntimeError):
    """Streams a service needs were not created in time (``Bus.wait_for_streams``)."""


class Bus:
    def __init__(self, nc: Client, *, cluster: str, name: str) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream(publish_async_max_pending=publishing.MAX_PENDING)
        self.cluster = subjects.check_cluster(cluster)
        self.name = name
        self.replicas = 1  # copies of each stream and bucket in a NATS cluster
        self.write_refused = ""  # why JetStream refused the last write for want of space
        self.write_refused_at = 0.0  # when (monotonic)
        self.nodes = 0  # the cluster's node count, which sizes HISTORY (0: not known)
        self._subscriptions: set[Subscription[Any]] = set()
        self._follow: asyncio.Task[None] | None = None  # the token file's (see connect)

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        cluster: str,
        name: str,
        ca_file: str = "",
        seed_file: str = "",
        token_file: str = "",
        inbox: str = "",
        token_check_s: float = 5.0,
    ) -> Bus:
        """Connect (waiting for NATS if it is not up yet) and reconnect forever.
        ``ca_file``: the CA of NATS's certificate, for TLS with a private CA;
        ``seed_file``: the nkey seed of this service's NATS user (``SU...``)."""
        subjects.check_cluster(cluster)
        _, shown = credentials(url)
        options = auth_options(seed_file=seed_file, ca_file=ca_file, token_file=token_file,
                               inbox=inbox)  # fmt: skip

        async def disconnected() -> None:
            if not nc.is_closed:  # not our own close()
                log.warning("nats disconnected", url=shown)

        async def reconnected() -> None:
            log.info(
                "nats reconnected", url=nc.connected_url.hostname if nc.connected_url else shown
            )

        async def error(exc: Exception) -> None:
            log.warning("nats error", error=repr(exc))

        nc = await nats.connect(
            url,
            name=name,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            allow_reconnect=True,
            connect_timeout=5,
            disconnected_cb=disconnected,
            reconnected_cb=reconnected,
            error_cb=error,
            **options,
        )
        user = options.get("inbox_prefix", "").removeprefix("_INBOX_") or None
        log.info("nats connected", url=shown, cluster=cluster, nkey=user)
        bus = cls(nc, cluster=cluster, name=name)
        token = options.get("token")
        if isinstance(token, TokenFile):
            bus._follow = asyncio.create_task(bus._follow_token(token, token_check_s))
        return bus

    async def _follow_token(self, token: TokenFile, every: float) -> None:
        """Reconnect as soon as the token file changes: the user the auth callout made
        expires with the token it was made for, and NATS then closes the connection
        (nats-py does not reconnect after "user authentication expired"). The kubelet
        rotates a projected token well before it expires (at 80% of its life)."""
        while not self.nc.is_closed:
            await asyncio.sleep(every)
            if self.nc.is_connected and token.read() not in ("", token.sent):
                log.info("nats token rotated: reconnecting with it", path=token.path)
                await self.nc.force_reconnect()

    async def ensure_streams(
        self, configs: Iterable[StreamConfig] | None = None, *, sources_timeout: float = 5.0
    ) -> None:
        """Create or update every Baton stream of this cluster (idempotent), the lease
        bucket first, then wait until each sourcing stream (HISTORY) copies from all its
        sources: until then an object updated twice in K8S (one message per subject)
        would lose its first version from the history, and replay would diverge. With
        NATS auth only the owner (the actuator) and the operator may
        (``libs.runner.serving.prepare_streams``)."""
        if configs is None:
            leases = streams.leases_config(self.cluster, replicas=self.replicas)
            with contextlib.suppress(nats.js.errors.BadRequestError):  # exists: kept as it is
                await self.js.create_key_value(leases)
        configs = list(
            configs
            if configs is not None
            else streams.stream_configs(self.cluster, replicas=self.replicas, nodes=self.nodes)
        )
        for config in configs:
            try:
                await self.js.add_stream(config)
            except nats.js.errors.BadRequestError:
                await self._update(config)  # exists with another config
            except nats.js.errors.APIError as exc:
                if exc.err_code != storage.INSUFFICIENT_STORAGE or not config.max_bytes:
                    raise
                raise storage.too_small(config.name or "", config.max_bytes,
                                        streams.HISTORY_SIZING) from exc  # fmt: skip
        for config in configs:
            if config.sources and config.name:
                await self._sources_active(config.name, within=sources_timeout)

    async def wait_for_streams(
        self, names: Sequence[str], *, owner: str, within: float, every: float = 0.5
    ) -> None:
        """Wait until every stream (or KV bucket's stream) in ``names`` exists: their
        ``owner`` creates them (``libs.runner.access.OWNER``). Says which it waits for at
        once and every 10 s; ``StreamsMissing``, naming them, after ``within`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        said = float("-inf")
        missing = list(names)
        while True:
            missing = [name for name in missing if not await self._exists(name)]
            checkpoint()
            if not missing:
                if said > float("-inf"):
                    log.info("streams ready", owner=owner)
                return
            now = loop.time()
            if now >= deadline:
                raise StreamsMissing(
                    f"{self.name}: streams {', '.join(missing)} do not exist after {within:g} s "
                    f"(only {owner} creates them: is it running? may this user read their info?)"
                )
            if now - said >= 10.0:
                log.info("waiting for streams", streams=missing, owner=owner)
                said = now
            await asyncio.sleep(every)

    async def _exists(self, stream: str) -> bool:
        try:
            await self.js.stream_info(stream)
        except nats.js.errors.NotFoundError:
            return False
        except (TimeoutError, nats.errors.TimeoutError, nats.errors.ConnectionClosedError):
            return False  # NATS away (or no permission): asked again until the deadline
        return True

    async def _update(self, config: StreamConfig) -> None:
        """With NATS auth only the actuator may change a stream's configuration (a
        RePublish could turn a decision into an action): another service goes on with the
        stream as it is, and says so."""
        try:
            await self.js.update_stream(config)
        except (TimeoutError, nats.errors.TimeoutError):
            why = "no permission, or NATS did not answer: the actuator updates it"
            log.warning("stream configuration differs; not updated", stream=config.name, why=why)

    async def _sources_active(self, stream: str, *, within: float) -> None:
        deadline = asyncio.get_running_loop().time() + within
        while True:
            info = await self.js.stream_info(stream)
            idle = [s.name for s in info.sources or [] if s.active is None or s.active < 0]
            if not idle:
                return
            if asyncio.get_running_loop().time() > deadline:
                log.warning("stream sources not active yet", stream=stream, sources=idle)
                return
            await asyncio.sleep(0.02)

    async def publish(
        self,
        subject: str,
        event: msgspec.Struct,
        *,
        msg_id: str | None = None,
        ttl: str | None = None,
    ) -> int:
        try:
            seq = await publishing.publish(self.js, subject, event, msg_id=msg_id, ttl=ttl)
        except Exception as exc:
            self._note_refusal([exc])
            raise
        self.write_refused = ""
        return seq

    async def publish_many(
        self, items: Sequence[tuple[str, msgspec.Struct, str | None] | publishing.Outgoing]
    ) -> None:
        try:
            await publishing.publish_many(self.js, items)
        except publishing.PublishError as exc:
            self._note_refusal([error for _, error in exc.failed])
            raise
        self.write_refused = ""

    def _note_refusal(self, errors: Sequence[BaseException]) -> None:
        """Remember a write refused for want of space (readiness: ``storage.problem``)."""
        full = [e for e in errors if storage.refused_for_space(e)]
        if full:
            self.write_refused = str(full[0]) or repr(full[0])
            self.write_refused_at = time.monotonic()

    def consume(
        self,
        filter_subject: str | tuple[str, ...],
        *,
        type_: Any,
        durable: str | None = None,
        deliver: Delivery = "all",
        batch: int = 256,
        max_deliver: int = 5,
        ack_wait: float = 30.0,
        stream: str | None = None,
    ) -> Subscription[Any]:
        """A pull consumer on ``filter_subject`` (or several subjects of one stream);
        iterate it for ``Message``s."""
        config = consumer_config(
            filter_subject,
            durable=durable,
            deliver=deliver,
            batch=batch,
            max_deliver=max_deliver,
            ack_wait=ack_wait,
        )
        sub: Subscription[Any] = Subscription(
            self, filter_subject, type_=type_, config=config, batch=batch, stream=stream
        )
        self._subscriptions.add(sub)
        return sub

    def forget(self, sub: Subscription[Any]) -> None:
        self._subscriptions.discard(sub)

    async def snapshot(
        self, filter_subject: str, type_: Any, *, stream: str | None = None, recover: bool = True
    ) -> list[Any]:
        """The latest decoded event of every subject under ``filter_subject`` (``recover``:
        on K8S, a poison one's last good revision from HISTORY; else it is left out)."""
        return await snapshotting.snapshot(
            self.nc, self.js, filter_subject, type_=type_, stream=stream, recover=recover
        )

    async def close(self) -> None:
        """Close subscriptions, flush pending acks and publishes, disconnect."""
        if self._follow is not None:
            self._follow.cancel()
        for sub in list(self._subscriptions):
            await sub.close()
        if self.nc.is_closed:
            return
        with contextlib.suppress(nats.errors.Error, asyncio.TimeoutError):
            await self.nc.flush(timeout=5)
        await self.nc.close()
