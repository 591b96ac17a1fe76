"""The one runner every Baton service runs on: a ``Spec`` declares the service once,
a ``Runner`` runs it live, ``baton replay`` feeds its recordings (``ordering``).
See ``docs/runner.md``."""

from libs.runner.feeding import BusFeed, Cut, Feed, Item
from libs.runner.running import Runner
from libs.runner.serving import serve
from libs.runner.spec import Input, Route, Spec, Timer

__all__ = ["BusFeed", "Cut", "Feed", "Input", "Item", "Route", "Runner", "Spec", "Timer", "serve"]
