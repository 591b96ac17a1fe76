"""The one shape of a service's ``run(argv)``: flags, settings, logs, serve until signalled."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import msgspec

from baton.libs.runtime.errors import SettingsError
from baton.libs.runtime.logging import configure_logging
from baton.libs.runtime.signals import run_until_signalled

S = TypeVar("S", bound=msgspec.Struct)


def run_service(
    argv: list[str],
    *,
    name: str,
    description: str,
    load: Callable[[str | None], S],
    serve: Callable[[S], Coroutine[Any, Any, None]],
    dry_run: str = "",
) -> int:
    """Parse ``--settings FILE`` (and ``--dry-run`` when ``dry_run`` says what it does),
    load the settings or exit 2 naming the bad key, then serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog=f"baton {name}", description=description)
    parser.add_argument("--settings", help="YAML or JSON file of settings (environment wins)")
    if dry_run:
        parser.add_argument("--dry-run", action="store_true", help=dry_run)
    args = parser.parse_args(argv)
    try:
        settings = load(args.settings)
    except SettingsError as exc:
        parser.exit(2, f"baton {name}: {exc}\n")
    if getattr(args, "dry_run", False):
        settings = msgspec.structs.replace(settings, dry_run=True)
    configure_logging(service=name)
    deadline = float(getattr(settings, "stop_grace_s", 10.0)) + 10.0
    asyncio.run(run_until_signalled(lambda: serve(settings), deadline=deadline))
    return 0
