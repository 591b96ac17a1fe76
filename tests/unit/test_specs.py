"""Every service's Spec, checked as the runner and replay use it."""

from __future__ import annotations

import msgspec
import pytest

from baton.libs.runtime import load_settings
from baton.services.cli.services import replayable

pytestmark = pytest.mark.unit
SERVICES = replayable()


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_the_recorded_policy_reads_back_as_the_same_policy(name: str) -> None:
    """runner.started carries the policy as JSON; replay converts it back. A policy that
    does not survive that trip cannot be replayed (admission's team config once did not)."""
    service = SERVICES[name]
    spec = service.spec
    policy = spec.policy_of(load_settings(spec.settings, service.settings_prefix, env={}))
    if policy is None:
        return
    assert spec.policy_type is not None, f"{name}: a policy needs its policy_type"
    again = msgspec.convert(msgspec.to_builtins(policy), spec.policy_type)
    assert again == policy


def test_the_replayable_services_are_the_bus_fed_ones() -> None:
    assert {"gang", "admission"} <= set(SERVICES)
    assert "actuator" not in SERVICES  # decides by the wall clock
    assert "bridge" not in SERVICES  # reads the API server, not the bus
