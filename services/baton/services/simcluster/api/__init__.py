"""simcluster's Kubernetes API server: the object store, watches, validation, admission
webhooks, tokens and the served discovery/OpenAPI, as kube-apiserver answers them. It
knows nothing of nodes, GPUs or workloads (``world``)."""
