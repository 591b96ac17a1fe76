"""Every README command is run as written: by tests/e2e/test_readme.py or by .ci/run."""

import pytest

from tests.readme import INSTALL, ROOT, RUN, commands

pytestmark = pytest.mark.unit


def test_every_readme_command_has_a_place_that_runs_it() -> None:
    found = commands()
    assert len(found) == len(set(found)), "a README command appears twice"
    assert [c for c in found if c not in RUN] == [], "README commands no test runs"
    assert [c for c in RUN if c not in found] == [], "commands no longer in the README"


def test_ci_runs_its_commands_verbatim() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    for command, where in RUN.items():
        if where.startswith("ci"):
            assert command in ci, command
    assert INSTALL in ci
    assert "promtool check rules deploy/prometheus/rules.yaml" in ci
