"""GPUs through NVML (``pynvml`` from nvidia-ml-py): counts, per-GPU health, Xid events.

Per GPU, one ``nvmlDeviceGetFieldValues`` call reads every counter (``FIELDS``), each
with its own return code, so a field the GPU does not support (``NOT_SUPPORTED``) is
simply absent from the report while a field that failed is named in ``failed``. The
temperature, the row remapper histogram (``c_nvmlRowRemapperHistogramValues``) and
the running processes are one call each. A GPU that answers ``GPU_IS_LOST`` is
reported ``present=False``.

Per GPU the report also says where it sits (its PCIe root and NUMA node, from sysfs by
its bus id: ``core.pci``) and, on a MIG-capable GPU, whether MIG mode is on and which
MIG instances exist (``nvmlDeviceGetMigDeviceHandleByIndex`` over the GPU's slots;
their UUIDs and profiles, ``1g.10gb`` read from the instance's name).

Xids: ``nvmlEventSetCreate`` + ``nvmlDeviceRegisterEvents(nvmlEventTypeXidCriticalError)``
per GPU, then ``nvmlEventSetWait`` (blocking up to a timeout; the shell calls it in a
thread). Without the NVML library (no driver, or a container without the NVIDIA
runtime) the backend says so (``Backend`` reading with the reason) and retries at
every poll: the GPU operator often installs the driver after the agent starts.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

import pynvml as N

from baton.proto.telemetry import GpuStatus, MigDevice
from baton.services.agent.core import pci
from baton.services.agent.core.kmsg import bus_id
from baton.services.agent.core.readings import (
    AnyReading,
    Backend,
    GpuProcess,
    Gpus,
    GpuSample,
    XidSeen,
)

T = TypeVar("T")
NAME: Final = "nvml"
MIB: Final = 1024 * 1024

# nvml.h's field id, named by the bindings only from nvidia-ml-py 12.570; an older driver
# answers INVALID_ARGUMENT for it (unsupported: the field is absent from the report).
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: Final = 230

# nvml.h: an event's gpuInstanceId when no GPU instance is named in it.
NO_INSTANCE: Final = 0xFFFFFFFF
_PROFILE = re.compile(r"\bMIG\s+(\S+)\s*$")

# Report field -> the NVML field ids summed into it.
FIELDS: Final[dict[str, tuple[int, ...]]] = {
    "ecc_volatile_sbe": (N.NVML_FI_DEV_ECC_SBE_VOL_TOTAL,),
    "ecc_volatile_dbe": (N.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,),
    "ecc_aggregate_sbe": (N.NVML_FI_DEV_ECC_SBE_AGG_TOTAL,),
    "ecc_aggregate_dbe": (N.NVML_FI_DEV_ECC_DBE_AGG_TOTAL,),
    "retired_pages": (N.NVML_FI_DEV_RETIRED_SBE, N.NVML_FI_DEV_RETIRED_DBE),
    "retired_pages_pending": (N.NVML_FI_DEV_RETIRED_PENDING,),
    "row_remap_pending": (N.NVML_FI_DEV_REMAPPED_PENDING,),
    "row_remap_failure": (N.NVML_FI_DEV_REMAPPED_FAILURE,),
    "nvlink_errors": (
        N.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
        N.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
        N.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
        N.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
    ),
    "recovery_action": (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,),
}
FIELD_IDS: Final = sorted({i for ids in FIELDS.values() for i in ids})
FLAGS: Final = frozenset({"retired_pages_pending", "row_remap_pending", "row_remap_failure"})

# nvmlDeviceGpuRecoveryAction_t -> the report's words. The numbers are nvml.h's, fixed by
# the driver's ABI: the bindings name them only from nvidia-ml-py 12.570 (IMEX, bus reset
# and system reboot from 13.610 or later), and what the driver sends is the number.
RECOVERY_ACTIONS: Final[dict[int, str]] = {
    0: "",  # NVML_GPU_RECOVERY_ACTION_NONE
    1: "reset",  # _GPU_RESET
    2: "reboot",  # _NODE_REBOOT
    3: "drain",  # _DRAIN_P2P
    4: "drain-and-reset",  # _DRAIN_AND_RESET
    5: "recover-imex-domain",  # _RECOVER_IMEX_DOMAIN
    6: "bus-reset",  # _BUS_RESET
    7: "system-reboot",  # _SYSTEM_REBOOT
}

# c_nvmlValue_t member for each nvmlValueType_t.
VALUE_MEMBERS: Final[dict[int, str]] = {
    N.NVML_VALUE_TYPE_DOUBLE: "dVal",
    N.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    N.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    N.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    N.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    N.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    N.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}

# Not an error: this GPU or driver does not have the field (an unknown id is INVALID_ARGUMENT).
UNSUPPORTED: Final = frozenset(
    {N.NVML_ERROR_NOT_SUPPORTED, N.NVML_ERROR_INVALID_ARGUMENT, N.NVML_ERROR_FUNCTION_NOT_FOUND}
)

# Why NVML cannot start, in words an operator can act on.
INIT_ERRORS: Final[dict[int, str]] = {
    N.NVML_ERROR_LIBRARY_NOT_FOUND: "NVML library (libnvidia-ml.so.1) not found: no NVIDIA "
    "driver on this node, or the container runs without the NVIDIA runtime",
    N.NVML_ERROR_DRIVER_NOT_LOADED: "NVIDIA kernel driver not loaded",
    N.NVML_ERROR_NO_PERMISSION: "no permission to open the NVIDIA device nodes (/dev/nvidia*)",
    N.NVML_ERROR_LIB_RM_VERSION_MISMATCH: "NVML library and kernel driver versions differ "
    "(driver upgraded without a reboot?)",
}


class GpuLost(Exception):
    """The GPU answered NVML_ERROR_GPU_IS_LOST."""


def decode_value(field: N.c_nvmlFieldValue_t) -> int | float | None:
    """The value of one ``c_nvmlFieldValue_t``; None when its own return code is not success."""
    if field.nvmlReturn != N.NVML_SUCCESS:
        return None
    member = VALUE_MEMBERS.get(field.valueType)
    if member is None:
        return None
    value: int | float = getattr(field.value, member)
    return value


def decode_fields(values: Sequence[N.c_nvmlFieldValue_t]) -> tuple[dict[str, Any], list[str]]:
    """``GpuStatus`` keyword arguments from field values, and the names of fields that failed."""
    by_id = {v.fieldId: (decode_value(v), v.nvmlReturn) for v in values}
    status: dict[str, Any] = {}
    failed: list[str] = []
    for name, ids in FIELDS.items():
        found = [by_id.get(i, (None, N.NVML_ERROR_NOT_SUPPORTED)) for i in ids]
        numbers = [value for value, ret in found if ret == N.NVML_SUCCESS and value is not None]
        if any(ret != N.NVML_SUCCESS and ret not in UNSUPPORTED for _, ret in found):
            failed.append(name)
        if not numbers:
            continue
        total = int(sum(numbers))
        if name == "recovery_action":
            if total not in RECOVERY_ACTIONS:
                failed.append(name)  # a code newer than this agent
            status[name] = RECOVERY_ACTIONS.get(total, "")
        else:
            status[name] = total != 0 if name in FLAGS else total
    return status, failed


def decode_histogram(histogram: N.c_nvmlRowRemapperHistogramValues) -> int:
    """Memory banks with no spare row left (the histogram's ``none`` bucket)."""
    return int(histogram.none)


def decode_processes(processes: Sequence[Any]) -> tuple[GpuProcess, ...]:
    """``nvmlDeviceGetComputeRunningProcesses`` results (``usedGpuMemory`` bytes or None)."""
    return tuple(
        GpuProcess(pid=int(p.pid), used_mib=int(p.usedGpuMemory or 0) // MIB) for p in processes
    )


def decode_event(
    data: N.c_nvmlEventData_t, *, gpus: dict[int, tuple[int, str]], seq: int, at: float
) -> XidSeen | None:
    """An Xid from ``c_nvmlEventData_t``; ``gpus`` maps a device handle's address to
    (index, bus id). None for other event types."""
    if not data.eventType & N.nvmlEventTypeXidCriticalError:
        return None
    index, bus = gpus.get(_address(data.device) or 0, (-1, ""))
    instance = int(getattr(data, "gpuInstanceId", NO_INSTANCE))
    return XidSeen(at=at, source="nvml", seq=seq, xid=int(data.eventData), gpu=index, bus_id=bus,
                   gpu_instance=-1 if instance == NO_INSTANCE else instance)  # fmt: skip


def _address(handle: Any) -> int | None:
    address: int | None = ctypes.cast(handle, ctypes.c_void_p).value
    return address


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _read(fn: Callable[..., T], *args: Any) -> tuple[T | None, str]:
    """(value, '') on success, (None, '') when unsupported, (None, why) when it failed."""
    try:
        return fn(*args), ""
    except N.NVMLError as exc:
        if exc.value == N.NVML_ERROR_GPU_IS_LOST:
            raise GpuLost from exc
        return None, "" if exc.value in UNSUPPORTED else str(exc)


def read_gpu(index: int, handle: Any) -> GpuSample:
    """One GPU; ``present=False`` when it is lost or has no handle."""
    try:
        if handle is None:
            handle, why = _read(N.nvmlDeviceGetHandleByIndex, index)
            if handle is None:
                raise GpuLost(why)
        return _read_gpu(index, handle)
    except GpuLost:
        return GpuSample(status=GpuStatus(index=index, present=False))


def mig_profile(name: str) -> str:
    """The profile a MIG instance's name ends with: ``NVIDIA H100 80GB HBM3 MIG 1g.10gb``
    -> ``1g.10gb``; '' for another name."""
    m = _PROFILE.search(name)
    return m.group(1) if m else ""


def read_mig(handle: Any) -> tuple[bool | None, tuple[MigDevice, ...]]:
    """(MIG mode on, the instances that exist); (None, ()) on a GPU without MIG."""
    mode, _ = _read(N.nvmlDeviceGetMigMode, handle)
    if mode is None:
        return None, ()
    if mode[0] != N.NVML_DEVICE_MIG_ENABLE:
        return False, ()
    slots, _ = _read(N.nvmlDeviceGetMaxMigDeviceCount, handle)
    found = []
    for slot in range(slots or 0):
        mig, _ = _read(N.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
        if mig is None:  # NOT_FOUND: no instance in this slot
            continue
        uuid, _ = _read(N.nvmlDeviceGetUUID, mig)
        name, _ = _read(N.nvmlDeviceGetName, mig)
        instance, _ = _read(N.nvmlDeviceGetGpuInstanceId, mig)
        found.append(MigDevice(uuid=_text(uuid or ""), profile=mig_profile(_text(name or "")),
                               gpu_instance=-1 if instance is None else int(instance)))  # fmt: skip
    return True, tuple(found)


def _processes(handle: Any) -> list[Any]:
    """Compute processes; the _v2 call on drivers older than the bindings' default (_v3)."""
    try:
        return list(N.nvmlDeviceGetComputeRunningProcesses(handle))
    except N.NVMLLibraryMismatchError:
        return list(N.nvmlDeviceGetComputeRunningProcesses_v2(handle))


def _read_gpu(index: int, handle: Any) -> GpuSample:
    uuid, _ = _read(N.nvmlDeviceGetUUID, handle)
    pci_info, _ = _read(N.nvmlDeviceGetPciInfo, handle)
    temperature, temperature_error = _read(
        N.nvmlDeviceGetTemperature, handle, N.NVML_TEMPERATURE_GPU
    )
    values, values_error = _read(N.nvmlDeviceGetFieldValues, handle, FIELD_IDS)
    histogram, histogram_error = _read(N.nvmlDeviceGetRowRemapperHistogram, handle)
    processes, _ = _read(_processes, handle)
    mig_enabled, migs = read_mig(handle)
    bus = _text(pci_info.busId) if pci_info is not None else ""
    root, numa = pci.locate_bus(bus)
    fields, failed = decode_fields(values) if values is not None else ({}, [])
    if values_error:
        failed = list(FIELDS)
    failed += [name for name, why in (("temperature_c", temperature_error),
               ("row_remap_banks_full", histogram_error)) if why]  # fmt: skip
    status = GpuStatus(
        index=index,
        uuid=_text(uuid or ""),
        bus_id=bus_id(bus),
        temperature_c=int(temperature) if temperature is not None else None,
        row_remap_banks_full=decode_histogram(histogram) if histogram is not None else None,
        failed=tuple(failed),
        pcie_root=root,
        numa_node=numa,
        mig_enabled=mig_enabled,
        mig=migs,
        **fields,
    )
    return GpuSample(status=status, processes=decode_processes(processes or ()))


class Nvml:
    """The NVML backend: ``poll`` reads every GPU, ``wait_xids`` waits for Xid events."""

    name = NAME

    def __init__(self, *, expected: int | None) -> None:
        self.expected = expected
        self.reason: str | None = None  # None: not tried yet, '': ready
        self._handles: list[Any] = []
        self._gpus: dict[int, tuple[int, str]] = {}  # handle address -> (index, bus id)
        self._events: Any = None
        self._seq = 0

    def poll(self, at: float) -> list[AnyReading]:
        """A ``Gpus`` reading; a ``Backend`` reading first when availability changed."""
        was = self.reason
        if self.reason != "":
            self.reason = self._start()
        note: list[AnyReading] = [Backend(at=at, name=NAME, reason=self.reason)]
        changed = note if self.reason != was else []
        if self.reason:
            return [*changed, Gpus(at=at, expected=self.expected, found=None)]
        gpus = tuple(read_gpu(i, h) for i, h in enumerate(self._handles))
        for handle, sample in zip(self._handles, gpus, strict=True):
            address = _address(handle) if handle is not None else None
            if address and sample.status.bus_id:  # for naming the GPU of an Xid event
                self._gpus[address] = (sample.status.index, sample.status.bus_id)
        found = sum(1 for g in gpus if g.status.present)
        return [*changed, Gpus(at=at, gpus=gpus, expected=self.expected, found=found)]

    def _start(self) -> str:
        try:
            N.nvmlInit()
        except N.NVMLError as exc:
            return INIT_ERRORS.get(exc.value, f"NVML init failed: {exc}")
        count, why = _read(N.nvmlDeviceGetCount)
        self._handles = []
        for index in range(count or 0):
            try:
                self._handles.append(N.nvmlDeviceGetHandleByIndex(index))
            except N.NVMLError:
                self._handles.append(None)
        self._events = self._register()
        return why

    def _register(self) -> Any:
        events, _ = _read(N.nvmlEventSetCreate)
        for handle in self._handles:
            if events is not None and handle is not None:
                _read(N.nvmlDeviceRegisterEvents, handle, N.nvmlEventTypeXidCriticalError, events)
        return events

    def wait_xids(self, *, timeout_ms: int, at: Callable[[], float]) -> list[XidSeen] | None:
        """Block up to ``timeout_ms`` for an Xid event: [] on timeout, None when there is
        nothing to wait on (NVML not started, or waiting failed: the caller sleeps)."""
        if self._events is None:
            return None
        try:
            data = N.nvmlEventSetWait(self._events, timeout_ms)
        except N.NVMLError as exc:
            return [] if exc.value == N.NVML_ERROR_TIMEOUT else None
        self._seq += 1
        seen = decode_event(data, gpus=self._gpus, seq=self._seq, at=at())
        return [seen] if seen is not None else []

    def close(self) -> None:
        if self.reason == "":
            if self._events is not None:
                _read(N.nvmlEventSetFree, self._events)
            _read(N.nvmlShutdown)
