"""The event bus: NATS JetStream with Baton's streams, dedup ids, typed consumers and dead letters.

    bus = await Bus.connect(url, cluster="c1", name="gang")
    await bus.ensure_streams()
    await bus.publish(subject, event, msg_id=...)
    async for msg in bus.consume(filter_subject, type_=K8sEvent, deliver="last_per_subject"):
        ...; await msg.ack()

See ``docs/bus.md``.
"""

from baton.libs.bus.connection import Bus
from baton.libs.bus.consuming import Delivery, Message, Subscription
from baton.libs.bus.publishing import Outgoing, PublishError
from baton.libs.bus.streams import stream_configs

__all__ = [
    "Bus",
    "Delivery",
    "Message",
    "Outgoing",
    "PublishError",
    "Subscription",
    "stream_configs",
]
