"""`serve`: how many users a server takes: requests at a stated rate or concurrency, streamed, against latency
bounds (`workload`); the load and its sizes (`load`), the client that drives a server (`client`), the figures
(`figures`, `quantiles`)."""

from tpulab.workloads.serve.workload import SERVE, Serve

__all__ = ["SERVE", "Serve"]
