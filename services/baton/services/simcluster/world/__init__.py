"""simcluster's simulated world behind the API: nodes and their GPUs, kubelets, the cloud
that adds and removes nodes, faults, the workload controllers (Job, JobSet, MPIJob) and
the workloads that feed them. It reads and writes through the API server's store."""
