"""Label and field selectors as the API server parses and matches them."""

from __future__ import annotations

import pytest

from baton.services.simcluster.api.selectors import SelectorError, field_predicate, label_predicate

pytestmark = pytest.mark.unit

POD = {
    "metadata": {"name": "a", "namespace": "t", "labels": {"team": "x", "size": "8"}},
    "spec": {"schedulerName": "baton", "hostNetwork": False},
    "status": {"phase": "Running"},
}
FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.schedulerName",
    "status.phase",
    "spec.hostNetwork",
)


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("team=x", True),
        ("team==x", True),
        ("team!=x", False),
        ("team!=y", True),
        ("missing!=y", True),
        ("team in (x, y)", True),
        ("team notin (x)", False),
        ("missing notin (x)", True),
        ("team", True),
        ("!team", False),
        ("!missing", True),
        ("team=x,size in (8,16)", True),
        ("team=x,size=4", False),
        ("size>4", True),
        ("size<4", False),
        ("  team = x ", True),
    ],
)
def test_label_selector(selector: str, matches: bool) -> None:
    predicate = label_predicate(selector)
    assert predicate is not None and predicate(POD) is matches


@pytest.mark.parametrize("selector", ["team in (x", "a b", "=x", "team=x y", "-bad=x", "size>a"])
def test_bad_label_selector_raises(selector: str) -> None:
    with pytest.raises(SelectorError):
        label_predicate(selector)


def test_empty_selector_selects_everything() -> None:
    assert label_predicate("") is None and field_predicate("", FIELDS) is None


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("metadata.name=a", True),
        ("metadata.namespace!=t", False),
        ("spec.nodeName=", True),
        ("spec.nodeName!=", False),
        ("status.phase=Running,spec.schedulerName==baton", True),
        ("spec.hostNetwork=false", True),
    ],
)
def test_field_selector(selector: str, matches: bool) -> None:
    predicate = field_predicate(selector, FIELDS)
    assert predicate is not None and predicate(POD) is matches


@pytest.mark.parametrize("selector", ["spec.image=x", "metadata.name in (a)", "status.phase>1"])
def test_bad_field_selector_raises(selector: str) -> None:
    with pytest.raises(SelectorError):
        field_predicate(selector, FIELDS)
