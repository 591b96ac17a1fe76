"""gang: all-or-nothing, topology-aware placement of PodGroups (see docs/gang.md)."""
