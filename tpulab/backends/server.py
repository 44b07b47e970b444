"""Your server: no framework, the client of a server you started (serve's `--endpoint`: llama-server, vLLM, Ollama).

A run that only sends requests to a server tpulab did not start does no work on any of tpulab's frameworks, so its
record names none: its backend is this one, and its strategy the address (`your server at URL`). Its worker imports
no framework, only the HTTP client (aiohttp, `tpulab[serve]`). It is no framework either for what lists those: it
is never `auto`'s, never probed by `tpulab detect`, never a card's line (`Backend.framework`).
"""

from __future__ import annotations

import platform
from importlib import metadata

from tpulab.backends import Backend, DeviceError, Placement, Runtime
from tpulab.machine.detect import detect

NO_SHARDS = "your server decides how it runs the requests: tpulab only sends them"


class ServerBackend(Backend):
    name = "server"
    title = "your server"
    short = "your server"
    distributions = ("aiohttp",)  # the client: the one package its worker needs
    install = "pip install 'tpulab[serve]'  # aiohttp, the client that streams from your server"
    chosen_by_auto = False  # a workload chooses it, where you gave the address (--endpoint)
    framework = False
    multi_host = "the requests are sent from one process: run tpulab once per client machine"
    no_shards = NO_SHARDS
    no_flops = "your server does the work: no FLOPs are counted here"
    first_call = "first request"

    def runtime(self) -> Runtime:
        return ServerRuntime()


BACKEND = ServerBackend()


class ServerRuntime(Runtime):
    """The client's process: this machine's CPU sends, your server serves."""

    def versions(self) -> dict[str, str]:
        return {"aiohttp": metadata.version("aiohttp"), "python": platform.python_version()}

    def place(self, device: str, shards: int) -> Placement:
        if shards > 1:
            raise DeviceError(f"--shards {shards}: {NO_SHARDS}")
        return Placement(kind="cpu", name=detect().cpu.model, replicas=1, strategy="your server", devices=["cpu"])
