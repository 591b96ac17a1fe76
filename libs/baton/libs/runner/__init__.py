"""The one runner every Baton service runs on: a ``Spec`` declares the service once,
a ``Runner`` runs it live, ``baton replay`` feeds its recordings (``ordering``).
See ``docs/runner.md``."""

from baton.libs.runner.feeding import BusFeed, Cut, Feed, Item
from baton.libs.runner.running import Runner
from baton.libs.runner.serving import run_spec, serve
from baton.libs.runner.spec import Input, Route, Spec, Timer, action_route

__all__ = [
    "BusFeed",
    "Cut",
    "Feed",
    "Input",
    "Item",
    "Route",
    "Runner",
    "Spec",
    "Timer",
    "action_route",
    "run_spec",
    "serve",
]
