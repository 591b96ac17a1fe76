"""The agent's DaemonSet: no API access, least privilege, settings the agent accepts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from baton.services.agent.main import load
from baton.services.cli.main import COMMANDS

pytestmark = pytest.mark.unit

BASE = Path(__file__).resolve().parents[2] / "deploy" / "base"


def daemonset() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((BASE / "agent.yaml").read_text()) if d]
    (doc,) = [d for d in docs if d["kind"] == "DaemonSet"]
    return doc


def test_the_agent_cannot_reach_the_api_server() -> None:
    pod = daemonset()["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    # its own account (whose tokens the NATS auth callout takes), which no role binds to
    assert pod["serviceAccountName"] == "baton-agent"
    bindings = [
        d
        for f in BASE.glob("*.yaml")
        for d in yaml.safe_load_all(f.read_text())
        if d and d["kind"] in {"RoleBinding", "ClusterRoleBinding"}
    ]
    subjects = [s for b in bindings for s in b["subjects"]]
    assert subjects and not [s for s in subjects if s["name"] == "baton-agent"]


def test_least_privilege() -> None:
    pod = daemonset()["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert not pod.get("hostPID") and not pod.get("hostIPC")
    assert pod["securityContext"]["runAsNonRoot"] is True
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert not security.get("privileged")
    # tc needs NET_ADMIN, which Kubernetes grants to uid 0 only: that one and nothing else
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    assert (security["runAsUser"], security["runAsNonRoot"]) == (0, False)
    assert all(m.get("readOnly") for m in container["volumeMounts"])


def test_the_manifest_runs_baton_agent_with_settings_it_accepts() -> None:
    (container,) = daemonset()["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] in COMMANDS
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    settings = load(None, env)  # raises naming the key if one is wrong
    assert settings.host_root == "/host" and settings.ops_port == 9119
    sources = {e["name"]: e["valueFrom"] for e in container["env"] if "valueFrom" in e}
    assert sources["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
