"""Admission webhooks, called as a real API server calls them on create.

``MutatingWebhookConfiguration`` and ``ValidatingWebhookConfiguration`` objects
(``admissionregistration.k8s.io/v1``) created through the API are read at each
create. For every webhook whose ``rules`` match (operation, API group, version,
resource) and whose ``namespaceSelector``/``objectSelector`` match, simcluster
POSTs an ``AdmissionReview`` v1 to ``clientConfig.url`` over HTTPS, trusting only
``clientConfig.caBundle``. Mutating webhooks run first, in name order, and their
JSON patches are applied in turn; validating webhooks then see the mutated object.
A denial becomes the API server's error (``admission webhook "x" denied the
request: ...``); a webhook that cannot be reached fails the create only when its
``failurePolicy`` is ``Fail`` (the default, as in Kubernetes). A dry-run create
is reviewed with ``dryRun: true``; a webhook whose ``sideEffects`` is not ``None`` or
``NoneOnDryRun`` refuses it (400), as upstream.

Services configured with ``clientConfig.service`` are skipped: simcluster has no
cluster network to reach them.
"""

from __future__ import annotations

import base64
import ssl
import uuid
from typing import Any

import aiohttp
import msgspec
import structlog

from baton.services.simcluster.api.objects import ApiError
from baton.services.simcluster.api.patching import json_patch
from baton.services.simcluster.api.resources import Resource
from baton.services.simcluster.api.selectors import label_predicate
from baton.services.simcluster.api.store import Store

log = structlog.get_logger("simcluster.webhooks")

MUTATING = "mutatingwebhookconfigurations"
VALIDATING = "validatingwebhookconfigurations"


class WebhookCaller:
    """The ``Admission`` hook for :class:`ApiServer`: call configured webhooks on CREATE."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._session: aiohttp.ClientSession | None = None
        self._contexts: dict[str, ssl.SSLContext] = {}

    async def __call__(
        self,
        operation: str,
        res: Resource,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        *,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        if operation != "CREATE" or res.plural in (MUTATING, VALIDATING):
            return obj
        for hook in self._hooks(MUTATING, operation, res, obj):
            obj = await self._call(hook, operation, res, obj, mutate=True, dry_run=dry_run)
        for hook in self._hooks(VALIDATING, operation, res, obj):
            await self._call(hook, operation, res, obj, mutate=False, dry_run=dry_run)
        return obj

    async def close(self, *_: Any) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _hooks(
        self, plural: str, operation: str, res: Resource, obj: dict[str, Any]
    ) -> list[dict[str, Any]]:
        try:
            configs, _ = self.store.list(plural)
        except ApiError:
            return []
        hooks = []
        for config in sorted(configs, key=lambda c: c["metadata"]["name"]):
            for hook in config.get("webhooks") or []:
                if _rules_match(hook, operation, res) and self._selects(hook, obj):
                    hooks.append(hook)
        return hooks

    def _selects(self, hook: dict[str, Any], obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        object_pred = _selector(hook.get("objectSelector"))
        if object_pred is not None and not object_pred({"metadata": meta}):
            return False
        ns_pred = _selector(hook.get("namespaceSelector"))
        if ns_pred is None or not meta.get("namespace"):
            return True
        try:
            namespace = self.store.get("namespaces", None, meta["namespace"])
        except ApiError:
            namespace = {"metadata": {"name": meta["namespace"], "labels": {}}}
        return bool(ns_pred(namespace))

    async def _call(
        self,
        hook: dict[str, Any],
        operation: str,
        res: Resource,
        obj: dict[str, Any],
        *,
        mutate: bool,
        dry_run: bool,
    ) -> dict[str, Any]:
        name = hook.get("name", "")
        if dry_run and hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise ApiError(
                400, "BadRequest", f'admission webhook "{name}" does not support dry run'
            )
        client = hook.get("clientConfig") or {}
        url = client.get("url")
        if not url:
            log.info("webhook without clientConfig.url skipped", webhook=name)
            return obj
        review = _review(operation, res, obj, dry_run=dry_run)
        timeout = float(hook.get("timeoutSeconds") or 10)
        try:
            answer = await self._post(url, review, ca=client.get("caBundle", ""), seconds=timeout)
            response = answer["response"]
        except (
            aiohttp.ClientError,
            TimeoutError,
            ssl.SSLError,
            KeyError,
            TypeError,
            msgspec.DecodeError,
        ) as exc:
            if hook.get("failurePolicy", "Fail") == "Ignore":
                log.warning("webhook failed, ignored", webhook=name, error=repr(exc))
                return obj
            raise ApiError(
                500,
                "InternalError",
                f'Internal error occurred: failed calling webhook "{name}": {exc!r}',
            ) from None
        if not response.get("allowed"):
            status = response.get("status") or {}
            raise ApiError(
                int(status.get("code") or 403),
                status.get("reason") or "Forbidden",
                f'admission webhook "{name}" denied the request: {status.get("message", "")}',
            )
        patch = response.get("patch")
        if mutate and patch:
            if response.get("patchType") != "JSONPatch":
                raise ApiError(500, "InternalError", f'webhook "{name}": unsupported patchType')
            obj = json_patch(obj, msgspec.json.decode(base64.b64decode(patch)))
        return obj

    async def _post(
        self, url: str, review: dict[str, Any], *, ca: str, seconds: float
    ) -> dict[str, Any]:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        async with self._session.post(
            url,
            data=msgspec.json.encode(review),
            headers={"Content-Type": "application/json"},
            ssl=self._context(ca),
            timeout=aiohttp.ClientTimeout(total=seconds),
        ) as reply:
            reply.raise_for_status()
            body: dict[str, Any] = msgspec.json.decode(await reply.read())
            return body

    def _context(self, ca: str) -> ssl.SSLContext:
        context = self._contexts.get(ca)
        if context is None:
            context = ssl.create_default_context()
            if ca:
                context.load_verify_locations(cadata=base64.b64decode(ca).decode())
            self._contexts[ca] = context
        return context


def _review(operation: str, res: Resource, obj: dict[str, Any], *, dry_run: bool) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": res.group, "version": res.version, "kind": res.kind},
            "resource": {"group": res.group, "version": res.version, "resource": res.plural},
            "namespace": meta.get("namespace", ""),
            "name": meta.get("name", ""),
            "operation": operation,
            "userInfo": {"username": "simcluster"},
            "object": obj,
            "dryRun": dry_run,
        },
    }


def _rules_match(hook: dict[str, Any], operation: str, res: Resource) -> bool:
    for rule in hook.get("rules") or []:
        if (
            _has(rule.get("operations"), operation)
            and _has(rule.get("apiGroups"), res.group)
            and _has(rule.get("apiVersions"), res.version)
            and _has(rule.get("resources"), res.plural)
        ):
            return True
    return False


def _has(values: list[str] | None, value: str) -> bool:
    return bool(values) and ("*" in values or value in values)  # type: ignore[operator]


def _selector(selector: dict[str, Any] | None) -> Any:
    """A LabelSelector as a predicate over an object (None: selects everything)."""
    if not selector:
        return None
    terms = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    for e in selector.get("matchExpressions") or []:
        values = ",".join(e.get("values") or [])
        match e.get("operator"):
            case "In":
                terms.append(f"{e['key']} in ({values})")
            case "NotIn":
                terms.append(f"{e['key']} notin ({values})")
            case "Exists":
                terms.append(e["key"])
            case "DoesNotExist":
                terms.append(f"!{e['key']}")
    return label_predicate(",".join(terms)) if terms else None


def install(server: Any) -> WebhookCaller:
    """Add the webhook caller to an ``ApiServer``'s admission hooks (closed with the app)."""
    caller = WebhookCaller(server.store)
    server.admission.append(caller)
    server.app.on_cleanup.append(caller.close)
    return caller
