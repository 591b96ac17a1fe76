"""Server-side printing: Table columns and cells as upstream's printers make them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from baton.services.simcluster.api import tables

pytestmark = pytest.mark.unit

CREATED = "2026-11-22T00:00:00Z"
ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 22, tzinfo=UTC).timestamp()


def pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "team-a", "creationTimestamp": CREATED},
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "a"}, {"name": "b"}]},
        "status": status,
    }


def running(ready: bool = True, restarts: int = 0) -> dict[str, Any]:
    return {"ready": ready, "restartCount": restarts, "state": {"running": {}}}


@pytest.mark.parametrize(
    ("accept", "want"),
    [
        (
            "application/json;as=Table;v=v1;g=meta.k8s.io,"
            "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
            True,
        ),
        ("application/json;as=Table;v=v1beta1;g=meta.k8s.io", True),
        ("application/json", False),
        ("", False),
        ("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io", False),
    ],
)
def test_wants_table_only_for_meta_table_accept(accept: str, want: bool) -> None:
    assert tables.wants_table(accept) is want


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (59, "59s"),
        (119, "119s"),
        (200, "3m20s"),
        (300, "5m"),
        (11 * 60 + 5, "11m"),
        (5 * 3600 + 180, "5h3m"),
        (20 * 3600, "20h"),
        (2 * 86400 + 4 * 3600, "2d4h"),
        (400 * 86400, "400d"),
        (3 * 365 * 86400, "3y"),
    ],
)
def test_human_duration_matches_upstream(seconds: int, text: str) -> None:
    assert tables.human_duration(seconds) == text


def test_pod_columns_name_types_and_wide_priority() -> None:
    cols = tables.columns("pods")
    assert [c["name"] for c in cols] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
        "IP",
        "Node",
        "Nominated Node",
        "Readiness Gates",
    ]
    assert cols[0]["format"] == "name"
    assert all(c["type"] == "string" for c in cols)
    assert [c["priority"] for c in cols] == [0, 0, 0, 0, 0, 1, 1, 1, 1]


def test_running_pod_row() -> None:
    p = pod(phase="Running", podIP="10.0.0.9", containerStatuses=[running(), running(False)])
    cells = tables.pod_cells(p, T0 + 90)
    assert cells == ["p", "1/2", "Running", "0", "90s", "10.0.0.9", "gpu-1", "<none>", "<none>"]


def test_pending_unbound_pod_row() -> None:
    p = pod(phase="Pending")
    p["spec"].pop("nodeName")
    cells = tables.pod_cells(p, T0)
    assert cells[1:4] == ["0/2", "Pending", "0"]
    assert cells[5:7] == ["<none>", "<none>"]


def test_pod_status_reason_from_container_and_deletion() -> None:
    done = {"state": {"terminated": {"reason": "Completed", "exitCode": 0}}}
    assert tables.pod_cells(pod(phase="Succeeded", containerStatuses=[done]), T0)[2] == "Completed"
    failed = pod(phase="Failed", reason="OutOfnvidia.com/gpu")
    assert tables.pod_cells(failed, T0)[2] == "OutOfnvidia.com/gpu"
    crash = {"restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
    assert tables.pod_cells(pod(phase="Running", containerStatuses=[crash]), T0)[2:4] == [
        "CrashLoopBackOff",
        "3",
    ]
    going = pod(phase="Running", containerStatuses=[running()])
    going["metadata"]["deletionTimestamp"] = CREATED
    assert tables.pod_cells(going, T0)[2] == "Terminating"


def test_finished_pod_row_has_completed_condition() -> None:
    row = tables.row("pods", pod(phase="Succeeded"), now=T0)
    assert row["conditions"][0]["type"] == "Completed"
    assert row["conditions"][0]["reason"] == "Succeeded"
    assert "conditions" not in tables.row("pods", pod(phase="Running"), now=T0)


def node(ready: str | None = "True", *, cordoned: bool = False) -> dict[str, Any]:
    conds = [] if ready is None else [{"type": "Ready", "status": ready}]
    return {
        "metadata": {
            "name": "gpu-1",
            "creationTimestamp": CREATED,
            "labels": {"node-role.kubernetes.io/gpu": "", "kubernetes.io/role": "worker"},
        },
        "spec": {"unschedulable": cordoned},
        "status": {
            "conditions": conds,
            "nodeInfo": {"kubeletVersion": "v1.31.0"},
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        },
    }


@pytest.mark.parametrize(
    ("ready", "cordoned", "status"),
    [
        ("True", False, "Ready"),
        ("False", False, "NotReady"),
        ("Unknown", False, "NotReady"),
        (None, False, "Unknown"),
        ("True", True, "Ready,SchedulingDisabled"),
        ("False", True, "NotReady,SchedulingDisabled"),
    ],
)
def test_node_status(ready: str | None, cordoned: bool, status: str) -> None:
    assert tables.node_cells(node(ready, cordoned=cordoned), T0)[1] == status


def test_node_row_and_columns() -> None:
    cells = tables.node_cells(node(), T0 + 3 * 86400)
    assert cells[:7] == ["gpu-1", "Ready", "gpu,worker", "3d", "v1.31.0", "10.0.0.1", "<none>"]
    assert cells[7:] == ["<unknown>"] * 3
    cols = tables.columns("nodes")
    assert [c["name"] for c in cols if c["priority"] == 0] == [
        "Name",
        "Status",
        "Roles",
        "Age",
        "Version",
    ]
    assert len(cols) == len(cells)


def test_custom_resources_and_fallback() -> None:
    pg = {
        "metadata": {"name": "job-1", "creationTimestamp": CREATED},
        "spec": {"minMember": 4},
        "status": {"phase": "Running"},
    }
    assert tables.podgroup_cells(pg, T0 + 60) == ["job-1", "Running", 4, "60s"]
    md = {
        "metadata": {"name": "gpu", "creationTimestamp": CREATED},
        "status": {"replicas": 5, "readyReplicas": 3},
    }
    assert tables.machinedeployment_cells(md, T0) == ["gpu", 5, 3, "0s"]
    assert [c["name"] for c in tables.columns("machinedeployments")] == [
        "Name",
        "Replicas",
        "Ready",
        "Age",
    ]
    assert [c["name"] for c in tables.columns("leases")] == ["Name", "Age"]
    lease = {"metadata": {"name": "l"}}
    assert tables.row("leases", lease, now=T0)["cells"] == ["l", "<unknown>"]


def test_table_object_kinds_by_include_object() -> None:
    p = pod(phase="Running")
    t = tables.table("pods", [p], now=T0, rv="42", cont="abc")
    assert t["kind"] == "Table"
    assert t["apiVersion"] == "meta.k8s.io/v1"
    assert t["metadata"] == {"resourceVersion": "42", "continue": "abc"}
    obj = t["rows"][0]["object"]
    assert obj["kind"] == "PartialObjectMetadata"
    assert obj["metadata"]["namespace"] == "team-a"
    assert "spec" not in obj
    assert tables.row("pods", p, now=T0, include="Object")["object"] is p
    assert "object" not in tables.row("pods", p, now=T0, include="None")


def test_event_rows_as_kubectl_get_events_prints_them() -> None:
    now = datetime(2026, 1, 1, 0, 10, tzinfo=UTC).timestamp()
    core_event = {
        "metadata": {"name": "p.1"},
        "involvedObject": {"kind": "Pod", "name": "p"},
        "reason": "Scheduled",
        "message": "Successfully assigned ml/p to n1",
        "type": "Normal",
        "reportingComponent": "baton.io/gang",
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:05:00Z",
        "count": 4,
    }
    names = [c["name"] for c in tables.columns("events") if c["priority"] == 0]
    assert names == ["Last Seen", "Type", "Reason", "Object", "Message"]
    cells = tables.row("events", core_event, now=now)["cells"]
    assert cells[:4] == ["5m (x4 over 10m)", "Normal", "Scheduled", "pod/p"]
    assert cells[5:] == ["baton.io/gang", "Successfully assigned ml/p to n1", "10m", 4, "p.1"]
    v1 = {  # the events.k8s.io view of a new event: eventTime only
        "apiVersion": "events.k8s.io/v1",
        "metadata": {"name": "p.2"},
        "regarding": {"kind": "Pod", "name": "p"},
        "note": "placed",
        "reason": "Scheduled",
        "type": "Normal",
        "eventTime": "2026-01-01T00:08:00.000000Z",
    }
    assert tables.row("events", v1, now=now)["cells"][:4] == ["2m", "Normal", "Scheduled", "pod/p"]


def test_team_columns_are_the_crds_printer_columns_and_cells_follow_their_paths() -> None:
    """simcluster prints teams as the API server prints deploy/crds/baton.io_teams.yaml:
    the same columns (name, type, wide or not); a JSONPath that finds nothing is empty."""
    crd = yaml.safe_load((ROOT / "deploy/crds/baton.io_teams.yaml").read_text())
    want = [
        (c["name"], c["type"], c.get("priority", 0))
        for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]
    ]
    have = [(c["name"], c["type"], c["priority"]) for c in tables.columns("teams")]
    assert have[1:] == want and have[0][0] == "Name"
    queue = [{"name": "a/big", "position": 0, "reason": "quota"}, {"name": "a/next"}]
    team = {
        "metadata": {"name": "a", "creationTimestamp": CREATED},
        "status": {"quota": 16, "used": 8, "borrowed": 0, "waiting": 2, "queue": queue,
                   "admitted": 1, "borrowLimit": 4},
    }  # fmt: skip
    assert tables.row("teams", team, now=T0 + 60)["cells"] == [
        "a", 16, 8, 0, 2, "a/big", "60s", 1, 4, "a/next", "quota"
    ]  # fmt: skip
    empty = {"metadata": {"name": "b", "creationTimestamp": CREATED}}
    assert tables.row("teams", empty, now=T0)["cells"][1:6] == [None] * 5


def test_volcano_podgroup_columns_are_the_crds_printer_columns() -> None:
    """``kubectl get podgroups.scheduling.volcano.sh`` prints what Volcano's users see:
    STATUS, MINMEMBER, RUNNINGS, AGE (deploy/crds/scheduling.volcano.sh_podgroups.yaml)."""
    crd = yaml.safe_load((ROOT / "deploy/crds/scheduling.volcano.sh_podgroups.yaml").read_text())
    want = [
        (c["name"], c["type"], 0) for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]
    ]
    key = "podgroups.scheduling.volcano.sh"
    have = [(c["name"], c["type"], c["priority"]) for c in tables.columns(key)]
    assert have[1:] == want and have[0][0] == "Name"
    group = {
        "metadata": {"name": "job", "creationTimestamp": CREATED},
        "spec": {"minMember": 4}, "status": {"phase": "Running", "running": 3},
    }  # fmt: skip
    assert tables.row(key, group, now=T0 + 60)["cells"] == ["job", "Running", 4, 3, "60s"]
