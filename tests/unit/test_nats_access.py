"""NATS permissions derived from the service specs (``libs.runner.access``)."""

from __future__ import annotations

import json

import pytest

from baton.libs.bus.connection import credentials
from baton.libs.runner import access
from baton.proto import subjects
from baton.services.cli.natsconfig import run, specs

pytestmark = pytest.mark.unit
C = "c1"


def allowed(perms: access.Permissions, subject: str) -> bool:
    ok = any(subjects.matches(p, subject) or p == subject for p in perms.publish)
    return ok and not any(subjects.matches(p, subject) for p in perms.deny_publish)


def by_name() -> dict[str, access.Permissions]:
    return {s.name: access.service_permissions(s, C) for s in specs()}


def test_each_service_may_publish_only_the_actions_its_routes_send() -> None:
    perms = by_name()
    taint = "baton.c1.action.taint.gpu-1"
    bind = "baton.c1.action.bind-gang.team-a.g1"
    assert allowed(perms["admission"], taint)
    assert not allowed(perms["gang"], taint) and allowed(perms["gang"], bind)
    assert not any(allowed(perms[n], bind) for n in ("bridge", "actuator", "health"))
    assert not allowed(perms["bridge"], taint)
    assert allowed(perms["bridge"], "baton.c1.k8s.node.gpu-1")
    assert not allowed(perms["gang"], "baton.c1.k8s.node.gpu-1")  # nobody forges objects
    assert allowed(perms["actuator"], "baton.c1.result.taint.gpu-1")
    assert not allowed(perms["gang"], "baton.c1.result.bind-gang.team-a.g1")


def test_only_the_actuator_touches_the_actions_stream_consumer_and_its_own_lease() -> None:
    perms = by_name()
    ack = "$JS.ACK.BATON_C1_ACTIONS.actuator.1.2.3.4.5"
    nxt = "$JS.API.CONSUMER.MSG.NEXT.BATON_C1_ACTIONS.actuator"
    assert allowed(perms["actuator"], ack) and allowed(perms["actuator"], nxt)
    for name in ("gang", "bridge", "admission", "health", "reporter", "bandwidth"):
        assert not allowed(perms[name], ack) and not allowed(perms[name], nxt), name
        assert allowed(perms[name], f"$KV.BATON_C1_LEASES.{name}")
        assert not allowed(perms[name], "$KV.BATON_C1_LEASES.actuator")
    for name, p in perms.items():
        assert not allowed(p, "$JS.API.STREAM.DELETE.BATON_C1_ACTIONS")
        # a RePublish on a stream would turn a decision into an action
        assert allowed(p, "$JS.API.STREAM.UPDATE.BATON_C1_EVENTS") == (name == "actuator")


def test_a_node_agent_publishes_only_its_nodes_telemetry() -> None:
    perms = access.agent_permissions(C, "gpu-1.rack-2")
    assert allowed(perms, "baton.c1.telemetry.heartbeat.gpu-1_rack-2")
    assert not allowed(perms, "baton.c1.telemetry.heartbeat.gpu-2")
    assert not allowed(perms, "baton.c1.action.taint.gpu-2")
    assert not any(p.startswith("$JS.API.>") for p in perms.publish)
    assert perms.subscribe == (
        "baton.c1.bandwidth.limits.gpu-1_rack-2",
        "_INBOX_agent-gpu-1_rack-2.>",
    )


def test_urls_carry_the_password_and_logs_never_do() -> None:
    user = access.User("gang", "s3cret", access.Permissions((), ()))
    url = access.url_for("nats://nats:4222", user)
    assert url == "nats://gang:s3cret@nats:4222"
    name, shown = credentials(url)
    assert name == "gang" and "s3cret" not in shown and shown.endswith("@nats:4222")
    assert credentials("nats://127.0.0.1:4222") == ("", "nats://127.0.0.1:4222")


def test_baton_nats_config_keeps_passwords_and_refuses_a_bad_node(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    creds = tmp_path / "creds"
    out = tmp_path / "nats.conf"
    assert run(["--node", "gpu-1", "--credentials", str(creds), "--out", str(out)]) == 0
    first = (creds / "services" / "gang").read_text()
    assert run(["--node", "gpu-1", "--node", "gpu-2.rack-1", "--credentials", str(creds),
                "--out", str(out), "--server", "nats://other:4222"]) == 0  # fmt: skip
    assert (creds / "services" / "gang").read_text() != first  # another server ...
    assert (creds / "passwords" / "gang").read_text().strip() in first  # ... same password
    agent = (creds / "agents" / "agent-gpu-2_rack-1").read_text()
    assert agent.startswith("nats://agent-gpu-2_rack-1:") and agent.strip().endswith("@other:4222")
    assert (creds / "admin").read_text().startswith("nats://admin:")
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    assert json.loads(out.read_text())["authorization"]["users"]
    assert run(["--auth-only", "--out", str(out)]) == 0
    assert out.read_text().startswith("authorization: {")
    assert run(["--node", "Not_A_Node"]) == 2
    assert "Not_A_Node" in capsys.readouterr().err


def test_an_agent_connects_with_its_own_nodes_url(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from baton.libs.runtime import SettingsError
    from baton.services.agent.main import Settings, nats_url

    (tmp_path / "agent-gpu-1_rack").write_text("nats://agent-gpu-1_rack:pw@nats:4222\n")
    settings = Settings(nats_credentials_dir=str(tmp_path))
    user = access.agent_user_name("gpu-1.rack")
    assert nats_url(settings, user=user) == "nats://agent-gpu-1_rack:pw@nats:4222"
    assert nats_url(Settings(), user=user) == Settings().nats_url
    with pytest.raises(SettingsError, match=r"BATON_AGENT_NATS_CREDENTIALS_DIR.*agent-gpu-2"):
        nats_url(settings, user=access.agent_user_name("gpu-2"))


def test_every_service_baton_up_runs_has_a_nats_user() -> None:
    """A new service needs its user (services.cli.natsconfig.RUNNERS) and its decisions'
    subjects in ``Spec.publishes``; without a user ``baton up`` would run it as admin."""
    from baton.services.cli.natsconfig import RUNNERS
    from baton.services.cli.stack import SERVICES, available

    missing = [s for s in SERVICES if s != "agent" and available(s) and s not in RUNNERS]
    assert missing == [], f"add {missing} to RUNNERS and declare their Spec.publishes"
    for spec in specs():
        if spec.decision_types():
            assert spec.publishes, f"{spec.name}: decisions but no Spec.publishes"
