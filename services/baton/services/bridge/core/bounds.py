"""Values no real object has: the bridge refuses them (to the dead-letter subject, with
the reason) instead of publishing them. The rules are ``proto.bounds``, which every
consumer applies again when it decodes; the bridge's node bound can only be lower
(``BATON_BRIDGE_MAX_NODE_GPUS``)."""

from __future__ import annotations

from baton.proto.bounds import Bounds, impossible

__all__ = ["Bounds", "impossible"]
