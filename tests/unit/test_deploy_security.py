"""deploy/ keeps intruders out: NATS runs with one nkey user per service and per node
agent (the users ``baton nats-config`` generates), each service connects as its own
user with only its own seed mounted, every client speaks TLS and checks NATS against
its CA, and only the bridge and the actuator carry a Kubernetes API token (agents:
none)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import pytest

from baton.libs.runner import access
from baton.services.cli.natsconfig import TLS_HOSTS, specs
from tests.unit.test_deploy import AGENTS, BASE, CERT_MANAGER, CONTROL, of, render, workloads

pytestmark = pytest.mark.unit
API_CLIENTS = {"baton-bridge", "baton-actuator", "baton-callout"}  # callout: TokenReviews


def container(workload: dict[str, Any]) -> dict[str, Any]:
    (found,) = workload["spec"]["template"]["spec"]["containers"]
    return found  # type: ignore[no-any-return]


def env_of(workload: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container(workload).get("env", [])}


def volume_at(workload: dict[str, Any], path: str) -> dict[str, Any]:
    """The volume mounted at the folder holding ``path``."""
    mounts = {m["mountPath"]: m["name"] for m in container(workload)["volumeMounts"]}
    folder = next(m for m in mounts if path == m or path.startswith(m.rstrip("/") + "/"))
    return volumes_of(workload)[mounts[folder]]


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
    namespaced = {s["name"] for b in of("RoleBinding").values() for s in b["subjects"]}
    assert namespaced == {"baton-callout"}  # the agents' pods, listed (tests/unit/test_deploy.py)


def test_agents_have_no_rbac_and_no_api_token() -> None:
    agent = of("DaemonSet")["baton-agent"]
    pod = agent["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == "baton-agent"  # whose tokens the callout takes
    assert of("ServiceAccount")["baton-agent"]["automountServiceAccountToken"] is False
    for binding in of("ClusterRoleBinding").values():
        assert all(s.get("namespace") != AGENTS for s in binding["subjects"])


def test_each_service_connects_to_nats_as_its_own_user_with_only_its_own_seed() -> None:
    users = {spec.name for spec in specs()} | {access.CALLOUT}
    keys = set()
    for name, workload in workloads().items():
        if workload["kind"] != "Deployment":
            continue
        env = env_of(workload)
        assert "BATON_NATS_URL" not in env, f"{name}: the URL carries no credentials"
        seed = env["BATON_NATS_NKEY_SEED_FILE"]
        secret = volume_at(workload, seed)["secret"]
        assert secret["secretName"] == "baton-nats", name
        (item,) = secret["items"]  # its own key only: no other service's seed in its pod
        assert item["key"] == name.removeprefix("baton-"), name
        assert seed.endswith("/" + item["path"]), name
        pod = workload["spec"]["template"]["spec"]
        user = pod["securityContext"]["runAsUser"]  # the seed is readable by it, no one else
        assert secret["defaultMode"] == 0o440 and pod["securityContext"]["fsGroup"] == user
        keys.add(item["key"])
    assert keys <= users  # every key is a user baton nats-config writes (creds/services)
    assert users - keys <= {"bandwidth", "health"} - keys  # nothing deployed without its user


def test_every_nats_client_speaks_tls_and_checks_the_server_against_the_ca() -> None:
    maps = of("ConfigMap")
    for config in ("baton", "baton-agent"):
        assert maps[config]["data"]["BATON_NATS_URL"].startswith("tls://"), config
    ca_file = maps["baton"]["data"]["BATON_NATS_CA_FILE"]
    for name, workload in workloads().items():
        if name == "nats":
            continue
        volume = volume_at(workload, ca_file)
        assert volume["configMap"]["name"] == "baton-nats-ca", name
    nats = of("StatefulSet")["nats"]
    conf = maps["nats-config"]["data"]["nats.conf"]
    cert = re.search(r"cert_file: (\S+)", conf)
    assert cert is not None and "key_file: /etc/nats/tls/tls.key" in conf
    assert volume_at(nats, cert[1])["secret"]["secretName"] == "nats-tls"


def test_the_nats_certificate_is_made_for_the_name_clients_use() -> None:
    """By cert-manager (the overlay: a CA of its own, a server certificate from it) or by
    ``baton nats-config --make-tls``: either way for the host in BATON_NATS_URL."""
    host = urlsplit(of("ConfigMap")["baton"]["data"]["BATON_NATS_URL"]).hostname
    certificate = of("Certificate", CERT_MANAGER)["nats"]
    assert certificate["spec"]["secretName"] == "nats-tls"
    assert host in certificate["spec"]["dnsNames"]
    issuer = of("Issuer", CERT_MANAGER)[certificate["spec"]["issuerRef"]["name"]]
    ca = of("Certificate", CERT_MANAGER)[issuer["spec"]["ca"]["secretName"]]
    assert ca["spec"]["isCA"] is True
    assert host in TLS_HOSTS


def test_the_agent_connects_with_its_pods_token_for_nats_and_no_seed() -> None:
    """No agents' Secret: a projected token (audience nats, short-lived) that the
    callout reviews; the one the callout expects (deploy/base/callout.yaml)."""
    agent = of("DaemonSet")["baton-agent"]
    env = env_of(agent)
    assert "BATON_AGENT_NATS_CREDENTIALS_DIR" not in env
    volume = volume_at(agent, env["BATON_AGENT_NATS_TOKEN_FILE"])
    (source,) = volume["projected"]["sources"]
    token = source["serviceAccountToken"]
    assert token["audience"] == "nats" and token["expirationSeconds"] <= 3600
    assert env["BATON_AGENT_NATS_TOKEN_FILE"].endswith("/" + token["path"])
    assert not any("secret" in v for v in volumes_of(agent).values())
    assert "BATON_NATS_URL" not in env  # the URL carries no credentials
    callout = env_of(of("Deployment")["baton-callout"])
    assert (callout["BATON_CALLOUT_NAMESPACE"], callout["BATON_CALLOUT_SERVICE_ACCOUNT"]) == (
        AGENTS, "baton-agent")  # fmt: skip
    issuer = volume_at(of("Deployment")["baton-callout"], callout["BATON_CALLOUT_ISSUER_SEED_FILE"])
    assert issuer["secret"]["secretName"] == "baton-callout-issuer"
    kick = volume_at(of("Deployment")["baton-callout"], callout["BATON_CALLOUT_KICK_SEED_FILE"])
    assert kick["secret"]["items"] == [{"key": access.CALLOUT_KICK, "path": "seed"}]  # closes
    # a deleted pod's agent (docs/security.md); a key nats-config writes


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


def test_the_nats_servers_route_to_each_other_over_tls_and_check_their_peers() -> None:
    """The cluster block has its own TLS (peers verified against the CA the clients use)
    and the certificate may be used by a route's dialling side (client auth)."""
    conf = of("ConfigMap")["nats-config"]["data"]["nats.conf"]
    cluster = conf[conf.index("cluster {") :]
    block = cluster[cluster.index("tls {") : cluster.index("}")]
    assert "verify: true" in block
    ca = re.search(r"ca_file: (\S+)", block)
    assert ca is not None
    nats = of("StatefulSet")["nats"]
    assert volume_at(nats, ca[1])["configMap"]["name"] == "baton-nats-ca"
    certificate = of("Certificate", CERT_MANAGER)["nats"]
    assert {"server auth", "client auth"} <= set(certificate["spec"]["usages"])
