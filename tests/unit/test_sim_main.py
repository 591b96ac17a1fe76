"""``baton sim`` argument handling: errors name the flag (and the spec key)."""

from __future__ import annotations

from pathlib import Path

import pytest

from baton.services.simcluster import main
from baton.services.simcluster.world import fault_cli, topology

pytestmark = pytest.mark.unit


def test_nodes_flag_gives_one_pool() -> None:
    opts = main.parse_args(["--nodes", "12", "--listen", "0.0.0.0:0", "--trace", "synthetic"])
    assert [(p.name, p.count) for p in opts.spec.pools] == [("gpu", 12)]
    assert (opts.host, opts.port, opts.trace) == ("0.0.0.0", 0, "synthetic")
    assert opts.submitters == 8  # as many users at once; --submitters 1: trace order


def test_llm_goes_through_controllers_unless_submit_says_otherwise() -> None:
    assert main.parse_args(["--trace", "llm"]).submit == "controllers"
    assert main.parse_args(["--trace", "synthetic"]).submit == "pods"
    assert main.parse_args(["--trace", "synthetic", "--submit", "controllers"]).submit == (
        "controllers"
    )
    opts = main.parse_args(["--trace", "llm", "--submit", "pods", "--nodes", "32"])
    assert opts.submit == "pods" and max(j.gpus for j in main.jobs(opts)) == 256


def test_spec_file_wins_over_nodes(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("pools: [{name: a, count: 2}, {name: b, count: 3, gpus: 4}]\n")
    opts = main.parse_args(["--nodes", "99", "--spec", str(path)])
    assert [(p.name, p.count) for p in opts.spec.pools] == [("a", 2), ("b", 3)]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--listen", "nohost"], "--listen"),
        (["--trace", "/no/such/file.csv"], "--trace"),
        (["--speed", "0"], "--speed"),
        (["--nodes", "-1"], "--nodes"),
        (["--trace", "llm", "--submit", "operators"], "--submit"),
        (["--trace", "synthetic", "--submitters", "0"], "--submitters: expected >= 1, got 0"),
    ],
)
def test_bad_flags_are_named(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main.parse_args(argv)
    assert message in capsys.readouterr().err


def test_bad_spec_names_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("topology: {racks_per_block: 0}\n")
    with pytest.raises(SystemExit):
        main.parse_args(["--spec", str(path)])
    assert "topology.racks_per_block" in capsys.readouterr().err


def test_fault_arguments_become_one_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", "/from/env:/second")
    config, path, body = fault_cli.parse(["gpu-fault", "n1", "n2", "--xid", "48"])
    assert (config, path) == ("/from/env", "/sim/v1/faults")
    assert body["kind"] == "gpu-fault" and not body["heal"]
    assert body["detail"] == {"xid": 48}
    assert body["target"]["nodes"] == ["n1", "n2"]
    config, _, body = fault_cli.parse(
        [
            "--kubeconfig",
            "k",
            "disk-full",
            "share:0.1@h100",
            "--seed",
            "7",
            "--detail",
            "mount=/raid",
        ]
    )
    assert config == "k"
    assert body["target"] == {"nodes": [], "selector": "", "pool": "h100", "seed": 7, "share": 0.1}
    assert body["detail"] == {"mount": "/raid"}
    _, _, body = fault_cli.parse(["node-ready", "n1"])  # the old heal spellings still work
    assert (body["kind"], body["heal"]) == ("node-notready", True)
    _, _, body = fault_cli.parse(["xid", "--pool", "gpu", "--random", "3"], heal=True)
    assert body["heal"] and body["target"]["count"] == 3


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["explode", "n1"], "invalid choice"),
        (["xid", "n1", "--xid", "12345"], "unknown Xid 12345"),
        (["xid"], "TARGET"),
        (["disk-full", "n1", "--detail", "mount"], "key=value"),
        (["xid", "random:many"], "not a number"),
        (["xid", "n1", "--detail", "colour=red"], "colour"),
    ],
)
def test_bad_fault_arguments_are_named(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        fault_cli.parse(["--kubeconfig", "k", *argv])
    assert message in capsys.readouterr().err


def test_fault_trace_flag_is_checked_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "faults.csv"
    good.write_text("time_s,node,kind,detail,duration_s\n10,gpu-00001,xid,xid=79 gpu=3,60\n")
    assert len(main.parse_args(["--fault-trace", str(good)]).fault_trace) == 1
    bad = tmp_path / "bad.csv"
    bad.write_text("time_s,node,kind,detail,duration_s\n10,gpu-00001,xid,xid=7 gpu=3,60\n")
    with pytest.raises(SystemExit):
        main.parse_args(["--fault-trace", str(bad)])
    err = capsys.readouterr().err
    assert "--fault-trace" in err and "line 2" in err and "unknown Xid 7" in err


def test_advertised_url_goes_into_the_kubeconfig_in_place_of_the_listen_address() -> None:
    opts = main.parse_args(["--listen", "0.0.0.0:6443", "--advertise", "http://sim:6443"])
    assert (opts.host, opts.port, opts.advertise) == ("0.0.0.0", 6443, "http://sim:6443")
    assert main.parse_args([]).advertise == ""


def test_cloud_flags_apply_to_every_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("pools: [{name: a, count: 2}, {name: b, count: 3}]\n")
    flags = ["--quota", "10", "--join-failure-share", "0.1", "--provisioning-spread-s", "20"]
    opts = main.parse_args(["--spec", str(path), *flags, "--max-size", "12"])
    assert [(p.quota, p.join_failure_share, p.max_nodes) for p in opts.spec.pools] == [
        (10, 0.1, 12),
        (10, 0.1, 12),
    ]
    with pytest.raises(SystemExit):
        main.parse_args(["--not-ready-share", "1.5"])
    assert "--not-ready-share: pools[0].not_ready_share" in capsys.readouterr().err


def test_nodes_join_with_the_taints_registered_as_kubelet_would(
    capsys: pytest.CaptureFixture[str],
) -> None:
    opts = main.parse_args(["--nodes", "2", "--register-with-taints",
                            "baton.io/preflight=:NoSchedule,team=a:NoExecute"])  # fmt: skip
    pool = opts.spec.pools[0]
    made = topology.node_object(opts.spec, pool=pool, slot=0, ordinal=1)
    assert made["spec"]["taints"] == [
        {"key": "baton.io/preflight", "effect": "NoSchedule"},
        {"key": "team", "value": "a", "effect": "NoExecute"},
    ]
    with pytest.raises(SystemExit):
        main.parse_args(["--register-with-taints", "baton.io/preflight"])  # no effect
    assert "'baton.io/preflight': expected KEY[=VALUE]:EFFECT" in capsys.readouterr().err
