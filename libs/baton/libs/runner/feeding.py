"""Feeds: where a runner's inputs come from, as ``Item``s, in the order the core sees them.

``BusFeed`` is every bus-reading service's feed: the snapshot of the objects it reads
(K8S, last event per subject), then one consumer on HISTORY with a filter subject per
input, so the core sees HISTORY's order live and ``baton replay`` feeds the very same
order (``ordering`` says which messages, for both). The consumer is ephemeral and
does not ack: it is rebuilt at every start, and a message is never redelivered out
of order. A payload that does not decode is copied to the dead-letter subject with
the reason and skipped; it never reaches the core.

A service whose inputs are not on the bus (the bridge reads the Kubernetes API; the
actuator reads a durable work consumer and its own API calls' outcomes) brings its
own feed with the same three methods.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import nats.errors
import nats.js.errors
import structlog
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from baton.libs.bus import Bus
from baton.libs.bus.deadletter import publish_dead_letter
from baton.libs.bus.pulling import ConsumerGone, Puller
from baton.libs.bus.snapshotting import last_good
from baton.libs.bus.streams import HISTORY, K8S, TELEMETRY
from baton.libs.runner.ordering import Follow, is_k8s, origin
from baton.libs.runner.spec import Spec
from baton.libs.runtime.stopping import checkpoint, retry
from baton.proto import subjects
from baton.proto.codec import Undecodable, decode

log = structlog.get_logger("baton.runner")


class Cut(NamedTuple):
    """Where a run began: the snapshot's K8S (and TELEMETRY) sequence and the HISTORY
    sequence after which live inputs follow (``proto.runner.Started``)."""

    k8s_seq: int
    history_seq: int
    telemetry_seq: int = 0

    def cuts(self) -> dict[str, int]:
        return {subjects.K8S: self.k8s_seq, subjects.TELEMETRY: self.telemetry_seq}


@dataclass(slots=True)
class Item:
    """One input for the core. ``settle`` (if any) is awaited once the outputs the input
    caused are stored (an ack, for a feed whose consumer acks)."""

    event: Any
    subject: str = ""
    seq: int = 0  # stream sequence (HISTORY's for a BusFeed), for logs
    raw: Msg | None = None  # the message, for a dead letter
    settle: Callable[[], Awaitable[None]] | None = None


class Feed(Protocol):
    @property
    def caught_up(self) -> bool: ...  # everything held at start was taken

    async def start(self) -> Cut | None: ...
    async def take(self, limit: int) -> list[Item]: ...  # waits for at least one
    async def close(self) -> None: ...


class BusFeed:
    def __init__(self, bus: Bus, spec: Spec[Any], *, batch: int = 512) -> None:
        self.bus, self.spec, self.batch = bus, spec, batch
        self.caught_up = False
        self._type = spec.input_types
        self._backlog: deque[Item] = deque()
        self._puller: Puller | None = None
        self._consumer = ""
        self._follow = Follow({})
        self._live_behind = 0  # live messages pending when the consumer was made
        self._last = 0  # the last HISTORY sequence taken (where a new consumer resumes)
        self._gone = ""  # the consumer went away while a batch was being taken: reopen
        self._history_cut = 0  # HISTORY's last sequence when the snapshot began

    async def start(self) -> Cut:
        """Snapshot, then open the live consumer right after the HISTORY message that was
        last before the snapshot was taken (``ordering`` explains why that is exact)."""
        cluster, js = self.bus.cluster, self.bus.js
        history = subjects.stream_name(cluster, HISTORY)
        history_seq = int((await js.stream_info(history)).state.last_seq)
        self._history_cut = history_seq
        k8s_seq = await self._snapshot(K8S, self.spec.bootstrap_patterns(cluster, subjects.K8S))
        telemetry_seq = await self._snapshot(
            TELEMETRY, self.spec.bootstrap_patterns(cluster, subjects.TELEMETRY)
        )
        cut = Cut(k8s_seq=k8s_seq, history_seq=history_seq, telemetry_seq=telemetry_seq)
        self._follow = Follow(cut.cuts())
        self._last = history_seq
        behind = await self._open()
        self._live_behind = behind
        self.caught_up = not self._backlog and self._live_behind == 0
        log.info("feed started", snapshot=len(self._backlog), k8s_seq=k8s_seq,
                 history_seq=history_seq, behind=behind)  # fmt: skip
        return cut

    async def _open(self) -> int:
        """(Re)open the live consumer right after the last HISTORY message taken: the
        same sequence of inputs whether or not it had to be made again."""
        history = subjects.stream_name(self.bus.cluster, HISTORY)
        config = ConsumerConfig(
            filter_subjects=self.spec.patterns(self.bus.cluster),
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=self._last + 1,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=300.0,
            mem_storage=True,
        )
        info = await self.bus.js.add_consumer(history, config=config)
        self._consumer = info.name
        if self._puller is not None:
            await self._puller.stop()
        self._puller = Puller(self.bus.nc, stream=history, consumer=info.name, batch=self.batch)
        await self._puller.start()
        return int(info.num_pending or 0)

    async def _reopen(self, why: str) -> None:
        log.warning("feed consumer gone; making it again", after_seq=self._last, why=why)
        await retry(self._open, what="reopening the feed", max_delay=2.0)

    async def _snapshot(self, what: str, patterns: list[str]) -> int:
        """Load the last message of every state subject of one stream into the backlog;
        returns the stream sequence the snapshot holds up to."""
        if not patterns:
            return 0
        stream = subjects.stream_name(self.bus.cluster, what)
        config = ConsumerConfig(
            filter_subjects=patterns,
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=60.0,
            mem_storage=True,
        )
        info = await self.bus.js.add_consumer(stream, config=config)
        left, high = int(info.num_pending or 0), 0
        puller = Puller(self.bus.nc, stream=stream, consumer=info.name, batch=min(4096, left))
        await puller.start()
        try:
            while left > 0:  # exactly what the consumer held when it was made: all <= the cut
                raw = await puller.next()
                left -= 1
                seq = int(raw.metadata.sequence.stream)
                high = max(high, seq)
                item = await self._decode(raw, seq=seq) or await self._last_good(raw.subject)
                if item is not None:
                    self._backlog.append(item)
        finally:
            await puller.stop()
            with contextlib.suppress(nats.js.errors.Error, nats.errors.Error):
                await self.bus.js.delete_consumer(stream, info.name)
        return high

    async def take(self, limit: int) -> list[Item]:
        items: list[Item] = []
        while self._backlog and len(items) < limit:
            items.append(self._backlog.popleft())
        if items:
            self.caught_up = not self._backlog and self._live_behind == 0
            return items
        assert self._puller is not None, "BusFeed.start() first"
        if self._gone:
            why, self._gone = self._gone, ""
            await self._reopen(why)
        while len(items) < limit:
            try:
                # Wait for the first; then take what has already arrived: one input a
                # batch would cost every input its own publish and ack round trip (a
                # burst of 150 verdicts waited them out one after another).
                raw = self._puller.next_ready() if items else await self._puller.next()
            except ConsumerGone as exc:
                if items:
                    self._gone = str(exc)  # hand these over first; the next take reopens
                    break
                await self._reopen(str(exc))
                continue
            if raw is None:
                break
            checkpoint()
            self._last = int(raw.metadata.sequence.stream)
            self.caught_up = self.caught_up or int(raw.metadata.num_pending) == 0
            if not self._follow.admit(raw.subject, origin(raw.headers)[1]):
                continue
            item = await self._decode(raw, seq=int(raw.metadata.sequence.stream))
            if item is not None:
                items.append(item)
        return items

    async def _decode(self, raw: Msg, *, seq: int) -> Item | None:
        try:
            event = decode(raw.data, self._type)
        except Undecodable as exc:
            await publish_dead_letter(
                self.bus.js, raw, cluster=self.bus.cluster, reason=str(exc),
                error_class="bad-input",
            )  # fmt: skip
            return None
        return Item(event=event, subject=raw.subject, seq=seq, raw=raw)

    async def _last_good(self, subject: str) -> Item | None:
        """The object's last revision that decodes, from HISTORY up to the cut (K8S keeps
        only the poison that replaced it); None for other streams or when none is left."""
        if not is_k8s(subject):
            return None
        history = subjects.stream_name(self.bus.cluster, HISTORY)
        found = await last_good(self.bus.nc, self.bus.js, stream=history, subject=subject,
                                type_=self._type, upto=self._history_cut)  # fmt: skip
        if found is None:
            log.warning("poison in the snapshot, no good revision in history", subject=subject)
            return None
        event, raw = found
        seq = origin(raw.headers)[1]
        log.warning("poison in the snapshot; its last good revision kept", subject=subject,
                    k8s_seq=seq)  # fmt: skip
        return Item(event=event, subject=subject, seq=seq, raw=raw)

    async def close(self) -> None:
        if self._puller is not None:
            await self._puller.stop()
        if self._consumer and not self.bus.nc.is_closed:
            history = subjects.stream_name(self.bus.cluster, HISTORY)
            with contextlib.suppress(nats.js.errors.Error, nats.errors.Error):
                await self.bus.js.delete_consumer(history, self._consumer)
