"""Node exporters: GPU/NVLink over NVML and InfiniBand over sysfs.

Each collector is a prometheus_client custom collector (``collect()`` yields metric
families) built from a device backend or a sysfs root, so tests run it on fakes and
fixture trees. ``server`` assembles them with self-metrics and serves them over HTTP.
"""
