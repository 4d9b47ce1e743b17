"""dcgm-exporter's /metrics text, as it looks before and after the DCGM 4.6 field renames.

Label set and order follow dcgm-exporter's GPU template: ``gpu``, ``UUID``, ``pci_bus_id``,
``device``, ``modelName``, ``Hostname`` (``hostname`` since exporter #655, shown with the
4.6 names here), ``DCGM_FI_DRIVER_VERSION`` and the empty Kubernetes labels. DCGM's units:
°C, W, MHz, percent, MiB; PROF fields are 0-1 ratios.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

# field -> (name before DCGM 4.6, name since, prometheus type, help)
FIELDS = {
    "sm_clock": (
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_SM_CLOCK",
        "gauge",
        "SM clock frequency (in MHz).",
    ),
    "sm_clock_max": (
        "DCGM_FI_DEV_MAX_SM_CLOCK",
        "DCGM_FI_DEV_MAX_SM_CLOCK",
        "gauge",
        "Maximum supported SM clock for the device (in MHz).",
    ),
    "mem_temp": (
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS",
        "gauge",
        "Memory temperature (in C).",
    ),
    "temp": (
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_GPU_TEMP_CELSIUS",
        "gauge",
        "GPU temperature (in C).",
    ),
    "margin": (
        "DCGM_FI_DEV_GPU_TEMP_LIMIT",
        "DCGM_FI_DEV_GPU_TEMP_MARGIN_CELSIUS",
        "gauge",
        "Thermal margin (in C).",
    ),
    "power": (
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_BOARD_POWER_WATTS",
        "gauge",
        "Power draw (in W).",
    ),
    "limit": (
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
        "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS",
        "gauge",
        "Enforced power limit (in W).",
    ),
    "util": (
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_GPU_UTIL_RATIO",
        "gauge",
        "GPU utilization (in %).",
    ),
    "fb_used": (
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_USED",
        "gauge",
        "Framebuffer memory used (in MiB).",
    ),
    "fb_total": (
        "DCGM_FI_DEV_FB_TOTAL",
        "DCGM_FI_DEV_FB_TOTAL",
        "gauge",
        "Framebuffer memory total (in MiB).",
    ),
    "tensor": (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_TENSOR_UTIL_RATIO",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
    ),
    "sm_active": (
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_SM_UTIL_RATIO",
        "gauge",
        "The ratio of cycles an SM has at least 1 warp assigned.",
    ),
    "xid": (
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_XID_ERROR",
        "gauge",
        "Value of the last XID error encountered.",
    ),
    "clocks": (
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "gauge",
        "Current clock event reasons (bitmask).",
    ),
    "ecc_dbe": (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
    ),
    "remap_failed": (
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_ROW_REMAP_FAILED",
        "gauge",
        "Whether remapping of rows has failed",
    ),
}
NVLINK = {
    "crc_flit": "CRC_FLIT",
    "crc_data": "CRC_DATA",
    "replay": "REPLAY",
    "recovery": "RECOVERY",
}
BUS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


@dataclass
class DcgmGpu:
    index: int
    temp: int = 0
    power_w: float = 0.0
    util_percent: int = 87
    fb_used_mib: int = 0
    tensor: float = 0.42
    sm_active: float = 0.9
    xid: int = 0
    clock_mask: int = 0

    def __post_init__(self) -> None:
        self.temp = self.temp or 60 + self.index
        self.power_w = self.power_w or 500.5 + self.index
        self.fb_used_mib = self.fb_used_mib or 81920 + self.index

    @property
    def uuid(self) -> str:
        return f"GPU-7b1a{self.index:04x}-5c6d-4e7f-8091-a2b3c4d5e6f7"


def dcgm_text(gpus: list[DcgmGpu], *, new_names: bool, host: str | None, t0: float) -> str:
    """One scrape. GPU 0's NVLink 3 counts 2 replays per second since ``t0``."""
    replays = int(2 * (time.time() - t0))
    host_label = "hostname" if new_names else "Hostname"

    def labels(g: DcgmGpu, extra: str = "") -> str:
        parts = [
            f'gpu="{g.index}"',
            f'UUID="{g.uuid}"',
            f'pci_bus_id="00000000:{BUS[g.index % 8]}:00.0"',
            f'device="nvidia{g.index}"',
            'modelName="NVIDIA H200"',
        ]
        if host is not None:
            parts.append(f'{host_label}="{host}"')
        parts += ['DCGM_FI_DRIVER_VERSION="570.133.20"', 'container=""', 'namespace=""', 'pod=""']
        return "{" + ",".join(parts) + extra + "}"

    values = {
        "sm_clock": lambda g: 1980,
        "sm_clock_max": lambda g: 1980,
        "mem_temp": lambda g: g.temp + 5,
        "temp": lambda g: g.temp,
        "margin": lambda g: 89 - g.temp,
        "power": lambda g: g.power_w,
        "limit": lambda g: 700,
        "util": lambda g: g.util_percent,
        "fb_used": lambda g: g.fb_used_mib,
        "fb_total": lambda g: 143771,
        "tensor": lambda g: g.tensor,
        "sm_active": lambda g: g.sm_active,
        "xid": lambda g: g.xid,
        "clocks": lambda g: g.clock_mask,
        "ecc_dbe": lambda g: 0,
        "remap_failed": lambda g: 0,
    }
    out: list[str] = []
    for key, (old, new, typ, help_text) in FIELDS.items():
        name = new if new_names else old
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} {typ}"]
        out += [f"{name}{labels(g)} {values[key](g)}" for g in gpus]
    for counter, field in NVLINK.items():
        for link in range(18):
            name = (
                f"DCGM_FI_DEV_NVLINK_{field}_ERROR_L{link}_TOTAL"
                if new_names
                else f"DCGM_FI_DEV_NVLINK_{field}_ERROR_COUNT_L{link}"
            )
            out += [
                f"# HELP {name} NVLink {counter} errors, link {link}.",
                f"# TYPE {name} counter",
            ]
            for g in gpus:
                value = replays if (g.index, link, counter) == (0, 3, "replay") else 0
                out.append(f"{name}{labels(g)} {value}")
    xids = [g for g in gpus if g.xid]
    if xids:
        name = "DCGM_EXP_XID_ERRORS_COUNT"
        out += [
            f"# HELP {name} Count of XID Errors within user-specified time window.",
            f"# TYPE {name} gauge",
        ]
        for g in xids:
            extra = f',window_size_in_ms="300000",xid="{g.xid}"'
            out.append(f"{name}{labels(g, extra)} 1")
    return "\n".join(out) + "\n"
