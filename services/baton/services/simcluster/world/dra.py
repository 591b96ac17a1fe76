"""Dynamic Resource Allocation (``resource.k8s.io/v1``) as a cluster running NVIDIA's GPU
DRA driver and an RDMA NIC driver shows it.

- **Drivers' ResourceSlices** (``devices: dra`` in the cluster spec): every node
  publishes one slice per driver, its pool named after the node. ``gpu.nvidia.com``
  lists the node's GPUs (``gpu-0`` …, attributes ``type``, ``index``, ``productName``,
  ``uuid``, ``pcieBusID``, ``numa``, ``resource.kubernetes.io/pcieRoot``; capacity
  ``memory``); ``dra.net`` lists its RDMA NICs (``nic-0`` …, attributes ``rdma``,
  ``rail``, ``ifName``, ``numa``, the same ``resource.kubernetes.io/pcieRoot``). The
  UUIDs, bus ids and interface names are the simulated hardware's, so a node's slices
  and its agent's telemetry name the same devices. As on an HGX H100, a PCIe
  switch holds two GPUs and two NICs, so GPU i and NIC i share a root and a
  ``matchAttribute`` constraint on it pairs them. A node's slices go with the node.
- **MIG** (a pool's ``mig: true``, node label ``nvidia.com/mig.capable``): as NVIDIA's
  driver publishes partitionable GPUs, each GPU has a counter set of its eight memory
  slices (``gpu-<i>-counters``, in a slice of its own: a slice holds devices or
  counters); the whole GPU consumes all eight, and its seven 1g.10gb MIG devices
  (``gpu-<i>-mig-1g10gb-<j>``, ``type`` "mig", ``profile``, ``parentIndex``,
  ``parentUUID``) one each, so a GPU is given whole or as MIG devices, never both. The
  pool's 64 devices (8 GPUs, 56 MIG devices) are the most one slice may hold when they
  consume counters.
- **DeviceClasses** as NVIDIA's and the NIC driver's: ``gpu.nvidia.com`` (whole GPUs:
  ``type == "gpu"``), ``mig.nvidia.com`` (``type == "mig"``) and ``dra.net``.
- **The resourceclaim controller** (always on, as in kube-controller-manager): a pod's
  ``spec.resourceClaims`` entry that names a ResourceClaimTemplate gets a ResourceClaim
  of the template's spec, owned by the pod (deleted with it), annotated
  ``resource.kubernetes.io/pod-claim-name``, and listed in the pod's
  ``status.resourceClaimStatuses``.
- **The kubelet** starts a bound pod that has claims only once each is allocated on
  its node and reserved for it (``status.allocation``, ``status.reservedFor``);
  ``waiting_on`` says what it waits for. Who allocates is the scheduler's job: this
  module allocates nothing.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

from baton.services.simcluster.api.store import ApiError, Store
from baton.services.simcluster.world import hardware
from baton.services.simcluster.world.controlling import (
    Controller,
    controller_of,
    controller_uid,
    owner_reference,
)

Obj = dict[str, Any]
API = "resource.k8s.io/v1"
GPU_DRIVER = "gpu.nvidia.com"
NIC_DRIVER = "dra.net"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
MIG_CLASS = "mig.nvidia.com"
MIG_PROFILE = hardware.MIG_PROFILE
MIG_SLOTS = 7  # 1g.10gb instances an H100 80GB holds
MEMORY_SLICES = 8
_TYPE = f'device.attributes["{GPU_DRIVER}"].type'


def device_classes() -> list[Obj]:
    """The DeviceClasses a cluster with both drivers has: whole GPUs, MIG devices, NICs."""
    selectors = {
        GPU_DRIVER: f'device.driver == "{GPU_DRIVER}" && {_TYPE} == "gpu"',
        MIG_CLASS: f'device.driver == "{GPU_DRIVER}" && {_TYPE} == "mig"',
        NIC_DRIVER: f'device.driver == "{NIC_DRIVER}"',
    }
    return [
        {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": name},
         "spec": {"selectors": [{"cel": {"expression": expression}}]}}
        for name, expression in selectors.items()
    ]  # fmt: skip


def node_slices(
    node: str, *, gpus: int, nics: int, product: str, memory: str, mig: bool = False
) -> list[Obj]:
    """The ResourceSlices ``node``'s drivers publish: its GPUs (with ``mig``, partitionable:
    their counters in a slice of their own, and their MIG devices), and its NICs if any."""
    gpu_devices = []
    for i in range(gpus):
        gpu = _device(f"gpu-{i}", i, type={"string": "gpu"}, productName={"string": product},
                      uuid={"string": hardware.gpu_uuid(node, i)},
                      pcieBusID={"string": hardware.bus_id(i)},
                      capacity={"memory": {"value": memory}})  # fmt: skip
        if mig:
            gpu["consumesCounters"] = [_consumes(i, range(MEMORY_SLICES))]
        gpu_devices.append(gpu)
        if mig:
            gpu_devices += [_mig_device(node, i, j, product) for j in range(MIG_SLOTS)]
    nic_devices = [
        _device(f"nic-{i}", i, rdma={"bool": True}, rail={"int": i},
                ifName={"string": f"ib{i}"})
        for i in range(nics)
    ]  # fmt: skip
    parts = 2 if mig else 1
    out = [_slice(node, GPU_DRIVER, {"devices": gpu_devices}, parts=parts)]
    if mig:
        counters = [
            {"name": f"gpu-{i}-counters",
             "counters": {f"memory-slice-{k}": {"value": "1"} for k in range(MEMORY_SLICES)}}
            for i in range(gpus)
        ]  # fmt: skip
        out.append(_slice(node, GPU_DRIVER, {"sharedCounters": counters}, parts=parts, part=1))
    if nic_devices:
        out.append(_slice(node, NIC_DRIVER, {"devices": nic_devices}))
    return out


def slice_names(node: str) -> list[str]:
    """Every slice ``node_slices`` may publish for ``node``."""
    gpu, nic = (f"{node}-{d.replace('.', '-')}" for d in (GPU_DRIVER, NIC_DRIVER))
    return [gpu, f"{gpu}-counters", nic]


def _mig_device(node: str, gpu: int, slot: int, product: str) -> Obj:
    """MIG device ``slot`` of GPU ``gpu``: a 1g.10gb instance on memory slice ``slot``."""
    uuid = hardware.gpu_uuid(node, gpu)
    device = _device(f"gpu-{gpu}-mig-{MIG_PROFILE.replace('.', '')}-{slot}", gpu,
                     type={"string": "mig"}, profile={"string": MIG_PROFILE},
                     productName={"string": product}, parentIndex={"int": gpu},
                     parentUUID={"string": uuid},
                     uuid={"string": hardware.mig_uuid(uuid, slot)},
                     capacity={"memory": {"value": "10Gi"}})  # fmt: skip
    device["consumesCounters"] = [_consumes(gpu, [slot])]
    return device


def _consumes(gpu: int, memory_slices: Any) -> Obj:
    return {"counterSet": f"gpu-{gpu}-counters",
            "counters": {f"memory-slice-{k}": {"value": "1"} for k in memory_slices}}  # fmt: skip


def _device(name: str, index: int, *, capacity: Obj | None = None, **attributes: Obj) -> Obj:
    attributes.update(
        index={"int": index},
        numa={"int": hardware.numa_node(index)},
        **{PCIE_ROOT: {"string": hardware.pcie_root(index)}},
    )
    device: Obj = {"name": name, "attributes": attributes}
    if capacity:
        device["capacity"] = capacity
    return device


def _slice(node: str, driver: str, content: Obj, *, parts: int = 1, part: int = 0) -> Obj:
    """One slice of the node's pool of ``driver``: its devices or its counters."""
    name = f"{node}-{driver.replace('.', '-')}" + ("-counters" if part else "")
    return {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": parts},
            **content,
        },
    }


def waiting_on(pod: Obj, node: str, claim: Any) -> str:
    """What a bound pod's claims still lack before its kubelet may start it ("" when
    nothing): ``claim(namespace, name)`` gives a ResourceClaim or None."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    generated = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
    }
    for entry in spec.get("resourceClaims") or ():
        name = entry.get("resourceClaimName") or generated.get(entry.get("name"))
        if not name:
            return f"claim {entry.get('name')!r}: not created yet"
        found = claim(meta.get("namespace", ""), name)
        if found is None:
            return f"ResourceClaim {name}: not found"
        status = found.get("status") or {}
        allocation = status.get("allocation")
        if not allocation:
            return f"ResourceClaim {name}: not allocated"
        pools = {r.get("pool") for r in (allocation.get("devices") or {}).get("results") or ()}
        if pools - {node}:
            return f"ResourceClaim {name}: allocated on {sorted(pools - {node})}, not {node}"
        reserved = {r.get("uid") for r in status.get("reservedFor") or ()}
        if meta.get("uid") not in reserved:
            return f"ResourceClaim {name}: not reserved for the pod"
    return ""


class Claims(Controller):
    """The resourceclaim controller: ResourceClaims from pods' templates. It remembers
    the claims each pod owns (``made``) as they come and go, rather than listing a
    namespace's claims for every pod: with tens of thousands of pods that list made
    every reconcile cost as much as all the claims."""

    resource = "pods"
    name = "resource_claim"
    kind = "Pod"
    collects = ("resourceclaims",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.made: dict[str, dict[str, str]] = {}  # pod uid -> pod claim entry -> claim

    def on_change(self, event: str, res: str, obj: Obj) -> None:
        if res == "pods" and not (obj.get("spec") or {}).get("resourceClaims"):
            return  # most pods have no claims: nothing to reconcile
        super().on_change(event, res, obj)

    def owned_changed(self, event: str, res: str, obj: Obj) -> None:
        meta = obj["metadata"]
        owner = controller_uid(obj)
        entry = (meta.get("annotations") or {}).get(POD_CLAIM_NAME, "")
        if event == "DELETED":
            mine = self.made.get(owner, {})
            if mine.get(entry) == meta["name"]:
                del mine[entry]
        else:
            self.made.setdefault(owner, {})[entry] = meta["name"]

    def forget(self, uid: str) -> None:
        self.made.pop(uid, None)

    def collect(self, namespace: str, uid: str) -> None:
        for name in list(self.made.get(uid, {}).values()):
            with contextlib.suppress(ApiError):
                self.delete("resourceclaims", self.store.get("resourceclaims", namespace, name))

    async def reconcile(self, obj: Obj) -> None:
        meta = obj["metadata"]
        phase = (obj.get("status") or {}).get("phase")
        if meta.get("deletionTimestamp") or phase in ("Succeeded", "Failed"):
            self._unreserve(obj)
            return
        have = self.made.get(meta.get("uid", ""), {})
        namespace = meta.get("namespace", "")
        statuses: list[Obj] = []
        for entry in obj["spec"]["resourceClaims"]:
            template = entry.get("resourceClaimTemplateName")
            if not template:
                continue  # a claim the user made: used as it is
            name = have.get(entry["name"])
            if not name:
                name = await self._claim(obj, entry["name"], template)
                self.made.setdefault(meta.get("uid", ""), {})[entry["name"]] = name
            statuses.append({"name": entry["name"], "resourceClaimName": name})
        if ((obj.get("status") or {}).get("resourceClaimStatuses") or []) != statuses:

            def put(pod: Obj) -> None:
                pod.setdefault("status", {})["resourceClaimStatuses"] = statuses

            self.store.mutate("pods", namespace, meta["name"], put)

    def _unreserve(self, pod: Obj) -> None:
        """A pod that is done or going no longer uses its claims: it leaves each one's
        ``reservedFor``, and a claim reserved for nobody is deallocated, its devices free
        for others (as the upstream controller does for structured parameters)."""
        meta = pod["metadata"]
        namespace, uid = meta.get("namespace", ""), meta.get("uid", "")

        def drop(claim: Obj) -> None:
            status = claim.get("status") or {}
            kept = [r for r in status.get("reservedFor") or () if r.get("uid") != uid]
            status["reservedFor"] = kept
            if not kept:
                status.pop("allocation", None)
                status.pop("reservedFor", None)
            claim["status"] = status

        for name in _claim_names(pod):
            found = claim_reader(self.store)(namespace, name)
            reserved = ((found or {}).get("status") or {}).get("reservedFor") or ()
            if any(r.get("uid") == uid for r in reserved):
                self.store.mutate("resourceclaims", namespace, name, drop)

    async def _claim(self, pod: Obj, entry: str, template_name: str) -> str:
        namespace = pod["metadata"].get("namespace", "")
        template = self.store.get("resourceclaimtemplates", namespace, template_name)
        claim = {
            "apiVersion": API,
            "kind": "ResourceClaim",
            "metadata": {
                "generateName": f"{pod['metadata']['name']}-{entry}-",
                "namespace": namespace,
                "annotations": {POD_CLAIM_NAME: entry},
                "ownerReferences": [owner_reference(pod)],
            },
            "spec": (template.get("spec") or {}).get("spec") or {},
        }
        created = await self.create("resourceclaims", claim)
        return str(created["metadata"]["name"])


def claim_reader(store: Store) -> Any:
    """``claim(namespace, name)`` over ``store``, None when there is none."""

    def claim(namespace: str, name: str) -> Obj | None:
        try:
            return store.get("resourceclaims", namespace, name)
        except ApiError:
            return None

    return claim


def claim_owner(obj: Obj) -> str:
    """The pod a generated ResourceClaim belongs to ("" for a user's own claim)."""
    return controller_of(obj, "Pod")


# --- the demo's workload with DRA on (``baton up --devices dra``) ----------------------

CLAIM_ENTRY = "devices"


def template_name(gpus: int, *, paired: bool) -> str:
    return f"baton-gpus-{gpus}" + ("-paired" if paired else "")


def claim_template(gpus: int, *, paired: bool) -> Obj:
    """``gpus`` GPUs; ``paired`` (a pod of a multi-node job): each with the RDMA NIC under
    its PCIe root, a ``matchAttribute`` constraint per pair, as NCCL wants them."""
    if not paired:
        requests = [{"name": "gpus", "exactly": {"deviceClassName": GPU_DRIVER, "count": gpus}}]
        constraints: list[Obj] = []
    else:
        requests = [
            {"name": f"{kind}{i}", "exactly": {"deviceClassName": driver}}
            for i in range(gpus)
            for kind, driver in (("gpu", GPU_DRIVER), ("nic", NIC_DRIVER))
        ]
        constraints = [
            {"requests": [f"gpu{i}", f"nic{i}"], "matchAttribute": PCIE_ROOT} for i in range(gpus)
        ]
    devices: Obj = {"requests": requests, **({"constraints": constraints} if constraints else {})}
    return {
        "apiVersion": API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": template_name(gpus, paired=paired)},
        "spec": {"spec": {"devices": devices}},
    }


def with_claims(obj: Obj) -> tuple[Obj, set[tuple[int, bool]]]:
    """``obj`` (a pod, or a Job, JobSet or MPIJob with pod templates) with every pod spec
    that counts GPUs asking for them through a claim instead: ``nvidia.com/gpu`` and
    ``rdma/ib`` leave its requests and limits, a ``resourceClaims`` entry names the
    template of its shape. Returns the object and the (GPUs, paired) templates it uses."""
    used: set[tuple[int, bool]] = set()

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if "containers" in node:
                return _claiming(node, used)
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(obj), used


def _claiming(spec: Obj, used: set[tuple[int, bool]]) -> Obj:
    containers = [dict(c) for c in spec["containers"]]
    first = containers[0]
    resources = dict(first.get("resources") or {})
    limits = dict(resources.get("limits") or {})
    requests = dict(resources.get("requests") or {})
    gpus = int(limits.pop("nvidia.com/gpu", requests.get("nvidia.com/gpu", 0)) or 0)
    if not gpus:
        return spec
    requests.pop("nvidia.com/gpu", None)
    paired = requests.pop("rdma/ib", None) is not None
    used.add((gpus, paired))
    first["resources"] = {**resources, "limits": limits, "requests": requests,
                          "claims": [{"name": CLAIM_ENTRY}]}  # fmt: skip
    entry = {"name": CLAIM_ENTRY, "resourceClaimTemplateName": template_name(gpus, paired=paired)}
    return {**spec, "containers": containers, "resourceClaims": [entry]}


_DEVICE = re.compile(r"^gpu-(\d+)(?:-mig-\w+-(\d+))?$")


def devices_allocated(pod: Obj, claim: Any) -> tuple[list[int], list[tuple[int, int]]]:
    """What the pod's claims were given of the GPU driver's devices: whole GPUs (their
    indices) and MIG devices ((GPU index, memory slice)), for its kubelet to prepare."""
    whole: list[int] = []
    parts: list[tuple[int, int]] = []
    for name in _claim_names(pod):
        found = claim(pod["metadata"].get("namespace", ""), name) or {}
        results = ((found.get("status") or {}).get("allocation") or {}).get("devices") or {}
        for r in results.get("results") or ():
            m = _DEVICE.match(str(r.get("device"))) if r.get("driver") == GPU_DRIVER else None
            if m is None:
                continue
            gpu, slot = m.groups()
            if slot is None:
                whole.append(int(gpu))
            else:
                parts.append((int(gpu), int(slot)))
    return sorted(set(whole)), sorted(set(parts))


def _claim_names(pod: Obj) -> list[str]:
    """The ResourceClaims a pod uses: its own, and those made from its templates."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    names = [s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or ()]
    names += [e.get("resourceClaimName") for e in spec.get("resourceClaims") or ()]
    return sorted({n for n in names if n})
