"""The fake NVML backend behaves like pynvml on real hardware: same errors, same structs."""

from __future__ import annotations

import ctypes
import inspect
import re
import threading
import time

import pynvml
import pytest

from krea_ops.exporters.fakenvml import (
    FakeGpu,
    FakeNvml,
    fake_h200_node,
    implemented_functions,
)
from krea_ops.exporters.nvml import NVML_FUNCTIONS


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def nvml() -> FakeNvml:
    fake = fake_h200_node(count=8, seed=0)
    fake.nvmlInit()
    return fake


def _gpm(fake: FakeNvml, s1, s2, metric_ids: list[int]):  # type: ignore[no-untyped-def]
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(metric_ids)
    request.sample1 = s1
    request.sample2 = s2
    for i, metric_id in enumerate(metric_ids):
        request.metrics[i].metricId = metric_id
    fake.nvmlGpmMetricsGet(request)
    return [request.metrics[i] for i in range(len(metric_ids))]


# -- the interface ---------------------------------------------------------------------


def test_fake_implements_every_function_the_collector_uses_with_pynvml_signatures() -> None:
    implemented = set(implemented_functions())
    assert set(NVML_FUNCTIONS) <= implemented
    for name in [*NVML_FUNCTIONS, "nvmlInit"]:
        real = inspect.signature(getattr(pynvml, name))
        fake = inspect.signature(getattr(FakeNvml(), name))
        assert list(real.parameters) == list(fake.parameters), name


def test_constants_come_from_pynvml_and_unimplemented_functions_fail_loudly(nvml) -> None:  # type: ignore[no-untyped-def]
    assert nvml.NVML_TEMPERATURE_GPU == pynvml.NVML_TEMPERATURE_GPU
    assert nvml.NVMLError_GpuIsLost is pynvml.NVMLError_GpuIsLost
    assert nvml.c_nvmlGpmMetricsGet_t is pynvml.c_nvmlGpmMetricsGet_t
    with pytest.raises(AttributeError, match=r"does not implement pynvml\.nvmlDeviceGetSerial"):
        _ = nvml.nvmlDeviceGetSerial


# -- errors are pynvml's own -------------------------------------------------------------


def test_calls_before_init_and_after_shutdown_raise_uninitialized() -> None:
    fake = fake_h200_node(count=1)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    fake.nvmlInit()
    assert fake.nvmlDeviceGetCount() == 1
    fake.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlShutdown()


def test_lost_gpu_raises_gpu_is_lost_on_every_call_including_get_handle(nvml) -> None:  # type: ignore[no-untyped-def]
    handle = nvml.nvmlDeviceGetHandleByIndex(2)
    nvml.gpus[2].lost = True
    with pytest.raises(pynvml.NVMLError_GpuIsLost) as caught:
        nvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
    assert type(caught.value) is pynvml.NVMLError_GpuIsLost
    assert isinstance(caught.value, pynvml.NVMLError)
    assert caught.value.value == pynvml.NVML_ERROR_GPU_IS_LOST
    assert str(caught.value) == "GPU is lost"
    for call in (
        lambda: nvml.nvmlDeviceGetHandleByIndex(2),
        lambda: nvml.nvmlDeviceGetUUID(handle),
        lambda: nvml.nvmlDeviceGetPowerUsage(handle),
        lambda: nvml.nvmlDeviceGetNvLinkErrorCounter(handle, 0, 0),
    ):
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            call()
    # Other GPUs are unaffected.
    other = nvml.nvmlDeviceGetHandleByIndex(3)
    assert nvml.nvmlDeviceGetPowerUsage(other) > 0


def test_reset_required_not_supported_bad_handle_and_missing_function(nvml) -> None:  # type: ignore[no-untyped-def]
    h0, h1 = nvml.nvmlDeviceGetHandleByIndex(0), nvml.nvmlDeviceGetHandleByIndex(1)
    nvml.gpus[0].reset_required = True
    with pytest.raises(pynvml.NVMLError_ResetRequired):
        nvml.nvmlDeviceGetMemoryInfo(h0)
    assert nvml.nvmlDeviceGetHandleByIndex(0)  # still enumerated

    nvml.gpus[1].unsupported |= {
        "nvmlDeviceGetTotalEccErrors",
        ("nvmlDeviceGetNvLinkErrorCounter", 7, pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA),
    }
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetTotalEccErrors(
            h1, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC
        )
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetNvLinkErrorCounter(h1, 7, pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA)
    assert nvml.nvmlDeviceGetNvLinkErrorCounter(h1, 7, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT) == 0

    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetHandleByIndex(8)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetPowerUsage(pynvml.c_nvmlDevice_t())  # NULL handle
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # past the last of 18 links
        nvml.nvmlDeviceGetNvLinkState(h1, 18)

    nvml.missing_functions.add("nvmlDeviceGetTemperatureV")
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        nvml.nvmlDeviceGetTemperatureV(h1, pynvml.NVML_TEMPERATURE_GPU)
    assert nvml.nvmlDeviceGetTemperature(h1, pynvml.NVML_TEMPERATURE_GPU) > 0

    nvml.fail_next("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_UNKNOWN, gpu_index=1)
    with pytest.raises(pynvml.NVMLError_Unknown):
        nvml.nvmlDeviceGetPowerUsage(h1)
    assert nvml.nvmlDeviceGetPowerUsage(h1) > 0  # only the next call failed


# -- real structures and realistic values ---------------------------------------------------


def test_h200_node_returns_real_pynvml_structures_with_h200_values(nvml) -> None:  # type: ignore[no-untyped-def]
    assert nvml.nvmlDeviceGetCount() == 8
    assert re.fullmatch(r"\d+\.\d+\.\d+", nvml.nvmlSystemGetDriverVersion())
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(h, pynvml.c_nvmlDevice_t)
    assert nvml.nvmlDeviceGetName(h) == "NVIDIA H200"
    assert re.fullmatch(
        r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        nvml.nvmlDeviceGetUUID(h),
    )
    pci = nvml.nvmlDeviceGetPciInfo(h)
    assert isinstance(pci, pynvml.nvmlPciInfo_t)
    # pynvml's _PrintableStructure decodes char arrays on access (bytes underneath).
    assert pci.busId == "00000000:18:00.0"
    assert bytes(pci)[pynvml.nvmlPciInfo_t.busId.offset :].startswith(b"00000000:18:00.0\0")
    assert (pci.bus, pci.pciDeviceId) == (0x18, 0x233510DE)
    mem = nvml.nvmlDeviceGetMemoryInfo(h)
    assert isinstance(mem, pynvml.c_nvmlMemory_t)
    assert mem.total == 150_754_820_096 and mem.used + mem.free == mem.total
    util = nvml.nvmlDeviceGetUtilizationRates(h)
    assert isinstance(util, pynvml.c_nvmlUtilization_t) and util.gpu == 100
    assert nvml.nvmlDeviceGetEnforcedPowerLimit(h) == 700_000  # milliwatts
    assert 400_000 < nvml.nvmlDeviceGetPowerUsage(h) < 700_000
    slowdown = nvml.nvmlDeviceGetTemperatureThreshold(h, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
    shutdown = nvml.nvmlDeviceGetTemperatureThreshold(h, pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)
    temp = nvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU)
    assert temp < slowdown < shutdown
    assert nvml.nvmlDeviceGetMarginTemperature(h) == slowdown - temp
    assert nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) <= 1980
    links = [nvml.nvmlDeviceGetNvLinkState(h, link) for link in range(18)]
    assert links == [pynvml.NVML_FEATURE_ENABLED] * 18
    support = nvml.nvmlGpmQueryDeviceSupport(h)
    assert isinstance(support, pynvml.c_nvmlGpmSupport_t) and support.isSupportedDevice == 1


def test_field_values_are_a_real_array_with_per_field_return_codes(nvml) -> None:  # type: ignore[no-untyped-def]
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.gpus[0].memory_temperature_c = 71
    values = nvml.nvmlDeviceGetFieldValues(
        h, [pynvml.NVML_FI_DEV_MEMORY_TEMP, pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL]
    )
    assert isinstance(values[0], pynvml.c_nvmlFieldValue_t)
    assert values[0].nvmlReturn == pynvml.NVML_SUCCESS
    assert values[0].valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    assert values[0].value.uiVal == 71
    # Hopper answers the legacy all-links NVLink totals with success and zero.
    nvml.gpus[0].nvlinks[3].crc_flit = 9
    assert values[1].nvmlReturn == pynvml.NVML_SUCCESS and values[1].value.ullVal == 0

    nvml.gpus[0].memory_temperature_c = None  # no HBM sensor
    (value,) = nvml.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_MEMORY_TEMP])
    assert value.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED


def test_same_seed_same_node_other_seed_other_node() -> None:
    def identity(fake: FakeNvml) -> list[tuple[str, str, float]]:
        return [(g.uuid, g.pci_bus_id, g.power_w) for g in fake.gpus]

    assert identity(fake_h200_node(seed=3)) == identity(fake_h200_node(seed=3))
    assert identity(fake_h200_node(seed=3)) != identity(fake_h200_node(seed=4))
    buses = [g.pci_bus_id for g in fake_h200_node(count=8).gpus]
    assert len(set(buses)) == 8 and all(
        re.fullmatch(r"00000000:[0-9A-F]{2}:00\.0", b) for b in buses
    )


# -- GPM -------------------------------------------------------------------------------------


def test_gpm_metrics_are_the_average_rate_between_two_samples() -> None:
    clock = ManualClock()
    fake = FakeNvml([FakeGpu(tensor_active=0.5, hmma_active=0.4, sm_active=0.9)], clock=clock)
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    s1, s2, s3 = (fake.nvmlGpmSampleAlloc() for _ in range(3))
    assert isinstance(s1, pynvml.c_nvmlGpmSample_t)
    ids = [
        pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
        pynvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL,
        pynvml.NVML_GPM_METRIC_SM_UTIL,
        pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,  # not simulated
    ]
    fake.nvmlGpmSampleGet(h, s1)
    clock.advance(10)
    fake.nvmlGpmSampleGet(h, s2)
    metrics = _gpm(fake, s1, s2, ids)
    assert [m.nvmlReturn for m in metrics[:3]] == [pynvml.NVML_SUCCESS] * 3
    assert [m.value for m in metrics[:3]] == pytest.approx([50.0, 40.0, 90.0])
    assert metrics[3].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED

    # A new rate shows only in a sample pair taken after the change.
    fake.gpus[0].tensor_active = 0.1
    assert _gpm(fake, s1, s2, ids[:1])[0].value == pytest.approx(50.0)
    clock.advance(10)
    fake.nvmlGpmSampleGet(h, s3)
    assert _gpm(fake, s2, s3, ids[:1])[0].value == pytest.approx(10.0)
    assert _gpm(fake, s1, s3, ids[:1])[0].value == pytest.approx(30.0)  # 10 s at 50 %, 10 at 10 %

    for s in (s1, s2, s3):
        fake.nvmlGpmSampleFree(s)
    assert fake.live_gpm_samples == 0
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlGpmSampleFree(s1)


def test_gpm_advances_with_real_monotonic_time() -> None:
    fake = FakeNvml([FakeGpu(tensor_active=0.25)])
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    s1, s2 = fake.nvmlGpmSampleAlloc(), fake.nvmlGpmSampleAlloc()
    fake.nvmlGpmSampleGet(h, s1)
    time.sleep(0.02)
    fake.nvmlGpmSampleGet(h, s2)
    (metric,) = _gpm(fake, s1, s2, [pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL])
    assert metric.value == pytest.approx(25.0)


def test_gpm_unsupported_gpu_and_bad_requests() -> None:
    fake = FakeNvml([FakeGpu(gpm_supported=False), FakeGpu(index=1)])
    fake.nvmlInit()
    old, new = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(1)
    assert fake.nvmlGpmQueryDeviceSupport(old).isSupportedDevice == 0
    sample = fake.nvmlGpmSampleAlloc()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlGpmSampleGet(old, sample)
    fake.nvmlGpmSampleGet(new, sample)
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = 99
    request.sample1 = request.sample2 = sample
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        fake.nvmlGpmMetricsGet(request)
    unfilled = fake.nvmlGpmSampleAlloc()
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        _gpm(fake, unfilled, sample, [pynvml.NVML_GPM_METRIC_SM_UTIL])


def test_energy_counter_integrates_power() -> None:
    clock = ManualClock()
    fake = FakeNvml([FakeGpu(power_w=500.0, energy_start_mj=1_000, clock=clock)])
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    clock.advance(2)
    fake.gpus[0].power_w = 100.0
    clock.advance(1)
    assert fake.nvmlDeviceGetTotalEnergyConsumption(h) == 1_000 + 1_000_000 + 100_000


def test_fake_gpu_rejects_impossible_rates_and_unknown_fields() -> None:
    gpu = FakeGpu()
    with pytest.raises(ValueError):
        gpu.tensor_active = 1.5
    with pytest.raises(AttributeError):
        gpu.update(tensor_activ=0.5)
    gpu.update(util_percent=100, tensor_active=0.05)
    assert (gpu.util_percent, gpu.tensor_active) == (100, 0.05)


# -- events ----------------------------------------------------------------------------------


def test_event_wait_times_out_with_nvml_timeout(nvml) -> None:  # type: ignore[no-untyped-def]
    es = nvml.nvmlEventSetCreate()
    assert isinstance(es, pynvml.c_nvmlEventSet_t)
    nvml.nvmlDeviceRegisterEvents(
        nvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlEventTypeXidCriticalError, es
    )
    with pytest.raises(pynvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait(es, 20)
    nvml.nvmlEventSetFree(es)
    assert nvml.live_event_sets == 0


def test_injected_xid_arrives_as_real_event_data_and_wakes_a_waiter(nvml) -> None:  # type: ignore[no-untyped-def]
    es = nvml.nvmlEventSetCreate()
    h3 = nvml.nvmlDeviceGetHandleByIndex(3)
    nvml.nvmlDeviceRegisterEvents(h3, pynvml.nvmlEventTypeXidCriticalError, es)
    assert nvml.inject_xid(5, 48) == 0  # GPU 5 not registered: nobody hears it

    got = []
    waiter = threading.Thread(target=lambda: got.append(nvml.nvmlEventSetWait(es, 10_000)))
    waiter.start()
    assert nvml.inject_xid(3, 79) == 1
    waiter.join(timeout=5)
    assert not waiter.is_alive()
    (data,) = got
    assert isinstance(data, pynvml.c_nvmlEventData_t)
    assert data.eventType == pynvml.nvmlEventTypeXidCriticalError
    assert data.eventData == 79
    address = ctypes.cast(data.device, ctypes.c_void_p).value
    assert address == ctypes.cast(h3, ctypes.c_void_p).value
    assert nvml.nvmlDeviceGetUUID(data.device) == nvml.gpus[3].uuid
    assert data.gpuInstanceId == 0xFFFFFFFF  # not a MIG event

    nvml.inject_xid(3, 79)
    nvml.inject_xid(3, 94)
    assert [nvml.nvmlEventSetWait(es, 0).eventData for _ in range(2)] == [79, 94]
    nvml.nvmlEventSetFree(es)


def test_registering_an_unsupported_event_type_is_not_supported(nvml) -> None:  # type: ignore[no-untyped-def]
    es = nvml.nvmlEventSetCreate()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceRegisterEvents(
            nvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlEventTypeGpuRecoveryAction, es
        )
    nvml.gpus[1].unsupported.add("nvmlDeviceRegisterEvents")
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceRegisterEvents(
            nvml.nvmlDeviceGetHandleByIndex(1), pynvml.nvmlEventTypeXidCriticalError, es
        )
    nvml.nvmlEventSetFree(es)
