"""Every label, annotation and taint key Baton reads or writes, in one place.

Baton's own keys live under ``baton.io/``; the ecosystem's keys are named here too
so a service never spells one as a string of its own. The docs print this module.

| key | on | set by | meaning |
|---|---|---|---|
| ``baton.io/team`` | node, pod label | admission | the team owning the node / the pod |
| ``baton.io/pool`` | node label | the cluster | the node's pool; teams own pools |
| ``baton.io/block``, ``/rack`` | node label | the cluster | topology below the zone |
| ``baton.io/team`` | node taint | admission | NoSchedule: the owning team only |
| ``baton.io/unhealthy`` | node taint | health | NoSchedule: quarantined |
| ``baton.io/preflight`` | node taint | health | NoSchedule: not validated yet |
| ``baton.io/draining`` | node taint | health | NoExecute: gangs restart elsewhere |
| ``baton.io/health`` | node annotation | health | who quarantined it, why, when (JSON) |
| ``baton.io/health-opt-out`` | node label | people | ``"true"``: health leaves it alone |
| ``baton.io/remediation`` | node label | health | ``reboot`` / ``replace``, for a fixer |
| ``baton.io/preflight`` | pod label | health | a preflight check pod |
| ``baton.io/balloon`` | pod label | balloon | a placeholder holding warm capacity |
| ``baton.io/admitted`` | PodGroup, pod | admission | the gang may be placed |
| ``baton.io/borrowing`` | pod annotation | admission | runs on other teams' idle nodes |
| ``baton.io/gpus-per-pod`` | PodGroup | users | GPUs each member will ask for |
| ``baton.io/topology-required`` | PodGroup | users | level the gang must fit in |
| ``baton.io/topology-preferred`` | PodGroup | users | level the gang should fit in |
| ``baton.io/expected-duration`` | PodGroup, pod | users | run time (``"5400"``, ``"1h30m"``) |
| ``baton.io/recreate`` | pod annotation | users | ``"false"``: not recreated on restart |
| ``baton.io/recreated-from`` | pod annotation | actuator | the uid a recreated copy replaced |
| ``baton.io/egress-limit`` | pod annotation | bandwidth | the limit it wrote last |
| ``baton.io/egress-cap`` | pod annotation | bandwidth | the pod's own egress cap, saved then |
"""

from __future__ import annotations

from typing import Final

PREFIX: Final = "baton.io/"

# -- node labels -----------------------------------------------------------------
TEAM: Final = "baton.io/team"  # node and pod label; also the team taint's key
POOL: Final = "baton.io/pool"
BLOCK: Final = "baton.io/block"
RACK: Final = "baton.io/rack"
ZONE: Final = "topology.kubernetes.io/zone"
HOSTNAME: Final = "kubernetes.io/hostname"
HEALTH_OPT_OUT: Final = "baton.io/health-opt-out"
REMEDIATION: Final = "baton.io/remediation"

# -- node taints -----------------------------------------------------------------
UNHEALTHY: Final = "baton.io/unhealthy"
PREFLIGHT: Final = "baton.io/preflight"  # taint on unvalidated nodes; label on check pods
DRAINING: Final = "baton.io/draining"
HEALTH_TAINTS: Final = (UNHEALTHY, PREFLIGHT, DRAINING)

# -- node annotations ------------------------------------------------------------
HEALTH: Final = "baton.io/health"

# -- pod and PodGroup marks ------------------------------------------------------
ADMITTED: Final = "baton.io/admitted"
BORROWING: Final = "baton.io/borrowing"
GPUS_PER_POD: Final = "baton.io/gpus-per-pod"
TOPOLOGY_REQUIRED: Final = "baton.io/topology-required"
TOPOLOGY_PREFERRED: Final = "baton.io/topology-preferred"
RECREATE: Final = "baton.io/recreate"
EXPECTED_DURATION: Final = "baton.io/expected-duration"  # seconds, or "1h30m" (Go-style)
PREEMPTIBLE: Final = "baton.io/preemptible"  # "true": may be moved to defragment
RECREATED_FROM: Final = "baton.io/recreated-from"  # on a RecreatePod copy: the uid it replaced
BALLOON: Final = "baton.io/balloon"
EGRESS_LIMIT: Final = "baton.io/egress-limit"  # what bandwidth last wrote as the pod's limit
EGRESS_CAP: Final = "baton.io/egress-cap"  # the pod's own cap, saved when bandwidth took over

# Baton's marks that belong to one admission or placement of a pod, not to what its
# A namespace labelled WEBHOOK=SKIP is never sent to Baton's webhook: Baton's own pods
# (deploy/base/namespace.yaml; health's preflight pods, which are bound by nodeName)
WEBHOOK: Final = "baton.io/webhook"
SKIP: Final = "skip"
# author wrote: a RecreatePod copy drops them (the webhook refuses a new pod that
# claims ``baton.io/admitted``; admission decides again for the copy).
PLACEMENT_MARKS: Final = (ADMITTED, BORROWING, RECREATED_FROM)

# -- the ecosystem's keys --------------------------------------------------------
POD_GROUP: Final = "scheduling.x-k8s.io/pod-group"  # scheduler-plugins pod label
# Gang membership in other formats (docs/gang.md, "Gang formats"): Volcano's pod
# annotation (and its newer alias), Volcano's member count for a group without a
# PodGroup object, Kueue's plain-pod group label and its total-count annotation.
VOLCANO_GROUP: Final = "scheduling.k8s.io/group-name"
VOLCANO_GROUP_ALIAS: Final = "scheduling.volcano.sh/group-name"
VOLCANO_MIN_MEMBER: Final = "scheduling.volcano.sh/group-min-member"
KUEUE_GROUP: Final = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL: Final = "kueue.x-k8s.io/pod-group-total-count"
# A JobSet is one gang without a PodGroup: its pods carry the JobSet's name (label, set
# by the JobSet controller) and, in their template, Baton's member count (every pod of
# the JobSet).
JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_JOB_KEY: Final = "jobset.sigs.k8s.io/job-key"  # one value per Job of the JobSet
# JobSet's exclusive placement: each Job in a domain of this label key of its own.
JOBSET_EXCLUSIVE: Final = "alpha.jobset.sigs.k8s.io/exclusive-topology"
GANG_MEMBERS: Final = "baton.io/gang-members"
EGRESS_BANDWIDTH: Final = "kubernetes.io/egress-bandwidth"
INGRESS_BANDWIDTH: Final = "kubernetes.io/ingress-bandwidth"
SAFE_TO_EVICT: Final = "cluster-autoscaler.kubernetes.io/safe-to-evict"
DELETE_MACHINE: Final = "cluster.x-k8s.io/delete-machine"
MACHINE: Final = "cluster.x-k8s.io/machine"  # on a Node: the Cluster API Machine behind it
NODE_GROUP_MIN: Final = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
NODE_GROUP_MAX: Final = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
GPU: Final = "nvidia.com/gpu"

# Topology levels broad -> narrow, as Kueue's Topology lists them.
DEFAULT_LEVELS: Final = (ZONE, BLOCK, RACK)


def is_baton_key(key: str) -> bool:
    """``baton.io/x`` and ``sub.baton.io/x`` (e.g. ``sim.baton.io/``) are Baton's."""
    domain, slash, _ = key.partition("/")
    return bool(slash) and (domain == "baton.io" or domain.endswith(".baton.io"))
