"""The webhook configurations that point an API server at Baton's admission webhook.

deploy/base/admission.yaml holds the in-cluster form (a Service, CA from
cert-manager); this is the same registration for a webhook reached by URL, which
``baton up`` installs into the embedded simcluster.
"""

from __future__ import annotations

import base64
from typing import Any, Literal

from baton.proto import keys

GROUP, VERSION = "admissionregistration.k8s.io", "v1"

# The validating webhook sees UPDATEs too (a gang grown past what one bind may name, a
# GPU request made fractional); the mutating one only CREATEs (a pod's spec is fixed).
RULES = [
    {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["pods"],
    },
    {
        "apiGroups": ["scheduling.x-k8s.io"],
        "apiVersions": ["v1alpha1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["podgroups"],
    },
    {  # upstream gang scheduling (KEP-4671), whichever version is served
        "apiGroups": ["scheduling.k8s.io"],
        "apiVersions": ["v1beta1", "v1alpha2"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["podgroups", "workloads"],
    },
    {
        "apiGroups": ["scheduling.volcano.sh"],
        "apiVersions": ["v1beta1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["podgroups"],
    },
]


def configurations(
    base_url: str, *, ca_pem: bytes, failure_policy: Literal["Fail", "Ignore"] = "Ignore"
) -> list[tuple[str, dict[str, Any]]]:
    """(plural, object) for the mutating and the validating configuration."""
    bundle = base64.b64encode(ca_pem).decode()
    out = []
    for kind, plural, path in (
        ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations", "/mutate"),
        ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations", "/validate"),
    ):
        operations = ["CREATE", "UPDATE"] if path == "/validate" else ["CREATE"]
        webhook = {
            "name": "pods.baton.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": failure_policy,
            "timeoutSeconds": 5,
            "rules": [{**rule, "operations": operations} for rule in RULES],
            # as deploy/base/admission.yaml: Baton's own namespaces are never sent here
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": keys.WEBHOOK, "operator": "NotIn", "values": [keys.SKIP]}
                ]
            },
            "clientConfig": {"url": base_url + path, "caBundle": bundle},
        }
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": kind,
            "metadata": {"name": "baton"},
            "webhooks": [webhook],
        }
        out.append((plural, body))
    return out
