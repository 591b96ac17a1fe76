"""The simulated cloud behind MachineDeployments, on an in-process Store and a fake clock:
provisioning spread, machines that never join or join NotReady, quota, autoscaler bounds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from baton.services.simcluster.api.store import Store
from baton.services.simcluster.world import conditions, spec, topology
from baton.services.simcluster.world.cloud import Cloud

pytestmark = pytest.mark.unit


@dataclass
class Timer:
    seconds: float
    fn: Callable[..., None]
    args: tuple[Any, ...]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class FakeClock:
    timers: list[Timer] = field(default_factory=list)

    def call_later(self, seconds: float, fn: Callable[..., None], *args: Any) -> Timer:
        timer = Timer(seconds, fn, args)
        self.timers.append(timer)
        return timer

    def fire(self) -> None:
        due, self.timers = self.timers, []
        for t in due:
            if not t.cancelled:
                t.fn(*t.args)


def cloud(**pool: Any) -> tuple[Store, Cloud, FakeClock]:
    store, clock = Store(), FakeClock()
    c = Cloud(store, spec=spec.default_spec(2, **pool), clock=clock, load=lambda n: 0)  # type: ignore[arg-type]
    store.add_listener(c.on_change)
    c.start()
    return store, c, clock


def scale(store: Store, replicas: int) -> dict[str, Any]:
    store.mutate(
        "machinedeployments", "default", "gpu", lambda md: md["spec"].update(replicas=replicas)
    )
    status: dict[str, Any] = store.get("machinedeployments", "default", "gpu")["status"]
    return status


def test_provisioning_delays_spread_and_repeat_with_the_seed() -> None:
    store, _, clock = cloud(provisioning_s=60, provisioning_spread_s=20)
    scale(store, 12)
    delays = [t.seconds for t in clock.timers]
    assert len(delays) == 10 and all(40 <= d <= 80 for d in delays)
    assert len(set(delays)) == 10
    store2, _, clock2 = cloud(provisioning_s=60, provisioning_spread_s=20)
    scale(store2, 12)
    assert [t.seconds for t in clock2.timers] == delays


def test_some_machines_never_join_and_some_join_not_ready() -> None:
    store, _, clock = cloud(join_failure_share=1.0)
    status = scale(store, 5)
    assert clock.timers == []
    assert (status["replicas"], status["readyReplicas"]) == (5, 2)
    assert status["conditions"][0]["reason"] == "WaitingForMachines"
    status = scale(store, 3)  # the machines that never joined go first
    assert (status["replicas"], len(store.list("nodes")[0])) == (3, 2)

    store, _, clock = cloud(not_ready_share=1.0)
    scale(store, 3)
    clock.fire()
    node = store.get("nodes", None, "gpu-00003")
    assert not conditions.is_ready(node)
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert "cni plugin not initialized" in ready["message"]
    status = store.get("machinedeployments", "default", "gpu")["status"]
    assert (status["replicas"], status["readyReplicas"]) == (3, 2)
    store.mutate("nodes", None, "gpu-00003", lambda n: conditions.apply(n, conditions.ready()))
    assert store.get("machinedeployments", "default", "gpu")["status"]["readyReplicas"] == 3


def test_beyond_quota_machines_wait_pending_and_the_status_says_so() -> None:
    store, _, clock = cloud(quota=4)
    status = scale(store, 6)
    assert len(clock.timers) == 2
    assert (status["replicas"], status["readyReplicas"], status["phase"]) == (6, 2, "ScalingUp")
    (ready,) = status["conditions"]
    assert (ready["status"], ready["reason"]) == ("False", "QuotaExceeded")
    assert ready["message"] == (
        "2 of 6 machines cannot be created: cloud quota of 4 machines for pool gpu reached"
    )
    clock.fire()
    assert len(store.list("nodes")[0]) == 4
    status = scale(store, 4)  # pending ones go first: nothing to remove
    assert (status["replicas"], status["readyReplicas"]) == (4, 4)
    assert status["conditions"] == [{"type": "Ready", "status": "True"}]
    store.delete("nodes", None, "gpu-00001")  # a lost machine frees quota: replaced
    assert len(clock.timers) == 1


def test_initial_nodes_respect_quota_and_the_deployment_carries_autoscaler_bounds() -> None:
    store, _, _ = cloud(quota=1, min_size=1, max_size=16)
    md = store.get("machinedeployments", "default", "gpu")
    assert md["metadata"]["annotations"] == {topology.MIN_SIZE: "1", topology.MAX_SIZE: "16"}
    assert (len(store.list("nodes")[0]), md["status"]["replicas"]) == (1, 2)
    default = spec.default_spec(3).pools[0]
    assert (default.min_size, default.max_nodes) == (0, 3)


def test_cloud_settings_are_validated_with_their_keys() -> None:
    with pytest.raises(spec.SpecError, match=r"pools\[0\].join_failure_share"):
        spec.from_dict({"pools": [{"join_failure_share": 1.5}]})
    with pytest.raises(spec.SpecError, match=r"pools\[0\].min_size: 4 > max_size 2"):
        spec.from_dict({"pools": [{"count": 2, "min_size": 4, "max_size": 2}]})
    two = spec.from_dict({"pools": [{"name": "a"}, {"name": "b"}]})
    assert [p.quota for p in spec.with_pools(two, quota=7).pools] == [7, 7]
