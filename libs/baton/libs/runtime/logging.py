"""structlog JSON lines on stderr, with context bound per message (subject, seq, key).

configure_logging(service="gang")
log = structlog.get_logger()
with structlog.contextvars.bound_contextvars(subject=..., seq=...):
    log.info("placed", gang=...)   # {"event": "placed", "service": "gang", "subject": ...}
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog


def configure_logging(service: str, *, level: str = "INFO", json: bool = True) -> None:
    """Configure structlog (and the stdlib root logger, for libraries) once, at start-up."""
    numeric = logging.getLevelNamesMapping().get(level.upper())
    if numeric is None:
        raise ValueError(f"log level {level!r} is not one of DEBUG, INFO, WARNING, ERROR")

    def add_service(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        event.setdefault("service", service)
        return event

    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            add_service,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    _route_stdlib(renderer, add_service, level=max(numeric, logging.WARNING))


class _BatonHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks our handler so configuring twice replaces it instead of adding another."""


def _route_stdlib(renderer: Any, add_service: Any, *, level: int) -> None:
    """Library logs (nats, aiohttp) through the same renderer, at WARNING and above."""
    handler = _BatonHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.stdlib.add_log_level,
                structlog.stdlib.add_logger_name,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                add_service,
            ],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _BatonHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
