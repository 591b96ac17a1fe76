"""A kubeconfig pointing at a simcluster: plain HTTP, no auth, namespace default."""

from __future__ import annotations

import os
from pathlib import Path

import yaml


def kubeconfig(url: str, *, name: str = "simcluster") -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": name, "cluster": {"server": url}}],
        "users": [{"name": name, "user": {}}],
        "contexts": [
            {"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}
        ],
        "current-context": name,
    }
    return yaml.safe_dump(doc, sort_keys=False)


def write_kubeconfig(path: str | Path, url: str, *, name: str = "simcluster") -> Path:
    """Write atomically (temp file, rename), so a reader never sees half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_name(f".{target.name}.tmp")
    scratch.write_text(kubeconfig(url, name=name))
    os.replace(scratch, target)
    return target
