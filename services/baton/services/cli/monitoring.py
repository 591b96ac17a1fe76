"""``baton up --prometheus``: a real Prometheus scraping every service and simcluster.

Prometheus is not a Python package: ``baton up`` runs the ``prometheus`` binary found
on PATH (Debian and Ubuntu: ``apt-get install prometheus``; elsewhere the release
tarball from prometheus.io). Its config is written into the run directory: one scrape
job per service (``baton-<service>``, its ops port), one for simcluster's API server
metrics, and the alert rules of ``deploy/prometheus/rules.yaml`` when this is a
source tree (a clone; an installed wheel has no ``deploy/``).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from baton.services.cli.processes import Child, free_port, port_open, wait_until

DEPLOY = Path(__file__).resolve().parents[4] / "deploy"  # from services/baton/services/cli/
RULES = DEPLOY / "prometheus" / "rules.yaml"
SCRAPE_INTERVAL = "5s"


class NoPrometheus(RuntimeError):
    """--prometheus was asked for and there is no prometheus binary."""


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        raise NoPrometheus(
            "--prometheus: no prometheus binary on PATH "
            "(Debian/Ubuntu: apt-get install prometheus; or https://prometheus.io/download/)"
        )
    return found


def job(service: str) -> str:
    """The scrape job of a service, here and in deploy/prometheus (alerts match on it)."""
    return f"baton-{service}"


def config(
    ops: dict[str, int], *, sim: str | None, rules: Path | None, cluster: str
) -> dict[str, Any]:
    """Prometheus's config: ``ops`` maps each service to its ops port on 127.0.0.1;
    ``sim`` is simcluster's ``host:port`` (None: a real API server, not scraped)."""
    jobs: list[dict[str, Any]] = [
        {"job_name": job(name), "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
        for name, port in ops.items()
    ]
    if sim is not None:
        jobs.append({"job_name": job("simcluster"), "static_configs": [{"targets": [sim]}]})
    return {
        "global": {
            "scrape_interval": SCRAPE_INTERVAL,
            "evaluation_interval": SCRAPE_INTERVAL,
            "external_labels": {"cluster": cluster},
        },
        "rule_files": [str(rules)] if rules is not None else [],
        "scrape_configs": jobs,
    }


def start_prometheus(
    *, ops: dict[str, int], sim: str | None, cluster: str, run_dir: Path, logs: Path
) -> tuple[Child, str]:
    """Start Prometheus; returns its child and URL once it serves."""
    binary = prometheus_binary()
    home = run_dir / "prometheus"
    home.mkdir(parents=True, exist_ok=True)
    rules = RULES if RULES.is_file() else None
    path = home / "prometheus.yml"
    path.write_text(yaml.safe_dump(config(ops, sim=sim, rules=rules, cluster=cluster)))
    port = free_port()
    argv = [
        binary,
        f"--config.file={path}",
        f"--storage.tsdb.path={home / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1d",
    ]
    child = Child("prometheus", argv, logs / "prometheus.log")
    child.start()
    wait_until(lambda: port_open(port), child=child, timeout=60)
    return child, f"http://127.0.0.1:{port}"
