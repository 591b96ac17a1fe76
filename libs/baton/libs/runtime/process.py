"""Which process this is, as Baton's records name it for the people who read them."""

from __future__ import annotations

import os
import socket


def instance() -> str:
    """``host/pid``: where a service's start (``Started``) or its webhook's word
    (``WebhookServing``) came from."""
    return f"{socket.gethostname()}/{os.getpid()}"
