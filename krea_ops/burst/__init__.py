"""Bursting inference to external GPU providers through virtual-kubelet nodes.

The names below are the conventions krea-ops reads and writes on virtual nodes and the
pods placed on them (the simulator's virtual kubelet follows them too):

- node taint ``virtual-kubelet.io/provider=<provider>:NoSchedule`` (virtual-kubelet's
  default taint; its value names the provider);
- node taint ``krea.ai/burst-paused=true:NoSchedule``: the operator's pause switch,
  no new placements; running offsite pods keep running. ``burst pause`` sets it with
  annotations ``krea.ai/burst-paused-by|-reason|-at`` (who, why, since); a pause taint
  set by hand may carry the reason as its value instead;
- node taint ``krea.ai/burst-disabled=true:NoSchedule``: the burst-taint controller's,
  set while healthy in-cluster GPUs are free (nothing new goes offsite), removed when
  trainings take them; while it holds, the migrate-back controller brings offsite
  inference home. Separate from the pause so that neither undoes the other;
- node annotation ``burst.krea.ai/usage``: JSON with per-provider ``gpusInUse``,
  ``pods``, ``gpuHours``, ``costUsd``, ``usdPerGpuHour``, ``capacityGpus`` and an
  ``updatedAt`` timestamp, kept by the virtual kubelet (it also counts pods that left);
- pod annotations ``burst.krea.ai/provider``, ``burst.krea.ai/usd-per-gpu-hour``,
  ``burst.krea.ai/placed-at`` (RFC 3339) and, for pods a provider lost,
  ``burst.krea.ai/failed-at``.

``krea_ops.burst.status`` reads where inference has burst to.
"""

from __future__ import annotations

VK_TAINT_KEY = "virtual-kubelet.io/provider"
PAUSE_TAINT_KEY = "krea.ai/burst-paused"
PAUSE_TAINT_VALUE = "true"
PAUSE_TAINT_EFFECT = "NoSchedule"
PAUSED_BY = "krea.ai/burst-paused-by"
PAUSED_REASON = "krea.ai/burst-paused-reason"
PAUSED_AT = "krea.ai/burst-paused-at"
PAUSE_ANNOTATIONS = (PAUSED_BY, PAUSED_REASON, PAUSED_AT)
DISABLED_TAINT_KEY = "krea.ai/burst-disabled"
DISABLED_TAINT_VALUE = "true"
DISABLED_TAINT_EFFECT = "NoSchedule"
OUR_TAINT_PREFIX = "krea.ai/"
ANN_USAGE = "burst.krea.ai/usage"
ANN_PROVIDER = "burst.krea.ai/provider"
ANN_PRICE = "burst.krea.ai/usd-per-gpu-hour"
ANN_PLACED_AT = "burst.krea.ai/placed-at"
ANN_FAILED_AT = "burst.krea.ai/failed-at"
INFERENCE_SELECTOR = "krea.ai/workload=inference"

# How virtual nodes are found: one label-selected list each (no full node list). Every
# virtual-kubelet provider built on the upstream node controller sets ``type``; interLink
# sets its own label and ``kubernetes.io/os``; Liqo marks its virtual nodes with
# ``liqo.io/type``. ``kubernetes.io/role=agent`` is left out on purpose: AKS sets it on
# every ordinary node too.
VIRTUAL_NODE_SELECTORS: tuple[str, ...] = (
    "type=virtual-kubelet",
    "virtual-node.interlink/type=virtual-kubelet",
    "kubernetes.io/os=virtual-kubelet",
    "liqo.io/type=virtual-node",
)
