"""The property fuzz of ``tests/unit/test_webhook_fuzz.py`` through the webhook's real
HTTP handler: every body gets a 200 with an AdmissionReview or a 400, never a 5xx."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baton.services.admission.serving import Webhook
from tests.unit.test_webhook_fuzz import NASTY, STATE, bodies

pytestmark = [pytest.mark.connected, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """The webhook app on plain HTTP (TLS changes nothing in the handler), in a thread."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, object] = {}

    async def start() -> None:
        hook = Webhook(state=lambda: STATE, publish=lambda event: None)
        runner = web.AppRunner(hook.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        box["runner"] = runner
        box["port"] = runner.addresses[0][1]
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=30)
    assert started.wait(30)
    try:
        yield f"http://127.0.0.1:{box['port']}"
    finally:
        runner = box["runner"]
        assert isinstance(runner, web.AppRunner)
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()


def post(url: str, body: bytes) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def check(status: int, text: bytes) -> None:
    assert status in (200, 400), (status, text[:300])
    if status == 200:
        response = json.loads(text)["response"]
        assert isinstance(response["allowed"], bool)
    else:
        assert text.strip()  # the 400 says what is wrong


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(body=bodies, path=st.sampled_from(["/mutate", "/validate"]))
def test_any_body_over_http_is_a_200_review_or_a_400(served: str, body: bytes, path: str) -> None:
    check(*post(served + path, body))


@pytest.mark.parametrize("body", NASTY, ids=["deep-list", "deep-object", "not-utf8", "binary",
                                             "empty"])  # fmt: skip
def test_nasty_bodies_over_http(served: str, body: bytes) -> None:
    for path in ("/mutate", "/validate"):
        check(*post(served + path, body))
