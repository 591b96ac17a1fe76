"""``baton agent`` settings: bad configuration stops start-up naming the key."""

from __future__ import annotations

import pytest

from baton.libs.runtime import SettingsError
from baton.services.agent.main import Settings, load, node_name, run, wire

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({"BATON_AGENT_INTERVAL_S": "0"}, "BATON_AGENT_INTERVAL_S"),
        ({"BATON_AGENT_HEARTBEAT_S": "-1"}, "BATON_AGENT_HEARTBEAT_S"),
        ({"BATON_AGENT_DISK_DEADBAND": "1.5"}, "BATON_AGENT_DISK_DEADBAND"),
        ({"BATON_AGENT_EXPECTED_GPUS": "-2"}, "BATON_AGENT_EXPECTED_GPUS"),
        ({"BATON_AGENT_MOUNTS": "/,var/lib"}, "BATON_AGENT_MOUNTS"),
        ({"BATON_AGENT_BACKEND": "sim"}, "BATON_AGENT_SIM_URL"),
        ({"BATON_AGENT_BACKEND": "dcgm"}, "BATON_AGENT_BACKEND"),
        ({"BATON_AGENT_KERNEL_LOG": "syslog"}, "BATON_AGENT_KERNEL_LOG"),
        ({"BATON_AGENT_HEARTBEAT": "10"}, "BATON_AGENT_HEARTBEAT"),  # a typo
        ({"BATON_AGENT_REFRESH_S": "soon"}, "BATON_AGENT_REFRESH_S"),
    ],
)
def test_bad_settings_name_the_key(env: dict[str, str], key: str) -> None:
    with pytest.raises(SettingsError, match=key):
        load(None, env)


def test_settings_from_the_environment() -> None:
    settings = load(
        None,
        {
            "BATON_CLUSTER": "c2",
            "BATON_AGENT_MOUNTS": "/,/var/lib/kubelet",
            "BATON_AGENT_NICS": "ib*,eth0",
            "BATON_AGENT_EXPECTED_GPUS": "8",
        },
    )
    assert settings.cluster == "c2"
    assert settings.mounts == ("/", "/var/lib/kubelet")
    assert settings.nics == ("ib*", "eth0")
    assert settings.expected_gpus == 8


@pytest.mark.parametrize(
    ("flag", "env", "name"),
    [
        ("gpu-1", {"BATON_AGENT_NODE": "gpu-2", "NODE_NAME": "gpu-3"}, "gpu-1"),
        (None, {"BATON_AGENT_NODE": "gpu-2", "NODE_NAME": "gpu-3"}, "gpu-2"),
        (None, {"NODE_NAME": "ip-10-0-0-1.ec2.internal"}, "ip-10-0-0-1.ec2.internal"),
    ],
)
def test_node_name_from_flag_then_setting_then_downward_api(
    flag: str | None, env: dict[str, str], name: str
) -> None:
    assert node_name(flag, load(None, env), env) == name


@pytest.mark.parametrize(
    ("flag", "env", "key"),
    [
        (None, {}, "NODE_NAME: required"),
        ("Bad_Node", {}, "--node"),
        (None, {"NODE_NAME": "UPPER"}, "NODE_NAME"),
    ],
)
def test_a_missing_or_bad_node_name_is_refused(
    flag: str | None, env: dict[str, str], key: str
) -> None:
    with pytest.raises(SettingsError, match=key):
        node_name(flag, load(None, env), env)


def test_fleet_without_a_simulation_url_stops_start_up(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BATON_AGENT_SIM_URL", raising=False)
    assert run(["--fleet"]) == 2
    assert "BATON_AGENT_SIM_URL" in capsys.readouterr().err


def test_host_wiring_runs_every_real_backend() -> None:
    wiring = wire(Settings(), node="gpu-1", fleet=False)
    assert wiring.backends == ("host", "pods", "kmsg", "nvml")
    assert len(wiring.sources) == 5  # four pollers and NVML's event wait
    off = wire(Settings(kernel_log="off", nvml=False), node="gpu-1", fleet=False)
    assert off.backends == ("host", "pods")


def test_sim_wiring_watches_one_node_or_the_fleet() -> None:
    one = wire(Settings(backend="sim", sim_url="http://sim:6443"), node="gpu-1", fleet=False)
    assert one.backends == ("sim",) and one.sim is not None
    assert one.sim.tracker.nodes == frozenset({"gpu-1"})
    fleet = wire(Settings(backend="sim", sim_url="http://sim:6443"), node="", fleet=True)
    assert fleet.sim is not None and fleet.sim.tracker.nodes is None
