"""What every service process shares: settings, logs, the ops endpoint, signal handling."""

from baton.libs.runtime.entry import run_service
from baton.libs.runtime.errors import SettingsError
from baton.libs.runtime.heap import tune_gc
from baton.libs.runtime.logging import configure_logging
from baton.libs.runtime.ops import OPS_PORTS, OpsServer, serve_ops
from baton.libs.runtime.settings import load_settings
from baton.libs.runtime.signals import run_until_signalled

__all__ = [
    "OPS_PORTS",
    "OpsServer",
    "SettingsError",
    "configure_logging",
    "load_settings",
    "run_service",
    "run_until_signalled",
    "serve_ops",
    "tune_gc",
]
