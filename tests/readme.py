"""The README's commands, and where each one runs as written.

Every command in a ```sh block of README.md is listed in ``RUN`` with the place that
runs it: ``tests/e2e/test_readme.py`` (the scenario named), or ``.ci/run`` (which must
contain it verbatim). ``tests/unit/test_readme.py`` fails when the README and this
table drift apart, so a new README command comes with the test that runs it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
INSTALL: Final = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]'"
COMMENT = re.compile(r"\s+#\s.*$")


def commands(path: Path = ROOT / "README.md") -> list[str]:
    """Each command of the ```sh blocks, comments dropped, in order."""
    found, inside = [], False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```sh" if not inside else False
            continue
        text = COMMENT.sub("", line).strip()
        if inside and text and not text.startswith("#"):
            found.append(text)
    return found


# command -> where it runs: "ci" (.ci/run, verbatim), "ci:deploy" (.ci/run, where a
# Docker daemon / a cluster is there to run it), or the e2e scenario that runs it.
RUN: Final = {
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
    "baton replay --from run.jsonl --gang team-a/job-s3": "by-hand",
    "baton replay --from run.jsonl --compare": "by-hand",
    "docker build -f deploy/Dockerfile -t ghcr.io/baton-project/baton:0.1.0 .": "ci:deploy",
    "kubectl apply -f deploy/crds/": "ci:deploy",
    "kubectl apply -k deploy/overlays/cert-manager": "ci:deploy",
}


def scenario(name: str) -> list[str]:
    """The README's commands that scenario ``name`` runs, in README order."""
    return [c for c in commands() if RUN.get(c) == name]
