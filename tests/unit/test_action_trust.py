"""Who may ask the actuator for what: every (credential, subject, body kind) triple.

A credential (a service's NATS user) publishes on a subject only if its permissions
allow it (``libs.runner.access``, enforced by nats-server); the actuator applies what
arrives only if ``trusting.judge`` says so. Together: an action is applied only when it
comes from a producer allowed its kind, on its own subject, at its current epoch.
"""

from __future__ import annotations

import itertools

import msgspec
import pytest

from baton.libs.runner import access, action_route
from baton.proto import subjects
from baton.proto.actions import ACTION_SUBJECTS, ASKS, CreatePod, action_subject, kind_of
from baton.services.actuator.core.trusting import judge
from baton.services.cli.natsconfig import specs
from tests.support.actions import one_of_each

pytestmark = pytest.mark.unit
C = "c1"
EPOCHS = {name: 40 + i for i, name in enumerate(sorted(ASKS))}
KINDS = sorted(kind for kind, _ in ACTION_SUBJECTS.values())


def nats_allows(perms: access.Permissions, subject: str) -> bool:
    ok = any(subjects.matches(p, subject) or p == subject for p in perms.publish)
    return ok and not any(subjects.matches(p, subject) for p in perms.deny_publish)


def test_the_table_of_who_asks_for_what_is_every_services_routes() -> None:
    routed = {
        s.name: frozenset(ACTION_SUBJECTS[t][0] for t in s.action_types())
        for s in specs()
        if s.action_types()
    }
    assert routed == ASKS


def test_only_a_producer_allowed_a_kind_on_its_own_subject_gets_it_applied() -> None:
    """Every credential, every subject kind, every producer token it might write, every
    body kind (the body claiming to be from that token, at that token's epoch)."""
    credentials = {s.name: access.service_permissions(s, C) for s in specs()}
    credentials["agent"] = access.agent_permissions(C, "gpu-0")
    applied = set()
    tried = 0
    for (cred, perms), kind, token in itertools.product(credentials.items(), KINDS, ASKS):
        for body in one_of_each(by=token, epoch=EPOCHS[token]):
            subject = action_subject(C, body).replace(f".{kind_of(body)}.", f".{kind}.", 1)
            tried += 1
            if not nats_allows(perms, subject):
                continue
            verdict, why = judge(cluster=C, subject=subject, action=body, epochs=EPOCHS)
            if verdict == "ok":
                applied.add((cred, kind, kind_of(body)))
            else:
                assert verdict == "refused", why
    expected = {(cred, kind, kind) for cred, kinds in ASKS.items() for kind in kinds}
    assert tried == len(credentials) * len(KINDS) ** 2 * len(ASKS)
    assert applied == expected


FORGED = [
    # what, subject, body changes, the reason names
    ("a create-pod body on gang's bind-gang subject", "baton.c1.action.bind-gang.gang.team-a.evil",
     {"by": "gang"}, "the body is create-pod, the subject says bind-gang"),
    ("gang's own create-pod subject", "baton.c1.action.create-pod.gang.team-a.evil",
     {"by": "gang"}, "gang may not ask for create-pod"),
    ("a producer nobody knows", "baton.c1.action.create-pod.mallory.team-a.evil",
     {"by": "mallory"}, "'mallory' is no producer"),
    ("health's subject, the body claiming balloon", "baton.c1.action.create-pod.health.team-a.evil",
     {"by": "balloon"}, "the body says by='balloon', the subject 'health'"),
    ("another object's subject", "baton.c1.action.create-pod.health.team-a.other",
     {}, "the body names baton.c1.action.create-pod.health.team-a.evil"),
    ("the old subject, no producer", "baton.c1.action.create-pod.team-a.evil",
     {}, "refused"),
    ("another cluster", "baton.c2.action.create-pod.health.team-a.evil", {}, "refused"),
    ("epoch 0", None, {"epoch": 0}, "carries no lease epoch"),
    ("a future epoch", None, {"epoch": 10_000}, "is ahead of its lease's"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("what", "subject", "changes", "named"), FORGED, ids=[f[0] for f in FORGED]
)
def test_a_forged_subject_producer_or_epoch_is_refused_naming_why(
    what: str, subject: str | None, changes: dict[str, object], named: str
) -> None:
    body = msgspec.structs.replace(_create_pod(EPOCHS["health"]), **changes)
    subject = subject or action_subject(C, body)
    verdict, why = judge(cluster=C, subject=subject, action=body, epochs=EPOCHS)
    assert verdict == "refused" and named in why, why


def test_a_producer_without_a_lease_is_refused_and_an_older_epoch_is_stale() -> None:
    create = _create_pod(7)
    subject = action_subject(C, create)
    verdict, why = judge(cluster=C, subject=subject, action=create, epochs={})
    assert verdict == "refused" and "health holds no lease" in why
    assert judge(cluster=C, subject=subject, action=create, epochs={"health": 9})[0] == "stale"
    assert judge(cluster=C, subject=subject, action=create, epochs={"health": 7}) == ("ok", "")


def _create_pod(epoch: int) -> CreatePod:
    """health's pinned pod ``team-a/evil`` (one_of_each's CreatePod) at ``epoch``."""
    made = [a for a in one_of_each(by="health", epoch=epoch) if isinstance(a, CreatePod)]
    return made[0]


def test_every_services_actions_go_to_their_subject_with_their_id() -> None:
    routes = [r for s in specs() for r in s.routes if r.action]
    assert routes and all(r.to is action_route for r in routes)
    for action in one_of_each(by="gang", epoch=1):
        assert action_route(C, action) == (action_subject(C, action), f"{action.id}:{action.epoch}")
