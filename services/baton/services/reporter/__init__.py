"""``baton reporter``: tells Kubernetes users what Baton decided (docs/reporter.md)."""
