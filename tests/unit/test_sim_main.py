"""``baton sim`` argument handling: errors name the flag (and the spec key)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.simcluster import main

pytestmark = pytest.mark.unit


def test_nodes_flag_gives_one_pool() -> None:
    opts = main.parse_args(["--nodes", "12", "--listen", "0.0.0.0:0", "--trace", "synthetic"])
    assert [(p.name, p.count) for p in opts.spec.pools] == [("gpu", 12)]
    assert (opts.host, opts.port, opts.trace) == ("0.0.0.0", 0, "synthetic")


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


def test_fault_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    args = main.parse_fault(["--kubeconfig", "k", "gpu-fault", "n1", "n2", "--xid", "48"])
    assert args.nodes == ["n1", "n2"]
    assert args.change.annotations == {"sim.baton.io/gpu-fault": "xid=48,gpu=0"}
    with pytest.raises(SystemExit):
        main.parse_fault(["--kubeconfig", "k", "explode", "n1"])
    assert "invalid choice" in capsys.readouterr().err


def test_advertised_url_goes_into_the_kubeconfig_in_place_of_the_listen_address() -> None:
    opts = main.parse_args(["--listen", "0.0.0.0:6443", "--advertise", "http://sim:6443"])
    assert (opts.host, opts.port, opts.advertise) == ("0.0.0.0", 6443, "http://sim:6443")
    assert main.parse_args([]).advertise == ""
