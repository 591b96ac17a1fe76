"""Structural schemas of the workload kinds simcluster's controllers run: batch/v1 Job,
JobSet (``jobset.x-k8s.io/v1alpha2``) and MPIJob (``kubeflow.org/v2beta1``).

Every field of each kind's spec is named, as of Kubernetes 1.33, JobSet v0.8 and the
MPI operator v0.6, so a typo (``spec.paralelism``, ``replicatedJobs[0].replica``) is an
unknown field; the statuses and the subtrees simcluster does not model are left open.
"""

from __future__ import annotations

from baton.services.simcluster.api.schemas import (
    BOOL,
    INT,
    OBJECT_META,
    OPEN,
    POD_SPEC,
    STRING,
    Obj,
    array,
    described,
    kind,
    obj,
    opened,
)

POD_TEMPLATE = obj("A pod template.", metadata=OBJECT_META, spec=POD_SPEC)
JOB_SPEC = opened(
    "managedBy manualSelector podFailurePolicy podReplacementPolicy selector successPolicy",
    "The Job's desired state.",
    parallelism=described(INT, "Pods running at once."),
    completions=described(INT, "Pods that must succeed (unset: any one, NonIndexed)."),
    completionMode=described(STRING, "NonIndexed or Indexed."),
    backoffLimit=described(INT, "Pod failures before the Job fails."),
    backoffLimitPerIndex=INT,
    maxFailedIndexes=INT,
    activeDeadlineSeconds=INT,
    ttlSecondsAfterFinished=INT,
    suspend=BOOL,
    template=POD_TEMPLATE,
)
JOB = kind("A batch/v1 Job.", spec=JOB_SPEC, status=OPEN)

_REPLICATED_JOB = obj(
    "Replicas of one Job template.",
    name=STRING,
    groupName=STRING,
    replicas=described(INT, "Jobs made from the template."),
    dependsOn=array(OPEN),
    template=obj("A Job template.", metadata=OBJECT_META, spec=JOB_SPEC),
)
JOBSET = kind(
    "A JobSet: Jobs that run, fail and restart together.",
    spec=obj(
        replicatedJobs=array(_REPLICATED_JOB, "The JobSet's Jobs, by template."),
        network=opened("enableDNSHostnames publishNotReadyAddresses subdomain"),
        successPolicy=opened("operator targetReplicatedJobs"),
        failurePolicy=obj(
            maxRestarts=described(INT, "Restarts (every Job recreated) before it fails."),
            restartStrategy=STRING,
            rules=array(OPEN),
        ),
        startupPolicy=obj(startupPolicyOrder=described(STRING, "AnyOrder or InOrder.")),
        suspend=BOOL,
        coordinator=opened("replicatedJob jobIndex podIndex"),
        managedBy=STRING,
        ttlSecondsAfterFinished=INT,
    ),
    status=OPEN,
)

_REPLICA_SPEC = obj(
    "One role of the MPIJob (Launcher or Worker).",
    replicas=INT,
    restartPolicy=STRING,
    template=POD_TEMPLATE,
)
MPIJOB = kind(
    "An MPIJob: a launcher and its workers.",
    spec=obj(
        slotsPerWorker=INT,
        runLauncherAsWorker=BOOL,
        runPolicy=opened(
            "activeDeadlineSeconds backoffLimit cleanPodPolicy managedBy schedulingPolicy "
            "suspend ttlSecondsAfterFinished"
        ),
        mpiReplicaSpecs=obj(Launcher=_REPLICA_SPEC, Worker=_REPLICA_SPEC),
        sshAuthMountPath=STRING,
        launcherCreationPolicy=STRING,
        mpiImplementation=described(STRING, "OpenMPI, Intel or MPICH."),
    ),
    status=OPEN,
)

SCHEMAS: dict[tuple[str, str], Obj] = {
    ("batch", "Job"): JOB,
    ("jobset.x-k8s.io", "JobSet"): JOBSET,
    ("kubeflow.org", "MPIJob"): MPIJOB,
}
