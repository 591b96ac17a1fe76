"""deploy/dashboards and deploy/prometheus: valid Grafana JSON, PromQL that parses
(promtool, where installed), and only metrics and labels Baton's code declares (or
deploy/dashboards/planned.yaml promises, checked once their service lands)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.metrics_rules import ROOT, Declared, declared, sample_names

pytestmark = pytest.mark.unit

DASHBOARDS = sorted((ROOT / "deploy" / "dashboards").glob("*.json"))
PLANNED = yaml.safe_load((ROOT / "deploy" / "dashboards" / "planned.yaml").read_text())
RULES = ROOT / "deploy" / "prometheus" / "rules.yaml"
PANEL_TYPES = {"row", "timeseries", "heatmap", "table", "stat", "bargauge", "state-timeline"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
BUILTIN = {"up"}  # series Prometheus makes itself
SCRAPE_LABELS = {"job", "instance", "le", "cluster"}
GRAFANA = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
METRIC = re.compile(r"\b((?:baton|apiserver)_[a-z0-9_]+)\b")
SELECTOR = re.compile(r"\b((?:baton|apiserver)_[a-z0-9_]+)\{([^}]*)\}")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")


def boards() -> list[tuple[str, dict[str, Any]]]:
    return [(p.name, json.loads(p.read_text())) for p in DASHBOARDS]


def exprs() -> list[tuple[str, str]]:
    """(where, PromQL) of every dashboard query and variable, and every alert rule."""
    found = []
    for name, board in boards():
        for panel in board["panels"]:
            found += [(f"{name}: {panel['title']}", t["expr"]) for t in panel.get("targets", [])]
        for var in board["templating"]["list"]:
            if var["type"] == "query":
                found.append((f"{name}: ${var['name']}", var["definition"]))
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        found += [(f"rules.yaml: {r['alert']}", r["expr"]) for r in group["rules"]]
    return found


def known() -> dict[str, Declared]:
    """Every series name a query may use, to the family declaring it."""
    families = dict(declared())
    for metrics in PLANNED.values():
        for name, spec in metrics.items():
            base = name.removesuffix("_total") if spec["type"] == "counter" else name
            families[base] = Declared(base, spec["type"], tuple(spec["labels"]))
    return {sample: f for f in families.values() for sample in sample_names(f)}


def test_we_ship_the_dashboards_the_issue_asks_for() -> None:
    titles = " ".join(board["title"] for _, board in boards())
    for topic in ("GPUs", "gang waits", "Admission and quotas", "Actuator", "runner health",
                  "quarantines", "bandwidth"):  # fmt: skip
        assert topic in titles, topic
    heatmaps = [p for _, b in boards() for p in b["panels"] if p["type"] == "heatmap"]
    assert any("per rack" in p["title"] for p in heatmaps)


@pytest.mark.parametrize("path", DASHBOARDS, ids=[p.name for p in DASHBOARDS])
def test_dashboard_is_importable_grafana_json(path: Path) -> None:
    board = json.loads(path.read_text())
    assert board["uid"] == path.stem and len(board["uid"]) <= 40
    assert board["title"].startswith("Baton / ") and board["schemaVersion"] >= 36
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        assert panel["type"] in PANEL_TYPES, panel["type"]
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["w"] > 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])}  # fmt: skip
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE and target["expr"].strip()
            for var in re.findall(r"\$(\w+)", target["expr"]):
                assert var.startswith("__") or var in variables, f"${var} is not a variable"


def test_queries_use_only_metrics_and_labels_that_exist() -> None:
    series = known()
    for where, expr in exprs():
        names = set(METRIC.findall(expr))
        assert names or set(re.findall(r"\w+", expr)) & BUILTIN, f"{where}: no metric"
        for name in names:
            assert name in series, f"{where}: {name} is declared nowhere"
        for name, matchers in SELECTOR.findall(expr):
            labels = set(series[name].labels) | SCRAPE_LABELS
            for label in re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers):
                assert label in labels, f"{where}: {name} has no label {label!r}"
        allowed = SCRAPE_LABELS | {lb for n in names for lb in series[n].labels}
        for group in GROUPING.findall(expr):
            for label in filter(None, (g.strip() for g in group.split(","))):
                assert label in allowed, f"{where}: grouping by {label!r}, which no metric has"


def test_planned_metrics_are_declared_once_their_service_lands() -> None:
    families = declared()
    for service, metrics in PLANNED.items():
        if not (ROOT / "services" / service / "metrics.py").exists():
            continue  # not landed yet
        for name, spec in metrics.items():
            base = name.removesuffix("_total") if spec["type"] == "counter" else name
            assert base in families, f"services/{service}/metrics.py: {name} missing"
            assert families[base].type == spec["type"], name
            assert set(families[base].labels) == set(spec["labels"]), name


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool not installed (Debian/Ubuntu: apt-get install prometheus)")
    return found


def test_promtool_checks_the_alert_rules() -> None:
    done = subprocess.run([_promtool(), "check", "rules", str(RULES)],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    """Each query, Grafana's variables filled in, as a recording rule: promtool parses it."""
    promtool = _promtool()
    rules = []
    for i, (_, expr) in enumerate(exprs()):
        if expr.startswith("label_values("):
            expr = expr.removeprefix("label_values(").rsplit(",", 1)[0]
        for var, value in GRAFANA.items():
            expr = expr.replace(var, value)
        expr = re.sub(r"\$\w+", ".*", expr)
        rules.append({"record": f"baton:dashboard_query_{i}", "expr": expr})
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "queries", "rules": rules}]}))
    done = subprocess.run([promtool, "check", "rules", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
