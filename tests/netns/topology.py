"""A node with pods, an internal peer and a 100 Mbit/s internet uplink, in network namespaces.

    pod0 (10.99.1.2) ─┐                      ┌─ up0 10.99.200.1 ══TBF 100 Mbit══ inet 10.99.200.2
    pod1 (10.99.1.3) ─┼─ br0 10.99.1.1 node ─┤
    ...              ─┘   (ingress hook)     └─ in0 10.99.2.1 ──────────────── peer 10.99.2.2

Addresses are 10.99.x.y inside the namespaces only; ``10.99.0.0/17`` is "internal"
(pods and the peer), ``10.99.200.0/24`` is "the internet". ``Topology.destroy``
deletes every namespace (and with them every link); it is safe to call twice.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

INTERNAL = "10.99.0.0/17"
INTERNET_HOST = "10.99.200.2"
PEER_HOST = "10.99.2.2"
BOTTLENECK = "100mbit"


def missing() -> str:
    """Why these tests cannot run here ('' when they can)."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    for tool in ("ip", "tc", "iperf3"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return ""


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=check, capture_output=True, text=True, timeout=30)


@dataclass
class Topology:
    prefix: str
    pods: int = 2
    made: list[str] = field(default_factory=list)
    servers: list[subprocess.Popen[str]] = field(default_factory=list)

    def ns(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def pod_ip(self, i: int) -> str:
        return f"10.99.1.{2 + i}"

    def build(self) -> None:
        for name in ("node", "inet", "peer", *(f"pod{i}" for i in range(self.pods))):
            sh("ip", "netns", "add", self.ns(name))
            self.made.append(self.ns(name))
            sh("ip", "-n", self.ns(name), "link", "set", "lo", "up")
        node = self.ns("node")
        sh("ip", "netns", "exec", node, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        sh("ip", "-n", node, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", node, "addr", "add", "10.99.1.1/24", "dev", "br0")
        sh("ip", "-n", node, "link", "set", "br0", "up")
        for i in range(self.pods):
            pod = self.ns(f"pod{i}")
            self._veth(f"v{i}", pod, host_ip="", far_ip=f"{self.pod_ip(i)}/24")
            sh("ip", "-n", node, "link", "set", f"v{i}", "master", "br0")
            sh("ip", "-n", pod, "route", "add", "default", "via", "10.99.1.1")
        self._veth("up0", self.ns("inet"), host_ip="10.99.200.1/24", far_ip="10.99.200.2/24")
        sh("ip", "-n", self.ns("inet"), "route", "add", "10.99.0.0/16", "via", "10.99.200.1")
        sh("tc", "-n", node, "qdisc", "add", "dev", "up0", "root", "tbf",
           "rate", BOTTLENECK, "burst", "256kb", "latency", "100ms")  # fmt: skip
        self._veth("in0", self.ns("peer"), host_ip="10.99.2.1/24", far_ip="10.99.2.2/24")
        sh("ip", "-n", self.ns("peer"), "route", "add", "10.99.0.0/16", "via", "10.99.2.1")

    def _veth(self, name: str, far: str, *, host_ip: str, far_ip: str) -> None:
        node = self.ns("node")
        sh("ip", "-n", node, "link", "add", name, "type", "veth", "peer", "name", "eth0",
           "netns", far)  # fmt: skip
        if host_ip:
            sh("ip", "-n", node, "addr", "add", host_ip, "dev", name)
        sh("ip", "-n", node, "link", "set", name, "up")
        sh("ip", "-n", far, "addr", "add", far_ip, "dev", "eth0")
        sh("ip", "-n", far, "link", "set", "eth0", "up")

    def serve(self, where: str, *ports: int) -> None:
        """iperf3 servers in namespace ``where``; each answers until destroy()."""
        for port in ports:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", self.ns(where), "iperf3", "-s", "-J", "-p", str(port)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
            )  # fmt: skip
            self.servers.append(proc)
        deadline = time.monotonic() + 5
        while not all(self._listening(where, p) for p in ports):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for iperf3 servers on {ports}")
            time.sleep(0.05)

    def _listening(self, where: str, port: int) -> bool:
        out = sh("ip", "netns", "exec", self.ns(where), "ss", "-ltn", check=False).stdout
        return f":{port} " in out

    def send(self, pod: int, host: str, port: int, seconds: int) -> subprocess.Popen[str]:
        """An iperf3 client in ``pod{pod}`` sending to ``host:port``; read it with ``result``."""
        return subprocess.Popen(
            ["ip", "netns", "exec", self.ns(f"pod{pod}"), "iperf3", "-c", host, "-p", str(port),
             "-t", str(seconds), "-J", "--get-server-output"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def destroy(self) -> None:
        for proc in self.servers:
            proc.kill()
            proc.wait(timeout=10)
        self.servers.clear()
        for name in reversed(self.made):
            sh("ip", "netns", "del", name, check=False)
        self.made.clear()


def result(proc: subprocess.Popen[str], *, within: float = 60) -> dict[str, Any]:
    out, err = proc.communicate(timeout=within)
    if proc.returncode != 0:
        raise AssertionError(f"iperf3 failed ({proc.returncode}): {err or out[-500:]}")
    return json.loads(out)  # type: ignore[no-any-return]


def received_bps(report: dict[str, Any], *, after: float = 1.0) -> float:
    """Mean rate the receiver saw over its 1-second intervals starting at ``after`` seconds."""
    sums = [i["sum"] for i in report["server_output_json"]["intervals"]]
    rates = [
        s["bits_per_second"] for s in sums if s["start"] >= after - 0.05 and s["seconds"] > 0.5
    ]
    if not rates:
        raise AssertionError(f"no receiver interval starts at {after}s or later: {sums}")
    return sum(rates) / len(rates)


def interval_bps(report: dict[str, Any]) -> list[tuple[float, float]]:
    """(start second, receiver bits per second) of each interval the server measured."""
    return [
        (i["sum"]["start"], i["sum"]["bits_per_second"])
        for i in report["server_output_json"]["intervals"]
    ]
