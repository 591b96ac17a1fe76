"""NATS auth callout: node agents connect with their pod's ServiceAccount token."""
