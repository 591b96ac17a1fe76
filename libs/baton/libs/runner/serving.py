"""A service process: connect to NATS, have its streams, serve ops, run the runner.

``serve(spec, settings)`` is a whole bus-fed service. A service with more to run
beside its core (admission's webhook) or another feed (bridge, actuator) passes
``make`` to build its runner and ``beside`` for the rest; both stop together. Every
service holds a lease (``leasing``): run two replicas and one leads, the other stands
by and takes over within ``BATON_LEASE_TTL_S`` of the leader's death.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from baton.libs.bus import Bus, storage
from baton.libs.runner import access
from baton.libs.runner.leasing import Lease
from baton.libs.runner.running import Runner
from baton.libs.runner.spec import Spec
from baton.libs.runtime.entry import run_service
from baton.libs.runtime.ops import serve_ops
from baton.libs.runtime.settings import Base, load_settings

S = TypeVar("S", bound=Base)


async def serve(
    spec: Spec[Any],
    settings: Base,
    *,
    make: Callable[[Bus], Awaitable[Runner[Any]]] | None = None,
    beside: Callable[[Runner[Any]], Coroutine[Any, Any, None]] | None = None,
) -> None:
    bus = await Bus.connect(settings.nats_url, cluster=settings.cluster, name=spec.name,
                            ca_file=settings.nats_ca_file,
                            seed_file=settings.nats_nkey_seed_file)  # fmt: skip
    bus.replicas, bus.nodes = settings.stream_replicas, settings.cluster_nodes
    try:
        await prepare_streams(bus, spec, authenticated=bool(settings.nats_nkey_seed_file))
        if make is not None:
            runner = await make(bus)
        else:
            runner = Runner(spec, bus=bus, settings=settings, dry_run=settings.dry_run,
                            stop_grace=settings.stop_grace_s)  # fmt: skip
        if runner.lease is None:  # every service is a singleton: one leader, fenced
            runner.lease = Lease(bus, spec.name, ttl=settings.lease_ttl_s)
        # Not ready while NATS is away or JetStream stores nothing (a full store, or
        # JetStream disabled after one): nothing it decides can be published or read.
        store = storage.Watch(bus)
        watching = asyncio.create_task(store.run(), name=f"{spec.name}-store")
        ready = lambda: runner.ready and bus.nc.is_connected and not store.problem  # noqa: E731
        ops = await serve_ops(settings.ops_port, ready=ready, service=spec.name)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(runner.run(), name=f"{spec.name}-runner")
                if beside is not None:
                    group.create_task(beside(runner), name=f"{spec.name}-beside")
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
            await ops.close()
    finally:
        await bus.close()


STREAMS_WAIT_S = 300.0  # how long a service waits for the owner to create its streams


async def prepare_streams(
    bus: Bus, spec: Spec[Any], *, authenticated: bool, within: float = STREAMS_WAIT_S
) -> None:
    """With NATS auth (``authenticated``: the service has its own user) the streams'
    owner (``access.OWNER``) creates or updates every stream and the lease bucket, and
    any other service waits (``within`` seconds, then ``StreamsMissing``) for those it
    needs: it may not create one (docs/security.md). Without auth (compose.yaml, a
    service run alone against a local NATS) every service makes them, as the owner
    would: nobody is kept out there anyway. Services start in any order."""
    if spec.name == access.OWNER or not authenticated:
        await bus.ensure_streams()
        return
    needed = access.needed_streams(spec, bus.cluster)
    await bus.wait_for_streams(needed, owner=access.OWNER, within=within)


def run_spec(
    argv: list[str],
    spec: Spec[Any],
    *,
    prefix: str,
    dry_run: str,
    load: Callable[[str | None], Any] | None = None,
) -> int:
    """``baton <service>`` for a service that is its ``Spec`` served as it is: settings
    (``--settings``, ``<prefix>*`` variables; ``load`` when a service checks more than its
    fields), ``--dry-run``, then ``serve`` until stopped."""
    return run_service(
        argv,
        name=spec.name,
        description=f"{spec.description} Settings: {prefix}* variables.",
        load=load or (lambda file: load_settings(spec.settings, prefix, file=file)),
        serve=lambda settings: serve(spec, settings),
        dry_run=dry_run,
    )
