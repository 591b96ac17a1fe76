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

from baton.services.cli.view import Summary

STYLE = {"ok": "green", "starting": "yellow", "DOWN": "bold red", "seen": "cyan"}


def draw(summary: Summary, *, console: Console | None = None) -> RenderableType:
    """The whole screen. With ``console``, the recent decisions keep the newest lines
    that fit below the rest (the live screen crops what does not fit at the bottom)."""
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
        ("webhook", summary.webhook),
        ("egress", summary.egress),
        ("bus", (summary.bus,)),
    ):
        if lines:
            cluster.add_row(label, "\n".join(lines))
    parts.append(Panel(cluster, title="cluster", title_align="left"))
    parts.append(_services(summary))
    newest = list(summary.recent)
    if console is not None:
        used = len(console.render_lines(Group(*parts), console.options, pad=False))
        room = max(1, console.size.height - used - 2)  # the panel's two borders
        newest = newest[-room:]
    recent = Text("\n".join(newest) or "(none yet)", overflow="ellipsis", no_wrap=True)
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


def _services(summary: Summary, *, across: int = 2) -> RenderableType:
    """Two services to a row, so that the recent decisions keep their room."""
    table = Table.grid(padding=(0, 2))
    for _ in range(across):
        table.add_column(no_wrap=True)
        table.add_column(no_wrap=True)
        table.add_column(overflow="fold", ratio=1)
    services = list(summary.services)
    for i in range(0, len(services), across):
        row: list[RenderableType] = []
        for service in services[i : i + across]:
            row += [service.name, Text(service.mark, style=STYLE[service.mark]), service.detail]
        table.add_row(*row)
    return Panel(table, title="services", title_align="left", expand=True)


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
        self._live.update(draw(summary, console=self._live.console), refresh=True)
