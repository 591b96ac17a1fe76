"""What every service process shares: settings, logs, the ops endpoint, signal handling."""

from libs.runtime.entry import run_service
from libs.runtime.logging import configure_logging
from libs.runtime.ops import OPS_PORTS, OpsServer, serve_ops
from libs.runtime.settings import SettingsError, load_settings
from libs.runtime.signals import run_until_signalled

__all__ = [
    "OPS_PORTS",
    "OpsServer",
    "SettingsError",
    "configure_logging",
    "load_settings",
    "run_service",
    "run_until_signalled",
    "serve_ops",
]
