"""``baton``: one command whose subcommands run every service and tool.

Each subcommand is a ``module:function`` taking ``argv``; modules load lazily so
``baton tail`` does not import the simulator and a service's process holds only its
own code. This is the composition root: the one place that names every service.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable

from baton.libs.runtime.errors import SettingsError

COMMANDS: dict[str, tuple[str, str]] = {
    "up": (
        "baton.services.cli.up:run",
        "run the embedded default: NATS, simcluster and every service",
    ),
    "status": (
        "baton.services.cli.status:run",
        "print the status baton up shows, once, from the bus",
    ),
    "tail": ("baton.services.cli.tail:run", "pretty-print events from the bus as they arrive"),
    "sim": ("baton.services.simcluster.main:run", "serve a simulated GPU cluster's Kubernetes API"),
    "bridge": ("baton.services.bridge.main:run", "watch the API server once, fan out over NATS"),
    "gang": ("baton.services.gang.main:run", "all-or-nothing, topology-aware gang placement"),
    "actuator": ("baton.services.actuator.main:run", "the one rate-limited writer to the API"),
    "admission": ("baton.services.admission.main:run", "admission webhook, team quotas and taints"),
    "reporter": ("baton.services.reporter.main:run", "PodGroup status, pod conditions and Events"),
    "callout": ("baton.services.callout.main:run", "NATS auth callout: agents by pod token"),
    "bandwidth": (
        "baton.services.bandwidth.main:run",
        "egress fair shares: per-pod limits per node",
    ),
    "agent": (
        "baton.services.agent.main:run",
        "node agent: telemetry; applies egress limits with tc",
    ),
    "health": (
        "baton.services.health.main:run",
        "GPU node health: quarantine, drain, preflight checks",
    ),
    "autoscaler": (
        "baton.services.autoscaler.main:run",
        "grow pools by whole gangs, remove idle nodes",
    ),
    "balloon": ("baton.services.balloon.main:run", "warm headroom: placeholder pods on GPU pools"),
    "replay": ("baton.services.cli.replay:run", "replay recorded events into a core, offline"),
    "why": (
        "baton.services.cli.why:run",
        "why a gang or pod is waiting, and what would unblock it",
    ),
    "nats-config": (
        "baton.services.cli.natsconfig:run",
        "the nats-server config: one user per service and node agent, least privilege",
    ),
    "install-webhook": (
        "baton.services.cli.installing:run",
        "register admission's webhook with a simulated cluster (as baton up does)",
    ),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: baton <command> [options]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "baton <command> --help shows a command's options."]
    return "\n".join(lines)


def resolve(name: str) -> Callable[[list[str]], int | None]:
    target, _ = COMMANDS[name]
    module, _, function = target.partition(":")
    entry: Callable[[list[str]], int | None] = getattr(importlib.import_module(module), function)
    return entry


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in {"-h", "--help", "help"}:
        print(usage())
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"baton: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    try:
        return resolve(name)(rest) or 0
    except BrokenPipeError:  # | head: the reader has what it wanted; end quietly
        # Python flushes stdout again at exit: point it at /dev/null, no second error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except SettingsError as exc:  # e.g. a tool's BATON_NATS_NKEY_SEED_FILE that holds no seed
        print(f"baton {name}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
