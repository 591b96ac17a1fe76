"""deploy/ as kubectl renders it (`kubectl kustomize`): one reader and one writer of the
API, restricted Pod Security for the control plane, probes, resources, budgets and
spread, a headless Service for NATS, a webhook CA from cert-manager; and compose.yaml,
the Dockerfile and .dockerignore agree with them."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from baton.libs.kube import KINDS
from baton.libs.runtime.ops import OPS_PORTS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "base"
CERT_MANAGER = ROOT / "deploy" / "overlays" / "cert-manager"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
CONTROL, AGENTS = "baton-system", "baton-agent"
RESTRICTED_VOLUMES = {"configMap", "secret", "emptyDir", "projected", "downwardAPI",
                      "persistentVolumeClaim", "csi", "ephemeral"}  # fmt: skip
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass",
                  "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}  # fmt: skip


@functools.cache
def render(path: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed: it renders deploy/ as users apply it")
    done = subprocess.run([kubectl, "kustomize", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def of(kind: str, path: Path = BASE) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in render(path) if d["kind"] == kind}


def workloads() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for kind in ("Deployment", "StatefulSet", "DaemonSet"):
        found.update(of(kind))
    return found


def roles() -> dict[str, list[dict[str, Any]]]:
    return {name: d["rules"] for name, d in of("ClusterRole").items()}


def test_kustomization_lists_every_manifest() -> None:
    listed = set(yaml.safe_load((BASE / "kustomization.yaml").read_text())["resources"])
    present = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


def test_only_the_bridge_lists_and_watches() -> None:
    """Of Baton's own roles; ``baton-teams-reader`` is for people, bound to no service."""
    readers = {name for name, rules in roles().items()
               if any({"list", "watch"} & set(r["verbs"]) for r in rules)}  # fmt: skip
    assert readers == {"baton-bridge", "baton-teams-reader"}
    reader = {"apiGroups": ["baton.io"], "resources": ["teams"], "verbs": ["get", "list", "watch"]}
    assert roles()["baton-teams-reader"] == [reader]
    bound = {b["roleRef"]["name"] for b in of("ClusterRoleBinding").values()}
    assert "baton-teams-reader" not in bound


def test_the_bridge_may_list_and_watch_every_kind_it_watches() -> None:
    """Each path of ``libs.kube.KINDS`` (``/api/v1/<plural>``, ``/apis/<group>/<v>/<plural>``),
    alternatives included: a kind missing here would be refused (403) in a real cluster."""
    allowed = {(group, resource) for rule in roles()["baton-bridge"]
               if {"list", "watch"} <= set(rule["verbs"])
               for group in rule["apiGroups"] for resource in rule["resources"]}  # fmt: skip
    for kind in KINDS.values():
        for path in (kind.path, *kind.alternatives):
            parts = path.strip("/").split("/")
            group = "" if parts[0] == "api" else parts[1]
            assert (group, parts[-1]) in allowed, f"{kind.name}: {path}"


def test_only_the_actuator_writes() -> None:
    """``create tokenreviews`` (the auth callout's one right) is an authentication check,
    not a write: a TokenReview stores nothing, it only asks whose a token is."""
    checks = {("authentication.k8s.io", "tokenreviews", "create")}
    writers = {name for name, rules in roles().items()
               if any(WRITE_VERBS & set(r["verbs"]) - _checks(r, checks)
                      for r in rules)}  # fmt: skip
    assert writers == {"baton-actuator"}
    review = {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
              "verbs": ["create"]}  # fmt: skip
    assert roles()["baton-callout"] == [review]
    bindings = of("ClusterRoleBinding")
    for name in ("baton-bridge", "baton-actuator", "baton-callout"):
        (subject,) = bindings[name]["subjects"]
        assert subject == {"kind": "ServiceAccount", "name": name, "namespace": CONTROL}
    # the one namespaced right: the callout lists the agents' pods (which are still there)
    (listing,) = of("Role").values()
    assert listing["metadata"]["namespace"] == AGENTS
    assert listing["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    (bound,) = of("RoleBinding").values()
    assert bound["roleRef"]["name"] == listing["metadata"]["name"]
    assert bound["subjects"] == [bindings["baton-callout"]["subjects"][0]]


def _checks(rule: dict[str, Any], checks: set[tuple[str, str, str]]) -> set[str]:
    """The verbs of ``rule`` that are authentication checks (in ``checks``), not writes."""
    return {v for v in rule["verbs"] for g in rule["apiGroups"] for r in rule["resources"]
            if (g, r, v) in checks}  # fmt: skip


def test_every_service_runs_two_replicas_on_different_nodes_kept_through_drains() -> None:
    """One leads (a fenced lease), one stands by: a drain or a node's loss costs a takeover."""
    deployments = of("Deployment")
    budgets = {tuple(sorted(b["spec"]["selector"]["matchLabels"].items())): b
               for b in of("PodDisruptionBudget").values()}  # fmt: skip
    for name in ("baton-bridge", "baton-actuator", "baton-gang", "baton-admission",
                 "baton-reporter", "baton-health", "baton-bandwidth", "baton-autoscaler",
                 "baton-balloon", "baton-callout"):  # fmt: skip
        spec = deployments[name]["spec"]
        labels = spec["template"]["metadata"]["labels"]
        assert spec["replicas"] == 2, name
        assert spec.get("strategy", {}).get("type") != "Recreate", name
        anti = spec["template"]["spec"]["affinity"]["podAntiAffinity"]
        (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
        assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == labels, name
        assert budgets[tuple(sorted(labels.items()))]["spec"]["minAvailable"] == 1, name


def test_nats_is_a_three_node_jetstream_cluster_with_replicated_streams() -> None:
    nats = of("StatefulSet")["nats"]
    assert nats["spec"]["replicas"] == 3
    config = of("ConfigMap")["nats-config"]["data"]["nats.conf"]
    assert "jetstream" in config and config.count("nats-headless.baton-system.svc:6222") == 3
    assert of("ConfigMap")["baton"]["data"]["BATON_STREAM_REPLICAS"] == "3"
    budget = of("PodDisruptionBudget")["nats"]
    assert budget["spec"]["maxUnavailable"] == 1


def test_every_object_names_its_namespace() -> None:
    for doc in render(BASE):
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in doc["metadata"], doc["metadata"]["name"]
            continue
        agents = doc["metadata"]["name"] == "baton-agent" or doc["kind"] in ("Role", "RoleBinding")
        expected = AGENTS if agents else CONTROL
        assert doc["metadata"].get("namespace") == expected, doc["metadata"]["name"]
    namespaces = of("Namespace")
    labels = namespaces[CONTROL]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert all(ns["metadata"]["labels"]["baton.io/webhook"] == "skip" for ns in namespaces.values())
    shared = ("BATON_NATS_URL", "BATON_NATS_CA_FILE", "BATON_CLUSTER")
    maps = of("ConfigMap")
    assert {k: maps["baton"]["data"][k] for k in shared} == {
        k: maps["baton-agent"]["data"][k] for k in shared
    }


def _pod_is_restricted(name: str, pod: dict[str, Any]) -> list[str]:
    """The Pod Security Standard "restricted" (kubernetes.io/docs/concepts/security/
    pod-security-standards), plus a read-only root filesystem."""
    bad = []
    ctx = pod.get("securityContext", {})
    if any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")):
        bad.append("host namespaces")
    for volume in pod.get("volumes", []):
        if not set(volume) - {"name"} <= RESTRICTED_VOLUMES:
            bad.append(f"volume {volume['name']}")
    for c in pod["containers"] + pod.get("initContainers", []):
        sc = c.get("securityContext", {})
        if sc.get("runAsNonRoot", ctx.get("runAsNonRoot")) is not True:
            bad.append(f"{c['name']}: runAsNonRoot")
        if sc.get("runAsUser", ctx.get("runAsUser")) == 0:
            bad.append(f"{c['name']}: runs as root")
        if sc.get("allowPrivilegeEscalation") is not False or sc.get("privileged"):
            bad.append(f"{c['name']}: privilege escalation")
        caps = sc.get("capabilities", {})
        if caps.get("drop") != ["ALL"] or set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            bad.append(f"{c['name']}: capabilities")
        seccomp = sc.get("seccompProfile", ctx.get("seccompProfile", {})).get("type")
        if seccomp not in {"RuntimeDefault", "Localhost"}:
            bad.append(f"{c['name']}: seccomp")
        if sc.get("readOnlyRootFilesystem") is not True:
            bad.append(f"{c['name']}: writable root filesystem")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            bad.append(f"{c['name']}: hostPort")
    return [f"{name}: {b}" for b in bad]


def test_the_control_plane_meets_restricted_pod_security() -> None:
    control = {n: w for n, w in workloads().items() if w["metadata"]["namespace"] == CONTROL}
    assert set(control) == {"nats", "baton-bridge", "baton-actuator", "baton-gang",
                            "baton-admission", "baton-bandwidth", "baton-health",
                            "baton-reporter", "baton-autoscaler", "baton-balloon",
                            "baton-callout"}  # fmt: skip
    problems = [p for n, w in control.items()
                for p in _pod_is_restricted(n, w["spec"]["template"]["spec"])]  # fmt: skip
    assert problems == []


def test_every_container_has_probes_and_resources() -> None:
    for name, workload in workloads().items():
        for c in workload["spec"]["template"]["spec"]["containers"]:
            assert {"livenessProbe", "readinessProbe"} <= set(c), f"{name}: probes"
            requests, limits = c["resources"]["requests"], c["resources"]["limits"]
            assert {"cpu", "memory"} <= set(requests) and "memory" in limits, f"{name}"


def test_each_service_serves_ops_on_its_own_port_and_is_scraped_there() -> None:
    for name, workload in workloads().items():
        component = workload["metadata"]["labels"].get("app.kubernetes.io/component")
        if component is None:
            continue  # nats
        template = workload["spec"]["template"]
        (container,) = template["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["ops"] == OPS_PORTS[component], name
        assert template["metadata"]["annotations"]["prometheus.io/port"] == str(ports["ops"])
        env = {e["name"] for e in container.get("env", [])}
        assert not {"BATON_OPS_PORT", f"BATON_{component.upper()}_OPS_PORT"} & env or (
            component == "agent"
        )


def test_admission_survives_a_drain_and_spreads_over_nodes() -> None:
    admission = of("Deployment")["baton-admission"]
    pod = admission["spec"]["template"]["spec"]
    labels = admission["spec"]["template"]["metadata"]["labels"]
    budget = of("PodDisruptionBudget")["baton-admission"]
    assert budget["spec"]["selector"]["matchLabels"] == labels
    assert 0 < budget["spec"]["minAvailable"] < admission["spec"]["replicas"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == labels
    (container,) = pod["containers"]
    assert {"startupProbe", "livenessProbe", "readinessProbe"} <= set(container)


def test_nats_has_a_headless_governing_service() -> None:
    nats = of("StatefulSet")["nats"]
    services = of("Service")
    governing = services[nats["spec"]["serviceName"]]
    assert governing["spec"]["clusterIP"] == "None"
    assert governing["spec"]["selector"] == nats["spec"]["selector"]["matchLabels"]
    url = of("ConfigMap")["baton"]["data"]["BATON_NATS_URL"]
    assert url == "tls://nats.baton-system.svc:4222" and "nats" in services


def test_cert_manager_gives_the_webhooks_their_ca() -> None:
    certificate = of("Certificate", CERT_MANAGER)["baton-admission"]
    issuer = certificate["spec"]["issuerRef"]["name"]
    assert issuer in of("Issuer", CERT_MANAGER)
    secret = {v["name"]: v for v in of("Deployment")["baton-admission"]["spec"]["template"]
              ["spec"]["volumes"]}["tls"]["secret"]["secretName"]  # fmt: skip
    assert certificate["spec"]["secretName"] == secret
    service = of("Service")["baton-admission"]["metadata"]
    assert f"{service['name']}.{service['namespace']}.svc" in certificate["spec"]["dnsNames"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (config,) = of(kind, CERT_MANAGER).values()
        annotation = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        assert annotation == f"{CONTROL}/{certificate['metadata']['name']}"
        (hook,) = config["webhooks"]
        assert hook["clientConfig"]["service"]["name"] == service["name"]


def test_the_image_user_matches_the_manifests_and_ignores_the_rest() -> None:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    user = re.search(r"^USER (\d+)", dockerfile, re.M)
    assert user is not None
    for name, workload in workloads().items():
        if name != "nats":
            assert str(workload["spec"]["template"]["spec"]["securityContext"]["runAsUser"]) == (
                user.group(1)
            )
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    ignored = [line for line in lines if line and not line.startswith("#")]
    assert ignored[0] == "*"  # only what the image needs goes into the build context
    copied = set(re.findall(r"^COPY (.+) \S+$", dockerfile, re.M))
    allowed = {line.removeprefix("!").rstrip("/") for line in ignored if line.startswith("!")}
    for sources in copied:
        assert set(sources.split()) <= allowed, sources


def test_compose_runs_real_commands_with_flags_they_accept() -> None:
    from baton.services.cli.installing import parse_args as install_args
    from baton.services.cli.main import COMMANDS
    from baton.services.simcluster.main import parse_args

    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    commands = {
        name: service["command"]
        for name, service in compose["services"].items()
        if service.get("build") or service.get("image", "").startswith("baton")
    }
    assert set(commands) == {"sim", "bridge", "actuator", "gang", "admission", "reporter",
                             "install-webhook"}  # fmt: skip
    for argv in commands.values():
        assert argv[0] in COMMANDS, argv
    parse_args(commands["sim"][1:])  # exits (SystemExit) on a flag baton sim does not take
    install = install_args([*commands["install-webhook"][1:], "--kubeconfig", "k"])
    admission = compose["services"]["admission"]["environment"]
    assert str(install.ca).startswith(admission["BATON_ADMISSION_TLS_SELF_SIGNED_DIR"])
    assert admission["BATON_ADMISSION_TLS_HOSTS"] in install.url
    for name in ("bridge", "actuator", "gang", "admission", "reporter"):
        port = OPS_PORTS[name]
        assert compose["services"][name]["ports"] == [f"{port}:{port}"]


def test_the_pod_monitor_scrapes_every_service_as_baton_up_names_it() -> None:
    monitor = yaml.safe_load((ROOT / "deploy" / "prometheus" / "podmonitor.yaml").read_text())
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    (relabel,) = endpoint["relabelings"]
    assert relabel["targetLabel"] == "job" and relabel["replacement"] == "baton-$1"
    namespaces = set(monitor["spec"]["namespaceSelector"]["matchNames"])
    for name, workload in workloads().items():
        labels = workload["spec"]["template"]["metadata"]["labels"]
        if "app.kubernetes.io/component" not in labels:
            continue  # nats: no Prometheus endpoint of its own
        assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items(), name
        assert workload["metadata"]["namespace"] in namespaces
        ports = workload["spec"]["template"]["spec"]["containers"][0]["ports"]
        assert endpoint["port"] in {p["name"] for p in ports}


def test_preflight_pods_go_where_pod_security_admits_them() -> None:
    """DCGM's image runs as root: not in the restricted control-plane namespace."""
    health = of("Deployment")["baton-health"]["spec"]["template"]["spec"]
    (container,) = health["containers"]
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    where = env["BATON_HEALTH_PREFLIGHT_NAMESPACE"]
    namespace = of("Namespace")[where]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"


def test_nats_is_restarted_while_a_stream_cannot_write() -> None:
    """A write error on a full disk leaves the stream broken until the server restarts
    (nats-server 2.15: publishes time out after space returns; ``/healthz`` says 503,
    ``?js-enabled-only=true`` 200). The liveness probe is the whole ``/healthz``, so the
    kubelet restarts it and it comes back by itself once space returns."""
    (container,) = of("StatefulSet")["nats"]["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_nats_is_as_critical_as_the_services_that_cannot_run_without_it() -> None:
    """Every Baton workload outlives user pods under node pressure; NATS too, or the
    control plane stays up with no bus (agents are node-critical, as kubelet's peers)."""
    priorities = {name: w["spec"]["template"]["spec"].get("priorityClassName")
                  for name, w in workloads().items()}  # fmt: skip
    assert priorities.pop("baton-agent", None) == "system-node-critical"
    assert priorities["nats"] == "system-cluster-critical"
    assert set(priorities.values()) == {"system-cluster-critical"}, priorities


CRDS = "kubectl apply -f deploy/crds/"


def test_the_readme_and_docs_deploy_apply_the_crds_before_the_manifests() -> None:
    """The base does not hold the PodGroup CRD (a cluster with scheduler-plugins has one):
    each deploy guide applies deploy/crds/ first, and that path holds only CRDs."""
    for doc in (ROOT / "README.md", ROOT / "docs" / "deploy.md"):
        text = doc.read_text()
        assert CRDS in text, f"{doc.name} never applies deploy/crds/"
        first = text.index(CRDS)
        applies = [m.start() for m in re.finditer(r"kubectl apply -k deploy/", text)]
        assert applies and all(first < at for at in applies), f"{doc.name}: CRDs come first"
    for path in (ROOT / "deploy" / "crds").iterdir():
        kinds = {d["kind"] for d in yaml.safe_load_all(path.read_text()) if d}
        assert kinds == {"CustomResourceDefinition"}, path.name
