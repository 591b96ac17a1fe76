"""``baton up``'s full-screen status, drawn with ``rich`` from a ``view.Summary``.

The screen is the terminal's alternate screen: it is redrawn in place, so the
scrollback keeps only what was there before (and ``baton up``'s last lines after it
stops). Endpoints and ops ports stay at the top; long reasons wrap, never cut.
"""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from services.cli.view import Summary

STYLE = {"ok": "green", "starting": "yellow", "DOWN": "bold red", "seen": "cyan"}


def draw(summary: Summary) -> RenderableType:
    parts: list[RenderableType] = [Text(summary.title, style="bold")]
    if summary.endpoints:
        endpoints = Table.grid(padding=(0, 2))
        endpoints.add_column(style="cyan", no_wrap=True)
        endpoints.add_column(overflow="fold")
        for what, where in summary.endpoints:
            endpoints.add_row(what, where)
        parts.append(Panel(endpoints, title="endpoints", title_align="left"))
    parts.append(_teams(summary))
    cluster = Table.grid(padding=(0, 2))
    cluster.add_column(style="cyan", no_wrap=True)
    cluster.add_column(overflow="fold")
    for label, lines in (
        ("capacity", summary.capacity),
        ("health", summary.health),
        ("workload", summary.workload),
        ("egress", summary.egress),
        ("bus", (summary.bus,)),
    ):
        cluster.add_row(label, "\n".join(lines))
    parts.append(Panel(cluster, title="cluster", title_align="left"))
    parts.append(_services(summary))
    recent = Text("\n".join(summary.recent) or "(none yet)", overflow="fold")
    parts.append(Panel(recent, title="recent decisions", title_align="left"))
    return Group(*parts)


def _teams(summary: Summary) -> RenderableType:
    if summary.teams is None:
        return Panel(Text("no admission service on this bus"), title="teams", title_align="left")
    table = Table(expand=True, show_edge=False, pad_edge=False)
    for name, justify in (("team", "left"), ("quota", "right"), ("used", "right"),
                          ("borrowed", "right"), ("waiting", "right")):  # fmt: skip
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    table.add_column("head of queue: why it waits", overflow="fold", ratio=1)
    for row in summary.teams:
        head = f"{row.head}: {row.reason or 'queued'}" if row.head else ""
        table.add_row(row.name, str(row.quota), str(row.used), str(row.borrowed),
                      str(row.waiting), head)  # fmt: skip
    return Panel(table, title="teams", title_align="left")


def _services(summary: Summary) -> RenderableType:
    table = Table.grid(padding=(0, 2))
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    for service in summary.services:
        mark = Text(service.mark, style=STYLE[service.mark])
        table.add_row(service.name, mark, service.detail)
    return Panel(table, title="services", title_align="left")


class Screen:
    """The live full screen; ``show`` redraws it. Use as a context manager."""

    def __init__(self, console: Console | None = None) -> None:
        self._live = Live(console=console, screen=True, auto_refresh=False, transient=True)

    def __enter__(self) -> Screen:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.__exit__(None, None, None)

    def show(self, summary: Summary) -> None:
        self._live.update(draw(summary), refresh=True)
