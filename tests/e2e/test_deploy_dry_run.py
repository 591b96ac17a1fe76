"""docs/deploy.md's check before installing, against ``baton up``: a server-side dry run
of the cert-manager overlay (``kubectl apply --dry-run=server -k
deploy/overlays/cert-manager``) answers every object as the API server would take it,
exits 0, and changes nothing: not Baton's webhook configurations that ``baton up``
registered, not its namespace, and creates none of the rest. Then, on the same cluster,
docs/security.md's NATS users: ``baton nats-config`` writes them and its ``kubectl
create secret`` lines make the Secrets the Deployments mount, holding those files."""

from __future__ import annotations

import base64
import json
import shutil
from typing import Any

import pytest
import yaml

from tests.e2e.test_readme import Shell, shell  # noqa: F401 - the fixture
from tests.pipeline import until_sync
from tests.readme import scenario

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

OVERLAY = "deploy/overlays/cert-manager"
SOURCE = "set -a; . ./ep.env; set +a"  # baton up's endpoints: KUBECONFIG among them


def kinds(shell: Shell) -> list[str]:  # noqa: F811 - the fixture's name
    """The overlay's kinds as ``kubectl get`` takes them (Kind.group)."""
    docs = yaml.safe_load_all(shell.run(f"kubectl kustomize {OVERLAY}"))
    found = set()
    for doc in docs:
        group = doc["apiVersion"].rpartition("/")[0]
        found.add(f"{doc['kind']}.{group}" if group else doc["kind"])
    return sorted(found)


def objects(shell: Shell, listed: list[str]) -> dict[tuple[str, str, str], Any]:  # noqa: F811
    """(kind, namespace, name) -> the object as served, for every object of those kinds."""
    done = shell.attempt(f"{SOURCE}; kubectl get {','.join(listed)} -A -o json")
    assert done.returncode == 0, done.stderr[-3000:]
    items = json.loads(done.stdout)["items"]
    return {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in items
    }


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl on PATH")
def test_a_server_side_dry_run_of_the_cert_manager_overlay_changes_nothing(
    shell: Shell,  # noqa: F811 - the fixture
) -> None:
    process = shell.start(
        "baton up --nodes 4 --workload none --endpoints-file ep.env", log="up.log"
    )
    log = shell.cwd / "up.log"
    registered = "admission webhook registered"
    until_sync(lambda: registered in log.read_text() or process.poll() is not None,
               within=120, what="baton up's webhook registered")  # fmt: skip
    assert process.poll() is None, log.read_text()[-3000:]
    listed = kinds(shell)
    assert {"Certificate.cert-manager.io", "Issuer.cert-manager.io", "Deployment.apps"} <= set(
        listed
    )
    before = objects(shell, listed)
    assert ("MutatingWebhookConfiguration", "", "baton") in before  # what baton up registered
    assert ("Namespace", "", "baton-system") in before

    (dry_run,) = scenario("on-baton-up", "docs/deploy.md")
    assert dry_run.endswith(f" -k {OVERLAY}")
    done = shell.attempt(f"{SOURCE}; {dry_run}")

    assert done.returncode == 0, done.stderr[-3000:]
    answered = [line for line in done.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(answered) == len(yaml_docs(shell)), done.stdout
    assert objects(shell, listed) == before
    assert process.poll() is None, log.read_text()[-3000:]
    _the_nats_secrets_as_docs_security_says(shell)
    _nats_tls_both_ways_docs_security_says(shell)


def _the_nats_secrets_as_docs_security_says(shell: Shell) -> None:  # noqa: F811
    for line in scenario("on-baton-up", "docs/security.md"):
        shell.run(f"{SOURCE}; {line}")  # one shell each time: the variables reach it
    said = shell.run(f"{SOURCE}; kubectl -n baton-system get secrets -o json")
    made = {s["metadata"]["name"]: s for s in json.loads(said)["items"]}
    assert sorted(made) == ["baton-callout-issuer", "baton-nats", "nats-auth"], said[-3000:]

    def held(name: str) -> dict[str, bytes]:
        assert made[name]["type"] == "Opaque"
        return {k: base64.b64decode(v) for k, v in made[name]["data"].items()}

    creds = shell.cwd / "creds"
    services = {f.name: f.read_bytes() for f in (creds / "services").iterdir()}
    assert {"gang", "admission", "callout", "callout-kick"} <= set(services)  # a key each
    assert held("baton-nats") == services
    assert held("nats-auth") == {"auth.conf": (shell.cwd / "auth.conf").read_bytes()}
    assert held("baton-callout-issuer") == {"issuer": (creds / "callout-issuer").read_bytes()}
    assert b"auth_callout" in held("nats-auth")["auth.conf"]  # --callout: the issuer's key


def _nats_tls_both_ways_docs_security_says(shell: Shell) -> None:  # noqa: F811
    """Without cert-manager: ``--make-tls``, the server's Secret, the CA for the clients in
    both namespaces, and the base applied. Then with it: the CA copied out of the Secret
    cert-manager issued (put there here as cert-manager would) into the same ConfigMaps."""
    for line in scenario("nats-tls-make", "docs/security.md"):
        shell.run(f"{SOURCE}; {line}")
    tls = shell.cwd / "tls"
    secret = _get(shell, "baton-system", "secret", "nats-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert base64.b64decode(secret["data"]["tls.crt"]) == (tls / "tls.crt").read_bytes()
    for ns in ("baton-system", "baton-agent"):
        held = _get(shell, ns, "configmap", "baton-nats-ca")["data"]["ca.crt"]
        assert held.encode() == (tls / "ca.crt").read_bytes(), ns
    assert _get(shell, "baton-system", "deployment", "baton-gang")["kind"] == "Deployment"

    for ns in ("baton-system", "baton-agent"):  # the other way, on the same cluster
        shell.run(f"{SOURCE}; kubectl -n {ns} delete configmap baton-nats-ca")
    issued = {"ca.crt": tls / "ca.crt", "tls.crt": tls / "tls.crt", "tls.key": tls / "tls.key"}
    data = {k: base64.b64encode(v.read_bytes()).decode() for k, v in issued.items()}
    meta = {"name": "baton-nats-ca", "namespace": "baton-system"}
    body = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": meta,
            "data": data}  # fmt: skip
    (shell.cwd / "issued.json").write_text(json.dumps(body))
    shell.run(f"{SOURCE}; kubectl create -f issued.json")  # what cert-manager would issue
    for line in scenario("nats-tls-cert-manager", "docs/security.md"):
        shell.run(f"{SOURCE}; {line}")
    assert (shell.cwd / "ca.crt").read_bytes() == (tls / "ca.crt").read_bytes()
    for ns in ("baton-system", "baton-agent"):
        held = _get(shell, ns, "configmap", "baton-nats-ca")["data"]["ca.crt"]
        assert held.encode() == (tls / "ca.crt").read_bytes(), ns


def _get(shell: Shell, ns: str, kind: str, name: str) -> Any:  # noqa: F811
    return json.loads(shell.run(f"{SOURCE}; kubectl -n {ns} get {kind} {name} -o json"))


def yaml_docs(shell: Shell) -> list[Any]:  # noqa: F811
    return [d for d in yaml.safe_load_all(shell.run(f"kubectl kustomize {OVERLAY}")) if d]
