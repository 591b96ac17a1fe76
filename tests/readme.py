"""The docs' commands, and where each one runs as written.

Every command in a ```sh block of README.md and of docs/*.md is listed in ``DOCS``,
under its file, with the place that runs it (``PLACES``): an e2e scenario that runs it
as written, ``.ci/run`` (which must contain it verbatim), or a unit test that checks
what a convenience wraps. ``tests/unit/test_readme.py`` fails when a doc and this table
drift apart, so a new command comes with the test that runs it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
INSTALL: Final = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]'"
COMMENT = re.compile(r"\s+#\s.*$")


def commands(path: Path = ROOT / "README.md") -> list[str]:
    """Each command of the ```sh blocks, in order (those indented under a list item
    too): comments dropped, a line ending in ``\\`` joined with the next (one space), as
    the shell reads them."""
    found, inside, held = [], False, ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            inside = line.strip() == "```sh" if not inside else False
            continue
        text = COMMENT.sub("", line).strip()
        if not inside or not text or text.startswith("#"):
            continue
        if text.endswith("\\"):
            held += text.removesuffix("\\").rstrip() + " "
            continue
        found.append(held + text)
        held = ""
    return found


# place -> where it is. "ci": .ci/run, verbatim; "ci:deploy": .ci/run too, where a Docker
# daemon / a cluster is there to run it; the others: the test that runs the commands.
E2E = "tests/e2e/test_readme.py::"
PLACES: Final = {
    "ci": ".ci/run",
    "ci:deploy": ".ci/run",
    "quickstart": E2E + "test_the_quickstart_demo_draws_a_full_screen_status",
    "watching": E2E + "test_watching_it_with_prometheus_and_status",
    "by-hand": E2E + "test_running_the_pieces_by_hand_then_tail_and_replay",
    "faults": E2E + "test_breaking_nodes_and_watching_baton_react",
    "without-cert-manager": E2E + "test_deploying_without_cert_manager_as_docs_deploy_says",
    "on-baton-up": "tests/e2e/test_deploy_dry_run.py::"
    "test_a_server_side_dry_run_of_the_cert_manager_overlay_changes_nothing",
    "nats-tls-make": "tests/e2e/test_deploy_dry_run.py::"
    "test_a_server_side_dry_run_of_the_cert_manager_overlay_changes_nothing",
    "nats-tls-cert-manager": "tests/e2e/test_deploy_dry_run.py::"
    "test_a_server_side_dry_run_of_the_cert_manager_overlay_changes_nothing",
    "chaos": "tests/e2e/test_chaos.py::test_baton_keeps_its_promises_while_its_pieces_die",
    # `just chaos` is the chaos run (the Justfile's recipe, checked), not run again
    "just": "tests/unit/test_readme.py::test_just_chaos_is_the_chaos_run",
    "layers": "tests/unit/test_layers.py::test_the_command_prints_the_floors_and_the_drawing",
}

# a doc -> its commands -> the place that runs each (PLACES)
DOCS: Final[dict[str, dict[str, str]]] = {}
DOCS["README.md"] = {
    f"{INSTALL} && .venv/bin/baton up --nodes 64 --workload synthetic": "quickstart",
    f"{INSTALL} && .venv/bin/pytest": "ci",
    "baton up --prometheus --endpoints-file up.env": "watching",
    "set -a; . ./up.env; set +a": "watching",
    "baton status": "watching",
    "nats-server -js -sd ./nats &": "by-hand",
    "baton sim --nodes 64 --listen 127.0.0.1:6443 --kubeconfig ./kc "
    "--trace synthetic --speed 60 &": "by-hand",
    "baton sim fault --kubeconfig ./kc xid gpu-00012 --xid 79 --gpu 3": "by-hand",
    "baton sim heal --kubeconfig ./kc xid gpu-00012": "by-hand",
    "kubectl --kubeconfig ./kc get nodes -l baton.io/rack=gpu-rack-000": "by-hand",
    "export KUBECONFIG=./kc BATON_NATS_URL=nats://127.0.0.1:4222": "by-hand",
    "baton bridge &": "by-hand",
    "baton actuator &": "by-hand",
    "baton gang &": "by-hand",
    "baton reporter &": "by-hand",
    "BATON_ADMISSION_TLS_SELF_SIGNED_DIR=./tls baton admission &": "by-hand",
    "baton install-webhook --url https://127.0.0.1:8443 --ca ./tls/tls.crt": "by-hand",
    "baton admission --check-teams deploy/examples/teams.yaml": "by-hand",
    "baton bandwidth &": "by-hand",
    "BATON_AGENT_SIM_URL=http://127.0.0.1:6443 baton agent --fleet &": "by-hand",
    "kubectl --kubeconfig ./kc create namespace baton-system": "by-hand",
    "kubectl --kubeconfig ./kc label namespace baton-system baton.io/webhook=skip": "by-hand",
    "baton health &": "by-hand",
    "set -a; . ./ep.env; set +a": "faults",
    "baton sim fault xid gpu-00003 --xid 79 --gpu 2": "faults",
    "baton sim fault nic-down random:4 --seed 1": "faults",
    "baton sim fault xid share:0.4@gpu --xid 48": "faults",
    "baton tail 'health.>' --since 10m --count 20": "faults",
    "kubectl get nodes -o custom-columns=NAME:.metadata.name,TAINTS:.spec.taints[*].key": "faults",
    "baton sim heal xid gpu-00003": "faults",
    "kubectl label node gpu-00003 baton.io/remediation-": "faults",
    'baton health pause --reason "driver rollout"': "faults",
    "baton health resume": "faults",
    "baton tail 'placement.>' --since 10m | head": "by-hand",
    "baton tail 'k8s.pod.team-a.>' --since last --count 5": "by-hand",
    "baton tail 'action.>' --json": "by-hand",
    "baton why team-a/job-s5": "by-hand",
    "baton replay --record run.jsonl": "by-hand",
    "baton replay --from run.jsonl --gang team-a/job-s5": "by-hand",
    "baton replay --from run.jsonl --compare": "by-hand",
    "docker build -f deploy/Dockerfile -t ghcr.io/baton-project/baton:0.1.0 .": "ci:deploy",
    "kubectl apply -f deploy/crds/": "ci:deploy",
    "kubectl apply -k deploy/overlays/cert-manager": "ci:deploy",
}


DOCS["docs/deploy.md"] = {
    "kubectl apply -f deploy/crds/": "ci:deploy",
    "docker build -f deploy/Dockerfile -t ghcr.io/baton-project/baton:0.1.0 .": "ci:deploy",
    "kubectl apply -k deploy/overlays/cert-manager": "ci:deploy",
    "kubectl apply --dry-run=server -k deploy/overlays/cert-manager": "on-baton-up",
    "kubectl apply -k deploy/base": "without-cert-manager",
    "baton admission --make-cert ./tls": "without-cert-manager",
    "kubectl -n baton-system create secret tls baton-admission-tls --cert=tls/tls.crt "
    "--key=tls/tls.key": "without-cert-manager",
    "kubectl patch mutatingwebhookconfiguration baton --type=json -p "
    '"[{\\"op\\":\\"add\\",\\"path\\":\\"/webhooks/0/clientConfig/caBundle\\",'
    '\\"value\\":\\"$(base64 -w0 tls/tls.crt)\\"}]"': "without-cert-manager",
    "kubectl patch validatingwebhookconfiguration baton --type=json -p "
    '"[{\\"op\\":\\"add\\",\\"path\\":\\"/webhooks/0/clientConfig/caBundle\\",'
    '\\"value\\":\\"$(base64 -w0 tls/tls.crt)\\"}]"': "without-cert-manager",
}
DOCS["docs/packaging.md"] = {
    ".venv/bin/python -m tests.layers": "layers",
    ".venv/bin/python -m tests.layers --dot": "layers",
}
DOCS["docs/replay.md"] = {
    "baton replay --record run.jsonl --nats nats://127.0.0.1:4222 --cluster c1": "by-hand",
    "baton replay --from run.jsonl": "by-hand",
    "baton replay --from run.jsonl --gang team-a/job-s5": "by-hand",
    "baton replay --from run.jsonl --compare": "by-hand",
    "baton replay --from run.jsonl --service admission": "by-hand",
}
DOCS["docs/security.md"] = {
    "baton nats-config --cluster c1 --callout --credentials creds --auth-only "
    "--out auth.conf": "on-baton-up",
    "kubectl -n baton-system create secret generic nats-auth --from-file=auth.conf": "on-baton-up",
    "kubectl -n baton-system create secret generic baton-nats "
    "--from-file=creds/services": "on-baton-up",
    "kubectl -n baton-system create secret generic baton-callout-issuer "
    "--from-file=issuer=creds/callout-issuer": "on-baton-up",
}
# the two ways to NATS's TLS: both run on one baton up, one after the other
DOCS["docs/security.md"] |= {
    "kubectl -n baton-system get secret baton-nats-ca -o jsonpath='{.data.ca\\.crt}' "
    "| base64 -d > ca.crt": "nats-tls-cert-manager",
    "kubectl -n baton-system create configmap baton-nats-ca --from-file=ca.crt": (
        "nats-tls-cert-manager"
    ),
    "kubectl -n baton-agent create configmap baton-nats-ca --from-file=ca.crt": (
        "nats-tls-cert-manager"
    ),
    "baton nats-config --make-tls tls": "nats-tls-make",
    "kubectl -n baton-system create secret tls nats-tls --cert=tls/tls.crt "
    "--key=tls/tls.key": "nats-tls-make",
    "kubectl -n baton-system create configmap baton-nats-ca --from-file=tls/ca.crt": (
        "nats-tls-make"
    ),
    "kubectl -n baton-agent create configmap baton-nats-ca --from-file=tls/ca.crt": (
        "nats-tls-make"
    ),
    "kubectl apply -k deploy/base": "nats-tls-make",
}
DOCS["docs/reliability.md"] = {
    "just chaos": "just",
    "python -m tests.chaos --duration 60 --nodes 16 --keep chaos-logs": "chaos",
}


def scenario(name: str, doc: str = "README.md") -> list[str]:
    """The commands of ``doc`` that place ``name`` runs, in the doc's order."""
    return [c for c in commands(ROOT / doc) if DOCS[doc].get(c) == name]
