"""bandwidth: per-pod internet egress limits from team fair shares (see docs/bandwidth.md)."""
