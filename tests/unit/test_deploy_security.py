"""deploy/ keeps intruders out: NATS runs with one user per service and per node agent
(the users ``baton nats-config`` generates), each service connects as its own user,
and only the bridge and the actuator carry a Kubernetes API token (agents: none)."""

from __future__ import annotations

from typing import Any

import pytest

from baton.libs.runner import access
from baton.services.cli.natsconfig import specs
from tests.unit.test_deploy import AGENTS, BASE, CONTROL, of, render, workloads

pytestmark = pytest.mark.unit
API_CLIENTS = {"baton-bridge", "baton-actuator"}


def container(workload: dict[str, Any]) -> dict[str, Any]:
    (found,) = workload["spec"]["template"]["spec"]["containers"]
    return found  # type: ignore[no-any-return]


def nats_url_source(workload: dict[str, Any]) -> dict[str, Any] | None:
    for env in container(workload).get("env", []):
        if env["name"] == "BATON_NATS_URL":
            return env.get("valueFrom")  # type: ignore[no-any-return]
    return None


def test_only_the_bridge_and_the_actuator_carry_an_api_token() -> None:
    accounts = of("ServiceAccount")
    for name, workload in workloads().items():
        pod = workload["spec"]["template"]["spec"]
        account = pod.get("serviceAccountName", "default")
        default = accounts.get(account, {}).get("automountServiceAccountToken", True)
        mounted = pod.get("automountServiceAccountToken", default)
        assert mounted is (name in API_CLIENTS), name
    bound = {s["name"] for b in of("ClusterRoleBinding").values() for s in b["subjects"]}
    assert bound == API_CLIENTS
    assert not of("Role") and not of("RoleBinding")


def test_agents_have_no_rbac_and_no_token() -> None:
    agent = of("DaemonSet")["baton-agent"]
    pod = agent["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod.get("serviceAccountName", "default") == "default"
    for binding in of("ClusterRoleBinding").values():
        assert all(s.get("namespace") != AGENTS for s in binding["subjects"])


def test_each_service_connects_to_nats_as_its_own_user() -> None:
    users = {spec.name for spec in specs()}
    keys = set()
    for name, workload in workloads().items():
        if workload["kind"] != "Deployment":
            continue
        source = nats_url_source(workload)
        assert source is not None, f"{name}: BATON_NATS_URL not from the baton-nats Secret"
        ref = source["secretKeyRef"]
        assert ref["name"] == "baton-nats" and ref["key"] == name.removeprefix("baton-"), name
        keys.add(ref["key"])
    assert keys <= users  # every key is a user baton nats-config writes (creds/services)
    assert users - keys <= {"bandwidth", "health"} - keys  # nothing deployed without its user


def test_the_agent_reads_its_nodes_credentials_from_a_secret() -> None:
    agent = of("DaemonSet")["baton-agent"]
    env = {e["name"]: e.get("value") for e in container(agent)["env"]}
    where = env["BATON_AGENT_NATS_CREDENTIALS_DIR"]
    mounts = {m["mountPath"]: m["name"] for m in container(agent)["volumeMounts"]}
    volumes = {v["name"]: v for v in agent["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mounts[where]]["secret"]["secretName"] == "baton-nats-agents"
    assert access.agent_user_name("gpu-1.example") == "agent-gpu-1_example"  # the file name


def volumes_of(workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}


def test_nats_requires_the_generated_users() -> None:
    config = of("ConfigMap")["nats-config"]["data"]["nats.conf"]
    nats = of("StatefulSet")["nats"]
    assert container(nats)["args"] == ["-c", "/etc/nats/config/nats.conf"]
    assert "include ../auth/auth.conf" in config  # relative to the config's folder
    mounts = {m["mountPath"]: m["name"] for m in container(nats)["volumeMounts"]}
    assert volumes_of(nats)[mounts["/etc/nats/config"]]["configMap"]["name"] == "nats-config"
    volumes = {v["name"]: v for v in nats["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mounts["/etc/nats/auth"]]["secret"]["secretName"] == "nats-auth"
    assert all(d["metadata"].get("namespace") in (None, CONTROL, AGENTS) for d in render(BASE))
