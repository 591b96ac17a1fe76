"""NVML decoding against nvidia-ml-py's own ctypes structures and constants (no GPU needed),
and the backend's "no NVML here" answer from the real library loader."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from typing import Any

import pynvml as N
import pytest

from baton.services.agent import nvml
from baton.services.agent.core.readings import Backend, GpuProcess, Gpus

pytestmark = pytest.mark.unit


def field_values(*fields: tuple[int, int, int, Any]) -> Any:
    """A real ``c_nvmlFieldValue_t`` array: (field id, return code, value type, value)."""
    array = (N.c_nvmlFieldValue_t * len(fields))()
    for slot, (field_id, ret, value_type, value) in zip(array, fields, strict=True):
        slot.fieldId, slot.nvmlReturn, slot.valueType = field_id, ret, value_type
        setattr(slot.value, nvml.VALUE_MEMBERS[value_type], value)
    return array


OK, UNSUPPORTED, FAILED = N.NVML_SUCCESS, N.NVML_ERROR_NOT_SUPPORTED, N.NVML_ERROR_UNKNOWN
ULL, UI, DBL = (
    N.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    N.NVML_VALUE_TYPE_UNSIGNED_INT,
    N.NVML_VALUE_TYPE_DOUBLE,
)


@pytest.mark.parametrize(
    ("value_type", "value", "expected"),
    [
        (N.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 2**40 + 3, 2**40 + 3),
        (N.NVML_VALUE_TYPE_UNSIGNED_INT, 7, 7),
        (N.NVML_VALUE_TYPE_SIGNED_LONG_LONG, -5, -5),
        (N.NVML_VALUE_TYPE_SIGNED_INT, -2, -2),
        (N.NVML_VALUE_TYPE_UNSIGNED_SHORT, 9, 9),
        (N.NVML_VALUE_TYPE_DOUBLE, 1.5, 1.5),
    ],
)
def test_each_value_type_reads_its_union_member(value_type: int, value: Any, expected: Any) -> None:
    (field,) = field_values((N.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, OK, value_type, value))
    assert nvml.decode_value(field) == expected


def test_a_field_with_its_own_error_has_no_value() -> None:
    (field,) = field_values((N.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, UNSUPPORTED, ULL, 12))
    assert nvml.decode_value(field) is None


def test_fields_decode_into_the_report_with_sums_and_flags() -> None:
    values = field_values(
        (N.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, OK, ULL, 4),
        (N.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, OK, ULL, 1),
        (N.NVML_FI_DEV_ECC_SBE_AGG_TOTAL, OK, ULL, 40),
        (N.NVML_FI_DEV_ECC_DBE_AGG_TOTAL, OK, ULL, 2),
        (N.NVML_FI_DEV_RETIRED_SBE, OK, ULL, 3),
        (N.NVML_FI_DEV_RETIRED_DBE, OK, ULL, 2),
        (N.NVML_FI_DEV_RETIRED_PENDING, OK, UI, 1),
        (N.NVML_FI_DEV_REMAPPED_PENDING, OK, UI, 0),
        (N.NVML_FI_DEV_REMAPPED_FAILURE, OK, UI, 1),
        (N.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, OK, ULL, 10),
        (N.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, OK, ULL, 5),
        (N.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, OK, ULL, 1),
        (N.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, OK, ULL, 0),
        (N.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, OK, UI, N.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT),
    )
    status, failed = nvml.decode_fields(values)
    assert status == {
        "ecc_volatile_sbe": 4,
        "ecc_volatile_dbe": 1,
        "ecc_aggregate_sbe": 40,
        "ecc_aggregate_dbe": 2,
        "retired_pages": 5,
        "retired_pages_pending": True,
        "row_remap_pending": False,
        "row_remap_failure": True,
        "nvlink_errors": 16,
        "recovery_action": "reboot",
    }
    assert failed == []


def test_unsupported_fields_are_absent_and_failed_ones_named() -> None:
    """A PCIe GPU without NVLink, an older driver without the recovery field, and a
    retired-pages read that failed: each handled on its own."""
    values = field_values(
        (N.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, OK, ULL, 0),
        (N.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, OK, ULL, 0),
        (N.NVML_FI_DEV_RETIRED_SBE, FAILED, ULL, 0),
        (N.NVML_FI_DEV_RETIRED_DBE, OK, ULL, 2),
        (N.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, UNSUPPORTED, ULL, 0),
        (N.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, UNSUPPORTED, ULL, 0),
        (N.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, N.NVML_ERROR_INVALID_ARGUMENT, UI, 0),
    )
    status, failed = nvml.decode_fields(values)
    assert status == {"ecc_volatile_sbe": 0, "ecc_volatile_dbe": 0, "retired_pages": 2}
    assert failed == ["retired_pages"]


@pytest.mark.parametrize(
    ("code", "words", "failed"),
    [
        (N.NVML_GPU_RECOVERY_ACTION_NONE, "", []),
        (N.NVML_GPU_RECOVERY_ACTION_GPU_RESET, "reset", []),
        (N.NVML_GPU_RECOVERY_ACTION_DRAIN_P2P, "drain", []),
        (N.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET, "drain-and-reset", []),
        (N.NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT, "system-reboot", []),
        (99, "", ["recovery_action"]),  # newer than this agent: named, not guessed
    ],
)
def test_recovery_action_as_the_driver_reports_it(code: int, words: str, failed: list[str]) -> None:
    values = field_values((N.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, OK, UI, code))
    status, failures = nvml.decode_fields(values)
    assert (status["recovery_action"], failures) == (words, failed)


def test_recovery_action_numbers_are_the_bindings_own_where_they_name_them() -> None:
    named = {int(getattr(N, n)): n for n in dir(N) if n.startswith("NVML_GPU_RECOVERY_ACTION_")}
    assert named, "these bindings name no recovery action: the check below would pass empty"
    assert set(named) <= set(nvml.RECOVERY_ACTIONS), named
    assert nvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION == N.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION


def test_the_nvml_backend_loads_with_bindings_that_do_not_name_the_newer_constants() -> None:
    """A GPU node image can carry older nvidia-ml-py than this agent was written against
    (seen on an H200 image: no NVML_GPU_RECOVERY_ACTION_BUS_RESET): the agent must start."""
    script = (
        "import pynvml\n"
        "for name in [n for n in dir(pynvml) if n.startswith('NVML_GPU_RECOVERY_ACTION_')]"
        " + ['NVML_FI_DEV_GET_GPU_RECOVERY_ACTION']:\n"
        "    delattr(pynvml, name)\n"
        "from baton.services.agent import nvml\n"
        "print(nvml.RECOVERY_ACTIONS[6], nvml.FIELDS['recovery_action'])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr[-1000:]
    assert done.stdout.split() == ["bus-reset", "(230,)"]


def test_row_remapper_histogram_counts_full_banks() -> None:
    histogram = N.c_nvmlRowRemapperHistogramValues(max=500, high=20, partial=3, low=1, none=2)
    assert nvml.decode_histogram(histogram) == 2


def test_processes_decode_from_the_library_struct() -> None:
    structs = [
        N.c_nvmlProcessInfo_v2_t(pid=4242, usedGpuMemory=3 * 1024**3),
        N.c_nvmlProcessInfo_v2_t(pid=7, usedGpuMemory=0),
    ]
    friendly = [N.nvmlStructToFriendlyObject(s) for s in structs]
    friendly[1].usedGpuMemory = None  # what the bindings set for NVML_VALUE_NOT_AVAILABLE
    assert nvml.decode_processes(friendly) == (
        GpuProcess(pid=4242, used_mib=3072),
        GpuProcess(pid=7, used_mib=0),
    )


def handle(address: int) -> Any:
    return ctypes.cast(ctypes.c_void_p(address), N.c_nvmlDevice_t)


def test_xid_event_names_the_gpu_by_its_handle() -> None:
    data = N.c_nvmlEventData_t()
    data.device = handle(0x5000)
    data.eventType = N.nvmlEventTypeXidCriticalError
    data.eventData = 79
    gpus = {0x4000: (0, "0000:18:00"), 0x5000: (1, "0000:3b:00")}
    seen = nvml.decode_event(data, gpus=gpus, seq=3, at=9.0)
    assert seen is not None
    assert (seen.xid, seen.gpu, seen.bus_id, seen.source, seen.seq, seen.at) == (
        79, 1, "0000:3b:00", "nvml", 3, 9.0
    )  # fmt: skip


def test_an_xid_on_a_mig_instance_is_its_gpus_and_names_the_instance() -> None:
    data = N.c_nvmlEventData_t()
    data.device = handle(0x5000)  # events are registered on the GPU, MIG or not
    data.eventType = N.nvmlEventTypeXidCriticalError
    data.eventData, data.gpuInstanceId = 48, 9
    seen = nvml.decode_event(data, gpus={0x5000: (1, "0000:3b:00")}, seq=1, at=0.0)
    assert seen is not None and (seen.gpu, seen.gpu_instance) == (1, 9)
    data.gpuInstanceId = nvml.NO_INSTANCE  # nvml.h: no instance named
    seen = nvml.decode_event(data, gpus={0x5000: (1, "0000:3b:00")}, seq=2, at=0.0)
    assert seen is not None and (seen.gpu, seen.gpu_instance) == (1, -1)


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "1g.10gb"),
        ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "3g.20gb"),
        ("NVIDIA H200 MIG 1g.18gb+me", "1g.18gb+me"),
        ("NVIDIA H100 80GB HBM3", ""),
    ],
)
def test_a_mig_instances_profile_is_read_from_its_name(name: str, profile: str) -> None:
    assert nvml.mig_profile(name) == profile


def test_other_event_types_are_not_xids() -> None:
    data = N.c_nvmlEventData_t()
    data.device = handle(0x4000)
    data.eventType = N.nvmlEventTypeSingleBitEccError
    assert nvml.decode_event(data, gpus={}, seq=1, at=0.0) is None


def _nvml_present() -> bool:
    try:
        N.nvmlInit()
    except N.NVMLError:
        return False
    N.nvmlShutdown()
    return True


@pytest.mark.skipif(_nvml_present(), reason="this machine has NVML; the GPU run covers it")
def test_without_the_library_the_backend_says_so_once_and_keeps_trying() -> None:
    backend = nvml.Nvml(expected=8)
    first = backend.poll(1.0)
    why = nvml.INIT_ERRORS[N.NVML_ERROR_LIBRARY_NOT_FOUND]
    assert first[0] == Backend(at=1.0, name="nvml", reason=why)
    assert "libnvidia-ml.so.1" in why
    assert first[1] == Gpus(at=1.0, expected=8, found=None)
    assert backend.poll(2.0) == [Gpus(at=2.0, expected=8, found=None)]  # said once
    assert backend.wait_xids(timeout_ms=10, at=lambda: 0.0) is None
