"""docs/deploy.md's check before installing, against ``baton up``: a server-side dry run
of the cert-manager overlay (``kubectl apply --dry-run=server -k
deploy/overlays/cert-manager``) answers every object as the API server would take it,
exits 0, and changes nothing: not Baton's webhook configurations that ``baton up``
registered, not its namespace, and creates none of the rest."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
import yaml

from tests.e2e.test_readme import Shell, shell  # noqa: F401 - the fixture
from tests.pipeline import until_sync

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

    done = shell.attempt(f"{SOURCE}; kubectl apply --dry-run=server -k {OVERLAY}")

    assert done.returncode == 0, done.stderr[-3000:]
    answered = [line for line in done.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(answered) == len(yaml_docs(shell)), done.stdout
    assert objects(shell, listed) == before
    assert process.poll() is None, log.read_text()[-3000:]


def yaml_docs(shell: Shell) -> list[Any]:  # noqa: F811
    return [d for d in yaml.safe_load_all(shell.run(f"kubectl kustomize {OVERLAY}")) if d]
