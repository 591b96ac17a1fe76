"""The one pure view of the cluster that cores share (see docs/view.md).

``cluster``: nodes with free capacity kept incrementally, pods, gangs and their
members; ``capacity``: eligible counts per pod shape and topology domain, refreshed
for changed nodes only; ``fitting``: shapes and the fit checks; ``domains``: where a
node sits in the topology.
"""

from baton.libs.view.capacity import Counts, Eligible, Index
from baton.libs.view.cluster import (
    GangView,
    NodeView,
    View,
    gang_key,
    holds_resources,
    is_bare,
    is_pending_baton,
    is_preemptible,
    is_usable,
    quorum,
)
from baton.libs.view.domains import domain_paths, domain_value, narrowest
from baton.libs.view.fitting import (
    Shape,
    admits,
    count_fits,
    eligible_counts,
    group_by_shape,
    refusals,
    shape_of,
)

__all__ = [
    "Counts", "Eligible", "GangView", "Index", "NodeView", "Shape", "View", "admits",
    "count_fits", "domain_paths", "domain_value", "eligible_counts", "gang_key",
    "group_by_shape", "holds_resources", "is_bare", "is_pending_baton", "is_preemptible",
    "is_usable", "narrowest", "quorum", "refusals", "shape_of",
]  # fmt: skip
