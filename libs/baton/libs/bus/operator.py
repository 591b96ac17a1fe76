"""How the ``baton`` tools (status, tail, why, replay --record, health pause) reach the bus.

One try, as the operator (``BATON_NATS_NKEY_SEED_FILE``, ``BATON_NATS_CA_FILE``): a
refusal or an unreachable server is :class:`NoBus`, one line that names what to set or
check, never nats-py's retries with a traceback each. A refused connection (nothing
listens there) is told at once; a server that does not answer gets ``CONNECT_S`` a try.
Errors after the connection is up (a permissions violation) go to ``on_error`` as one
line, also without a traceback.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client

from baton.libs.bus.connection import env_auth_options
from baton.libs.runtime.nkey import SEED_SETTING

CONNECT_S = 5.0


class NoBus(Exception):
    """The bus cannot be read: one line for the user, saying what to set or check."""


def refusal(url: str, exc: BaseException) -> str:
    """One line for a failed connect: what went wrong and what to set."""
    text = "connection refused" if isinstance(exc, ConnectionRefusedError) else str(exc)
    text = text or type(exc).__name__
    lowered = text.lower()
    if "authorization" in lowered or "authentication" in lowered or "nkey" in lowered:
        return (
            f"NATS at {url} refused the connection ({text.strip()}): set {SEED_SETTING} to "
            "the operator's nkey seed file (baton up prints it as 'NATS nkey (admin)')"
        )
    if "permissions violation" in lowered:
        return (
            f"NATS at {url} does not let this user read the bus ({text.strip()}): set "
            f"{SEED_SETTING} to the operator's nkey seed file"
        )
    return (
        f"cannot reach NATS at {url} ({text.strip()}): is Baton running? set BATON_NATS_URL "
        "or --nats to its NATS"
    )


async def connect(
    url: str,
    *,
    name: str,
    on_error: Callable[[str], None] | None = None,
    on_closed: Callable[[], None] | None = None,
    auth: dict[str, Any] | None = None,
) -> Client:
    """A connection to ``url`` as the operator, or :class:`NoBus`. It does not reconnect:
    ``on_closed`` is called when it is lost (a follower such as ``tail`` then ends).
    ``auth``: nats-py's auth options (default: ``env_auth_options``)."""
    up = False
    failed: list[Exception] = []  # each try's error while connecting, the last one told

    async def closed() -> None:
        if up and on_closed is not None:
            on_closed()

    async def errors(exc: Exception) -> None:  # nats-py would log each with a traceback
        if not up:
            failed.append(exc)
        elif on_error is not None:
            on_error(refusal(url, exc))

    try:
        nc = await asyncio.wait_for(
            nats.connect(
                url,
                name=name,
                error_cb=errors,
                closed_cb=closed,
                allow_reconnect=False,
                # nats-py reads 0 as "no limit" for the first connect and, without
                # reconnect_time_wait=0, sleeps 2 s between tries: 1 and 0 give each
                # server one more try at once, then NoServersError
                max_reconnect_attempts=1,
                reconnect_time_wait=0,
                connect_timeout=CONNECT_S,
                **(env_auth_options() if auth is None else auth),
            ),
            timeout=CONNECT_S * 2,
        )
    except nats.errors.NoServersError as exc:
        raise NoBus(refusal(url, failed[-1] if failed else exc)) from None
    except (TimeoutError, OSError, nats.errors.Error) as exc:
        raise NoBus(refusal(url, exc)) from None
    up = True
    return nc
