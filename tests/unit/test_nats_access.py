"""NATS permissions derived from the service specs (``libs.runner.access``)."""

from __future__ import annotations

import json

import pytest

from baton.libs.bus.connection import credentials, inbox_prefix
from baton.libs.runner import access
from baton.libs.runtime.nkey import new_user_seed, public_key
from baton.proto import subjects
from baton.services.cli.natsconfig import run, specs

pytestmark = pytest.mark.unit
C = "c1"


def allowed(perms: access.Permissions, subject: str) -> bool:
    ok = any(subjects.matches(p, subject) or p == subject for p in perms.publish)
    return ok and not any(subjects.matches(p, subject) for p in perms.deny_publish)


def by_name() -> dict[str, access.Permissions]:
    return {s.name: access.service_permissions(s, C) for s in specs()}


def test_each_service_may_publish_only_the_actions_its_routes_send_under_its_name() -> None:
    perms = by_name()
    taint = "baton.c1.action.taint.admission.gpu-1"
    bind = "baton.c1.action.bind-gang.gang.team-a.g1"
    assert allowed(perms["admission"], taint)
    assert not allowed(perms["gang"], taint) and allowed(perms["gang"], bind)
    assert not any(allowed(perms[n], bind) for n in ("bridge", "actuator", "health"))
    # a kind it may ask for, but under another producer's name: refused by the server
    assert not allowed(perms["gang"], "baton.c1.action.bind-gang.admission.team-a.g1")
    assert not allowed(perms["bandwidth"], "baton.c1.action.annotate.admission.team-a.p")
    assert allowed(perms["bandwidth"], "baton.c1.action.annotate.bandwidth.team-a.p")
    assert not allowed(perms["admission"], "baton.c1.action.taint.admission")  # no key
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
    assert not allowed(perms, "baton.c1.action.taint.health.gpu-2")
    assert not any(p.startswith("$JS.API.>") for p in perms.publish)
    assert perms.subscribe == ("baton.c1.bandwidth.limits.gpu-1_rack-2",)


def test_each_user_is_an_nkey_reading_only_its_own_inbox() -> None:
    found = {u.name: u for u in access.users(specs(), C, nodes=["gpu-1"])}
    keys = {u.public_key for u in found.values()}
    assert len(keys) == len(found) and all(k.startswith("U") and len(k) == 56 for k in keys)
    gang = found["gang"].to_config()
    assert set(gang) == {"nkey", "permissions"}  # no password, no seed: only the public key
    assert gang["nkey"] == found["gang"].public_key
    inbox = f"{inbox_prefix(found['gang'].public_key)}.>"
    assert inbox in gang["permissions"]["subscribe"]["allow"]
    assert not any(inbox in u.to_config()["permissions"]["subscribe"]["allow"]
                   for n, u in found.items() if n not in ("gang", "admin"))  # fmt: skip
    assert found["admin"].to_config()["permissions"]["subscribe"]["allow"] == [">"]
    assert credentials("nats://u:s3cret@nats:4222")[1] == "nats://u:***@nats:4222"  # logs


def test_baton_nats_config_keeps_seeds_and_refuses_a_bad_node(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    creds = tmp_path / "creds"
    out = tmp_path / "nats.conf"
    assert run(["--node", "gpu-1", "--credentials", str(creds), "--out", str(out)]) == 0
    first = (creds / "services" / "gang").read_text()
    assert first.startswith("SU")
    assert run(["--node", "gpu-1", "--node", "gpu-2.rack-1", "--credentials", str(creds),
                "--out", str(out)]) == 0  # fmt: skip
    assert (creds / "services" / "gang").read_text() == first  # a new node changes no key
    agent = (creds / "agents" / "agent-gpu-2_rack-1").read_text()
    assert agent.startswith("SU")
    assert (creds / "admin").read_text().startswith("SU")
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    assert oct((creds / "services" / "gang").stat().st_mode & 0o777) == "0o600"
    text = out.read_text()  # which user each key is, as comments nats-server skips
    assert f"# {public_key(first)} gang\n" in text
    users = json.loads("\n".join(t for t in text.splitlines() if not t.startswith("#")))
    users = users["authorization"]["users"]
    assert {u["nkey"] for u in users} >= {public_key(first), public_key(agent)}
    assert first.strip() not in out.read_text()  # the server holds no seed
    assert run(["--auth-only", "--credentials", str(creds), "--out", str(out)]) == 0
    assert "\nauthorization: {" in out.read_text()
    assert run(["--node", "Not_A_Node", "--credentials", str(creds)]) == 2
    assert "Not_A_Node" in capsys.readouterr().err
    assert run(["--out", str(out)]) == 2  # seeds nobody keeps would be users nobody can be
    assert "--credentials DIR: required" in capsys.readouterr().err
    (creds / "services" / "gang").write_text("not a seed\n")
    assert run(["--credentials", str(creds)]) == 2
    assert "services/gang" in capsys.readouterr().err


def test_an_agent_connects_with_its_own_nodes_seed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from baton.libs.runtime import SettingsError
    from baton.services.agent.main import Settings, nats_seed_file

    (tmp_path / "agent-gpu-1_rack").write_text(new_user_seed() + "\n")
    (tmp_path / "agent-gpu-3").write_text("SUnot-a-seed\n")
    settings = Settings(nats_credentials_dir=str(tmp_path))
    user = access.agent_user_name("gpu-1.rack")
    assert nats_seed_file(settings, user=user) == str(tmp_path / "agent-gpu-1_rack")
    assert nats_seed_file(Settings(), user=user) == ""  # no auth
    with pytest.raises(SettingsError, match=r"BATON_AGENT_NATS_CREDENTIALS_DIR.*agent-gpu-2"):
        nats_seed_file(settings, user=access.agent_user_name("gpu-2"))
    with pytest.raises(SettingsError, match=r"BATON_AGENT_NATS_CREDENTIALS_DIR.*not a valid"):
        nats_seed_file(settings, user=access.agent_user_name("gpu-3"))


def test_a_bad_seed_stops_start_up_naming_the_variable(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from baton.libs.runtime import SettingsError, load_settings
    from baton.services.gang.main import Settings

    bad = tmp_path / "gang.nk"
    for text in ("", "nats://gang:pw@nats:4222", "SUAAAA", "\xff"):
        bad.write_text(text)
        with pytest.raises(SettingsError, match=r"^BATON_NATS_NKEY_SEED_FILE: .*gang\.nk"):
            load_settings(Settings, "BATON_GANG_", env={"BATON_NATS_NKEY_SEED_FILE": str(bad)})
    with pytest.raises(SettingsError, match=r"^BATON_NATS_NKEY_SEED_FILE: cannot read"):
        load_settings(Settings, "BATON_GANG_", env={"BATON_NATS_NKEY_SEED_FILE": "/nowhere"})
    bad.write_text(new_user_seed())
    env = {"BATON_NATS_NKEY_SEED_FILE": str(bad)}
    assert load_settings(Settings, "BATON_GANG_", env=env).nats_nkey_seed_file == str(bad)


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


def test_each_service_keeps_the_jetstream_api_of_the_streams_it_reads_alone() -> None:
    """No ``$JS.API.>``: consumers, fetches, gets, acks and flow control only on the streams
    its inputs come from (HISTORY when the runner feeds it); stream info of those it
    writes; creating or changing a stream or bucket: the actuator's alone."""
    perms = by_name()
    for name, p in perms.items():
        assert not any(s in p.publish for s in ("$JS.API.>", "$JS.ACK.>", "$JS.FC.>")), name
        assert allowed(p, "$JS.API.INFO")
        owner = name == access.OWNER
        for stream in ("BATON_C1_EVENTS", "BATON_C1_HISTORY", "KV_BATON_C1_LEASES"):
            assert allowed(p, f"$JS.API.STREAM.CREATE.{stream}") == owner, (name, stream)
    gang = perms["gang"]
    own = ("$JS.API.CONSUMER.CREATE.BATON_C1_HISTORY",
           "$JS.API.CONSUMER.CREATE.BATON_C1_K8S.snap.baton.c1.k8s.node.>",
           "$JS.API.CONSUMER.MSG.NEXT.BATON_C1_HISTORY.feed",
           "$JS.API.CONSUMER.DELETE.BATON_C1_K8S.snap",
           "$JS.API.STREAM.INFO.BATON_C1_HISTORY",
           "$JS.API.STREAM.INFO.BATON_C1_ACTIONS",  # it writes there: info, nothing more
           "$JS.API.STREAM.MSG.GET.KV_BATON_C1_LEASES",
           "$JS.API.DIRECT.GET.KV_BATON_C1_LEASES.$KV.BATON_C1_LEASES.gang")  # fmt: skip
    for subject in own:
        assert allowed(gang, subject), subject
    others = ("$JS.API.CONSUMER.CREATE.BATON_C1_LIMITS",
              "$JS.API.CONSUMER.CREATE.BATON_C1_LIMITS.x.baton.c1.bandwidth.limits.>",
              "$JS.API.CONSUMER.CREATE.BATON_C1_TELEMETRY",
              "$JS.API.CONSUMER.MSG.NEXT.BATON_C1_LIMITS.x",
              "$JS.API.DIRECT.GET.BATON_C1_LIMITS.baton.c1.bandwidth.limits.gpu-1",
              "$JS.API.STREAM.MSG.GET.BATON_C1_DEADLETTER",
              "$JS.API.STREAM.INFO.KV_BATON_C1_DONE",
              "$JS.API.STREAM.MSG.GET.KV_BATON_C1_DONE",
              "$JS.API.DIRECT.GET.KV_BATON_C1_LEASES.$KV.BATON_C1_LEASES.actuator",
              "$JS.API.CONSUMER.CREATE.BATON_C1_ACTIONS",
              "$JS.ACK.BATON_C1_LIMITS.x.1.2.3.4.5",
              "$JS.FC.BATON_C1_TELEMETRY.x.1")  # fmt: skip
    for subject in others:
        assert not allowed(gang, subject), subject
    # health reads telemetry (its inputs, its heartbeat watch); bandwidth writes the limits
    assert allowed(perms["health"], "$JS.API.CONSUMER.CREATE.BATON_C1_TELEMETRY")
    assert allowed(perms["health"], "$JS.FC.BATON_C1_TELEMETRY.x.1")
    assert allowed(perms["bandwidth"], "$JS.API.STREAM.INFO.BATON_C1_LIMITS")
    assert not allowed(perms["bandwidth"], "$JS.API.CONSUMER.CREATE.BATON_C1_LIMITS")
    # the actuator: its work consumer, every lease's epoch, its done bucket
    for subject in ("$JS.API.CONSUMER.CREATE.BATON_C1_ACTIONS.actuator.baton.c1.action.>",
                    "$JS.API.CONSUMER.CREATE.KV_BATON_C1_LEASES",
                    "$JS.API.STREAM.MSG.GET.KV_BATON_C1_DONE",
                    "$JS.API.STREAM.CREATE.KV_BATON_C1_DONE"):  # fmt: skip
        assert allowed(perms["actuator"], subject), subject
    assert not allowed(perms["actuator"], "$JS.API.CONSUMER.CREATE.BATON_C1_HISTORY")
    # the bridge reads back the objects it wrote, nothing else
    assert access.read_streams(specs(["bridge"])[0], C) == ["BATON_C1_K8S"]


def test_the_fleet_reads_the_limits_stream_alone() -> None:
    fleet = access.fleet_permissions(C)
    assert allowed(fleet, "$JS.API.CONSUMER.CREATE.BATON_C1_LIMITS")
    assert allowed(fleet, "$JS.FC.BATON_C1_LIMITS.x.1")
    assert not allowed(fleet, "$JS.API.CONSUMER.CREATE.BATON_C1_HISTORY")
    assert not allowed(fleet, "$JS.API.STREAM.CREATE.BATON_C1_LIMITS")


def test_a_service_waits_for_its_lease_bucket_and_the_streams_it_reads_and_writes() -> None:
    gang = specs(["gang"])[0]
    needed = access.needed_streams(gang, C)
    assert needed[0] == "KV_BATON_C1_LEASES" and "BATON_C1_HISTORY" in needed
    assert "BATON_C1_LIMITS" not in needed
    assert set(access.needed_streams(gang, C)) <= set(access.all_streams(C))
    assert subjects.overlap("baton.c1.k8s.>", "baton.c1.k8s.node.>")
    assert subjects.overlap("baton.c1.*.limits.x", "baton.c1.bandwidth.>")
    assert not subjects.overlap("baton.c1.k8s.>", "baton.c1.k8s")
    assert not subjects.overlap("baton.c1.bandwidth.limits.>", "baton.c1.bandwidth.capacity")


def test_the_inspect_user_reads_the_cluster_and_publishes_nothing_of_batons() -> None:
    perms = access.inspect_permissions(C)
    assert perms.subscribe == ("baton.c1.>",)  # and its inbox; not other clusters, not $SYS
    assert access.AUTH_REQUESTS in perms.deny_subscribe
    for subject in ("baton.c1.action.taint.gpu-1", "baton.c1.placement.placed.a.g",
                    "$KV.BATON_C1_LEASES.gang", "$JS.ACK.BATON_C1_ACTIONS.actuator.1.1.1.0.0",
                    "$JS.API.STREAM.PURGE.BATON_C1_ACTIONS", "$JS.API.STREAM.CREATE.X",
                    "$JS.API.CONSUMER.DELETE.BATON_C1_ACTIONS.actuator",
                    "$JS.API.CONSUMER.MSG.NEXT.BATON_C1_ACTIONS.actuator",
                    "$JS.API.CONSUMER.DURABLE.CREATE.BATON_C1_ACTIONS.actuator"):  # fmt: skip
        assert not allowed(perms, subject), subject
    for subject in ("$JS.API.STREAM.INFO.BATON_C1_HISTORY", "$JS.API.CONSUMER.CREATE.BATON_C1_K8S",
                    "$JS.API.CONSUMER.INFO.BATON_C1_ACTIONS.actuator",
                    "$JS.API.DIRECT.GET.BATON_C1_EVENTS.baton.c1.health.state.n1"):  # fmt: skip
        assert allowed(perms, subject), subject
    found = {u.name: u for u in access.users(specs(), C)}
    assert found[access.INSPECT].permissions == perms
    from baton.services.actuator.shell import DURABLE

    assert DURABLE == access.ACTUATOR  # the durable consumer inspect may not touch


def test_baton_nats_config_keeps_the_inspect_seed_beside_the_admins(tmp_path) -> None:  # type: ignore[no-untyped-def]
    creds = tmp_path / "creds"
    assert run(["--credentials", str(creds), "--out", str(tmp_path / "nats.conf")]) == 0
    seed = (creds / "inspect").read_text()
    assert seed.startswith("SU") and oct((creds / "inspect").stat().st_mode & 0o777) == "0o600"
    assert run(["--credentials", str(creds), "--out", str(tmp_path / "nats.conf")]) == 0
    assert (creds / "inspect").read_text() == seed  # kept


def test_baton_up_writes_the_inspect_seed_next_to_the_admins_and_names_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from baton.services.cli.stack import Stack, write_endpoints, write_nats_auth

    _, seeds = write_nats_auth(C, tmp_path)
    assert seeds[access.INSPECT] == str(tmp_path / "nkeys" / access.INSPECT)
    stack = Stack(run_dir=tmp_path, nats_url="nats://127.0.0.1:4222", users=seeds)
    assert ("NATS nkey (read-only)", seeds[access.INSPECT]) in stack.endpoints()
    env = tmp_path / "up.env"
    write_endpoints(env, stack, cluster=C)
    lines = env.read_text().splitlines()
    assert f"BATON_NATS_INSPECT_SEED_FILE={seeds[access.INSPECT]}" in lines
    assert f"BATON_NATS_NKEY_SEED_FILE={seeds[access.ADMIN]}" in lines  # admin's stays
