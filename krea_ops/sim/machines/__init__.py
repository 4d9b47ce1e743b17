"""The simulated GPU cluster: actors that are ordinary clients of the simulated API server.

Like KWOK, nothing here reaches into the server's store: every actor reads and writes
through the official ``kubernetes`` client, so everything krea-ops later reads or does
goes through the real Kubernetes API. The actors share these conventions:

Nodes
  ``gpu-node-000`` ... ``gpu-node-NNN``; labels ``kubernetes.io/hostname``,
  ``nvidia.com/gpu.present=true``, ``nvidia.com/gpu.product=NVIDIA-H200``,
  ``nvidia.com/gpu.count``, ``krea.ai/pool=h200``, ``krea.ai/rack=rack-RR``,
  ``krea.ai/spine=spine-S``, ``topology.kubernetes.io/zone``; capacity
  ``nvidia.com/gpu``. The virtual-kubelet node is ``burst-vk`` with label
  ``type=virtual-kubelet`` and taint ``virtual-kubelet.io/provider=burst:NoSchedule``.
Node failure
  A failed node carries annotation ``sim.krea.ai/failed: <cause>``; its kubelet stops
  renewing its Lease, reports ``Ready=Unknown`` and fails its pods (reason
  ``NodeFailure``). Removing the annotation (repair) brings it back.
Workloads
  Pods carry ``krea.ai/workload: training | inference | system``. Namespaces:
  ``training``, ``inference``, ``kube-system`` (DaemonSets), ``krea-sim`` (faults),
  ``krea-ops`` (ConfigMap ``krea-ops-config``).
Faults
  A fault is a ConfigMap in ``krea-sim`` labelled ``sim.krea.ai/fault=true`` with data
  ``kind`` (hot-gpu | nvlink-errors | ib-flap | gpu-lost | crash), ``node``, ``gpu``,
  ``value``; the device actor applies it and annotates ``sim.krea.ai/applied``.
Checkpoints
  ``<state>/checkpoints/<namespace>/<training>/step-<N>/`` with shard files and a
  ``.metadata`` commit marker written last (PyTorch DCP layout).
"""
