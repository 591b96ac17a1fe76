"""Answers for what simcluster does not model, so a client learns why instead of 404.

- A pod's ``log``, ``exec``, ``attach`` and ``portforward`` (and a node's or pod's
  ``proxy``): simcluster runs no containers, its kubelets only play them. The answer
  is a 400 ``Status`` that says so and where to look instead (``kubectl logs`` prints
  it as ``Error from server (BadRequest): ...``).
- ``authorization.k8s.io/v1`` SelfSubjectAccessReview and SelfSubjectRulesReview
  (``kubectl auth can-i``): simcluster has no authorization, every request is allowed,
  and the review says so.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from aiohttp import web

from baton.services.simcluster.api.objects import ApiError

_CONTAINER_VERBS = re.compile(
    r"^/api/v1/(?:namespaces/([^/]+)/pods|nodes)/([^/]+)/(log|exec|attach|portforward|proxy)"
    r"(?:/.*)?$"
)
_REVIEWS = "/apis/authorization.k8s.io/v1/"
ACCESS = _REVIEWS + "selfsubjectaccessreviews"
RULES = _REVIEWS + "selfsubjectrulesreviews"
REASON = "simcluster has no authorization: every request is allowed"


def handles(path: str) -> bool:
    return path in (ACCESS, RULES) or _CONTAINER_VERBS.match(path) is not None


async def answer(request: web.Request, path: str) -> tuple[dict[str, Any], int]:
    """The body and code for a path :func:`handles`."""
    found = _CONTAINER_VERBS.match(path)
    if found is not None:
        namespace, name, verb = found.groups()
        what = f'pod "{name}"' if namespace else f'node "{name}"'
        raise ApiError(
            400,
            "BadRequest",
            f"simcluster does not run containers: {what} has no {verb} (its kubelet is "
            "simulated); read its status and events instead",
        )
    if request.method != "POST":
        raise ApiError(
            405,
            "MethodNotAllowed",
            f"the server does not allow this method on the requested resource ({request.method})",
        )
    body = msgspec.json.decode(await request.read() or b"{}")
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the request body must be a JSON object")
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": body.get("kind") or "",
        "metadata": {"creationTimestamp": None},
        "spec": body.get("spec") or {},
    }
    if path == ACCESS:
        review.update(kind="SelfSubjectAccessReview", status={"allowed": True, "reason": REASON})
    else:
        everything = {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}
        review.update(
            kind="SelfSubjectRulesReview",
            status={
                "resourceRules": [everything],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                "incomplete": False,
            },
        )
    return review, 201
