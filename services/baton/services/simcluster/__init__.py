"""simcluster: a simulated GPU cluster behind a Kubernetes-style HTTP API."""
