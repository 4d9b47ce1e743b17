"""How one simulated H200 behaves under load: activity, power, clocks and temperature.

Load
  A GPU runs nothing (idle), a training rank, or an inference server. Training is
  ``util`` ~100 % with tensor-pipe activity 0.5-0.7, except in *input-bound* phases,
  when the GPU still reads ~100 % busy (NCCL kernels spin waiting for the slowest rank's
  data loader) but its tensor activity falls to INPUT_BOUND_PACE (a tenth) of its normal
  value (~0.05-0.07: the gang's steps run at that pace, see devices.py) and power to
  ~40 %. Inference is moderate and bursty; idle is ~75 W at 345 MHz with the
  ``gpu_idle`` clock event.

Gang pace
  A training rank computes only as fast as its gang: ``Load.pace`` is the gang's step
  pace (1 normal, 1/F behind a straggler, 0 in a hung collective). A rank computes for
  ``min(1, pace * F_own)`` of the time (F_own: its own slowdown, 1 but on the straggler)
  and spends the rest inside an NCCL collective waiting for the slowest rank: the NCCL
  kernel keeps the GPU ~100 % busy (NVML's utilization counts any kernel resident) on
  a few SMs (SM activity ~0.08, occupancy ~0.03), with no tensor-pipe work and
  ~NCCL_SPIN_W (80 W) over idle, at full clocks with no clock-event reason. So a rank
  of a hung gang reads busy, tensor 0, SM ~0.08 and idle + ~80 W; the ranks waiting for a
  straggler with slowdown F read tensor activity ~1/F of normal.

Straggler
  A *straggler* fault (``straggle_factor`` F, 1 < F <= 4) runs the GPU at 1/F of its SM
  clock whenever it is busy, with the clock-event reasons the fault names
  (``nvmlClocksEventReasonHwPowerBrakeSlowdown`` 0x80 with ``HwSlowdown`` 0x08 for an
  external power brake, ``HwSlowdown`` alone otherwise; NVML's nvml.h). It never waits
  (it is the rank the others wait for), so it keeps its compute-phase tensor activity;
  its compute power falls with the clock squared (dynamic power ~ f * V^2, the voltage
  tracking the clock), so it runs cooler, not hot. Idle, it reads idle clocks.

Thermal model
  First order: ``T_ss = T_inlet + R * P / q`` with R = 0.058 °C/W (an HGX H200 at 650 W
  and 27 °C inlet settles near 65 °C), per-GPU cooling quality ``q`` (~1.0; a few GPUs
  run hot at ~0.85), and ``T`` approaching ``T_ss`` with time constant TAU_S (exact
  exponential step, so any tick length is stable).

  * A *creeping* GPU (slow burner) loses cooling quality linearly over hours (dust,
    a failing fan) and ends past 78 °C under training load.
  * A *hot-gpu* fault (fan failure) holds the GPU at its target temperature (default
    84 °C), idle or under load: the die gets there within a simulated minute (time
    constant HOT_TAU_S: without airflow it heats in seconds, not at the heatsink's pace)
    and the sensor then reads the target for as long as the fault lasts. The slowdown a
    target past 87 °C causes cuts clocks and power, not the temperature the failed
    cooling holds.

Slowdown
  At the max operating temperature (87 °C) the GPU starts software thermal slowdown
  (``sw_thermal``: clocks and power drop up to 40 %); at the slowdown threshold (89 °C)
  hardware slowdown (``hw_thermal`` + ``hw_slowdown``: clocks halve). Demand above the
  700 W limit is capped (``sw_power_cap``) with proportionally lower clocks. Less power
  means a lower steady state, so a hot GPU settles around the threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["GpuModel", "Load"]

R_C_PER_W = 0.058
TAU_S = 40.0
HOT_TAU_S = 10.0
IDLE_CLOCK_MHZ = 345
MAX_CLOCK_MHZ = 1980
MEM_CLOCK_MHZ = 3201
GIB = 1024**3

# nvmlClocksEventReason* bits (nvml.h)
GPU_IDLE = 0x1
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80

# The gang's step pace in an input-bound phase: the ranks' tensor activity (~0.05 of a
# normal 0.5-0.7) says they compute about a tenth of the time.
INPUT_BOUND_PACE = 0.1
# A rank waiting inside an NCCL collective: its kernel spins on a few SMs.
NCCL_SPIN_SM = 0.08
NCCL_SPIN_OCCUPANCY = 0.03
NCCL_SPIN_W = 80.0


@dataclass(frozen=True)
class Load:
    """What runs on a GPU this tick.

    ``kind``: idle | training | inference; ``input_bound`` for training phases starved of
    data; ``pace`` the training gang's step pace (1 normal, 1/F behind a straggler, 0
    hung); ``intensity`` a per-job factor around 1.0; ``tensor`` the job's tensor-pipe
    activity in compute phases; ``busy`` for inference, the fraction of time serving.
    """

    kind: str = "idle"
    input_bound: bool = False
    pace: float = 1.0
    intensity: float = 1.0
    tensor: float = 0.6
    busy: float = 0.5
    memory_gib: float = 0.0


IDLE = Load()


class GpuModel:
    """The simulated physics of one GPU. ``step`` returns the FakeGpu fields to set."""

    __slots__ = (
        "creep_end_q",
        "creep_s",
        "creep_start",
        "gpu_max_c",
        "hot_target_c",
        "idle_w",
        "inlet_c",
        "limit_w",
        "power_w",
        "q",
        "slowdown_c",
        "straggle_factor",
        "straggle_reasons",
        "temp_c",
        "throttle",
    )

    def __init__(self, inlet_c: float, q: float, idle_w: float, temp_c: float) -> None:
        self.inlet_c = inlet_c
        self.q = q
        self.idle_w = idle_w
        self.temp_c = temp_c
        self.power_w = idle_w
        self.limit_w = 700.0
        self.gpu_max_c = 87.0
        self.slowdown_c = 89.0
        self.hot_target_c: float | None = None
        self.creep_start: float | None = None
        self.creep_s = 0.0
        self.creep_end_q = q
        self.throttle = 1.0
        self.straggle_factor = 1.0  # a straggler fault: SM clock at 1/F when busy
        self.straggle_reasons = 0

    def cooling(self, now: float) -> float:
        """Cooling quality at sim time ``now`` (creeping GPUs lose it over time)."""
        if self.creep_start is None:
            return self.q
        frac = min(max((now - self.creep_start) / max(self.creep_s, 1.0), 0.0), 1.0)
        return self.q + (self.creep_end_q - self.q) * frac

    def steady_state(self, power_w: float, now: float) -> float:
        if self.hot_target_c is not None:  # a failed fan: the target, whatever the power
            return self.hot_target_c
        return self.inlet_c + R_C_PER_W * power_w / self.cooling(now)

    def thermal_factor(self) -> tuple[float, int]:
        """Clock factor and clock-event bits from the current temperature."""
        t = self.temp_c
        if t >= self.slowdown_c:
            return 0.5, SW_THERMAL | HW_THERMAL | HW_SLOWDOWN
        if t >= self.gpu_max_c:
            return max(0.6, 1.0 - 0.2 * (t - self.gpu_max_c + 1.0)), SW_THERMAL
        return 1.0, 0

    def step(self, load: Load, dt: float, now: float, noise: float) -> dict[str, float | int]:
        """Advance ``dt`` simulated seconds under ``load``; ``noise`` is uniform in [-1, 1]."""
        f_th, reasons = self.thermal_factor()
        idle = self.idle_w
        slow = max(self.straggle_factor, 1.0)
        if load.kind == "training":
            if load.input_bound:
                util, tensor, sm, occ = 100.0, load.tensor * INPUT_BOUND_PACE, 0.22, 0.10
                demand, mem_util = idle + 200.0 * load.intensity, 8.0
            else:
                # computing for `share` of the time, waiting in NCCL for the rest
                share = min(max(load.pace, 0.0) * slow, 1.0)
                wait = 1.0 - share
                util = 100.0
                tensor = load.tensor * share
                sm = 0.92 * share + NCCL_SPIN_SM * wait
                occ = 0.42 * share + NCCL_SPIN_OCCUPANCY * wait
                compute_w = (load.tensor * 700.0 + 170.0) / slow**2
                demand = idle + (compute_w * share + NCCL_SPIN_W * wait) * load.intensity
                mem_util = (40.0 + 20.0 * load.tensor) * share + 1.0 * wait
        elif load.kind == "inference":
            busy = min(max(load.busy + 0.08 * noise, 0.05), 1.0)
            util, tensor, sm, occ = 100.0 * busy, 0.35 * busy, 0.75 * busy, 0.30 * busy
            demand, mem_util = idle + 420.0 * busy * load.intensity, 55.0 * busy
        else:
            util, tensor, sm, occ, demand, mem_util = 0.0, 0.0, 0.0, 0.0, idle, 0.0
        busy_gpu = load.kind != "idle"
        demand *= 1.0 + 0.015 * noise
        # Thermal slowdown scales the dynamic part of the power and the clocks.
        power = idle + (demand - idle) * f_th
        f_pow = 1.0
        if power > self.limit_w:
            f_pow = self.limit_w / power
            power = self.limit_w * (0.995 + 0.004 * noise)
            reasons |= SW_POWER_CAP
        if busy_gpu:
            clock = MAX_CLOCK_MHZ * f_th * (f_pow**0.5) / slow
            # Activity a slowed GPU does per second falls with its clock.
            tensor *= f_th
            sm = min(sm, 1.0)
        else:
            clock = IDLE_CLOCK_MHZ
            reasons |= GPU_IDLE
        self.power_w = power
        # First-order thermal step toward the steady state at this power.
        t_ss = self.steady_state(power, now)
        tau = TAU_S if self.hot_target_c is None else HOT_TAU_S
        self.temp_c = t_ss + (self.temp_c - t_ss) * math.exp(-max(dt, 0.0) / tau)
        temp = round(self.temp_c)
        # Clocks and reasons as the GPU reports them now, at its new temperature.
        f_new, thermal_bits = self.thermal_factor()
        reasons = (reasons & ~(SW_THERMAL | HW_THERMAL | HW_SLOWDOWN)) | thermal_bits
        if busy_gpu and slow > 1.0:
            reasons |= self.straggle_reasons
        if busy_gpu:
            clock *= f_new / f_th
        self.throttle = f_new
        return {
            "util_percent": round(min(max(util, 0.0), 100.0), 1),
            "mem_util_percent": round(min(max(mem_util, 0.0), 100.0), 1),
            "tensor_active": round(min(max(tensor, 0.0), 1.0), 4),
            "hmma_active": round(min(max(tensor * 0.97, 0.0), 1.0), 4),
            "sm_active": round(min(max(sm, 0.0), 1.0), 4),
            "sm_occupancy": round(min(max(occ, 0.0), 1.0), 4),
            "power_w": round(power, 1),
            "sm_clock_mhz": int(clock // 15 * 15),
            "temperature_c": temp,
            "memory_temperature_c": temp + 3 + round(mem_util / 15.0),
            "clock_event_reasons": reasons,
            "memory_used_bytes": int(load.memory_gib * GIB),
        }
