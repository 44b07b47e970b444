"""A run's record, built from its event stream: the one place where figures are derived.

The headless printer, the TUI and the results store all read the same record, so a number
means the same thing everywhere. A run that fails or is cancelled keeps what it measured.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

from .runtime.detect import CpuInfo, RuntimeReport
from .runtime.peaks import device_peak
from .timing import sanity_flags, summarize
from .workloads.base import Event, Params

FINAL = {"finished": "finished", "failed": "failed", "cancelled": "cancelled"}
SCHEMA = 1


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class RunRecorder:
    def __init__(self, workload: str, params: Params, runtime: RuntimeReport) -> None:
        self.workload = workload
        self.params = dict(params)
        self.runtime = runtime
        self.id = uuid.uuid4().hex
        self.started_at = now_iso()
        self.ended_at: str | None = None
        self.status = "running"
        self.info: dict[str, Any] = {}
        self.compile_seconds: float | None = None
        self.steps: list[dict[str, Any]] = []
        self.epochs: list[dict[str, Any]] = []
        self.logs: list[str] = []
        self.error: str | None = None
        self.compile_steps = 0

    # --- feeding --------------------------------------------------------------------------
    def feed(self, event: Event) -> None:
        kind = event.get("event")
        if kind == "started":
            self.info = {k: v for k, v in event.items() if k not in ("event", "t")}
        elif kind == "compiled":
            self.compile_seconds = event["seconds"]
            self.compile_steps = event.get("steps", 1)
        elif kind == "step":
            self.steps.append({k: v for k, v in event.items() if k not in ("event", "t", "phase")})
        elif kind == "epoch":
            self.epochs.append({k: v for k, v in event.items() if k not in ("event", "t")})
        elif kind == "log" and event.get("text"):
            self.logs.append(event["text"])
        elif kind in FINAL:
            self.finish(FINAL[kind], event.get("error"))

    def finish(self, status: str, error: str | None = None) -> None:
        if self.status == "running":
            self.status = status
            self.error = error
            self.ended_at = now_iso()

    # --- derived figures ------------------------------------------------------------------
    def steady_seconds(self) -> list[float]:
        out: list[float] = []
        for s in self.steps:
            if not s.get("warmup"):
                out.extend([s["seconds"]] * s.get("steps", 1))
        return out

    def steps_done(self) -> int:
        return self.compile_steps + sum(s.get("steps", 1) for s in self.steps)

    def eta_seconds(self) -> float | None:
        total = self.info.get("steps_total")
        recent = [s["seconds"] for s in self.steps[-20:]]
        if not total or not recent:
            return None
        recent.sort()
        per_step = recent[len(recent) // 2]
        epochs_left = max(0, self.params.get("epochs", 0) - len(self.epochs))
        epoch_extra = 0.0
        if self.epochs and epochs_left:  # validation and epoch overhead, as seen so far
            seen = sum(e["seconds"] for e in self.epochs) - per_step * self.params.get("steps_per_epoch", 0) * len(self.epochs)
            epoch_extra = max(0.0, seen / len(self.epochs)) * epochs_left
        return max(0, total - self.steps_done()) * per_step + epoch_extra

    def summary(self) -> dict[str, Any]:
        stats = summarize(self.steady_seconds())
        flops = self.info.get("flops_per_step")
        device = self.info.get("device") or {}
        cpu: CpuInfo | None = self.runtime.cpu
        peak = device_peak(device.get("kind", ""), device.get("name", ""), self.info.get("dtype", "float32"),
                           device.get("replicas", 1), cpu) if device else None
        out: dict[str, Any] = {"compile_seconds": self.compile_seconds,
                               "step_seconds": stats.to_dict() if stats else None,
                               "flops_per_step": flops, "peak_flops": peak.flops if peak else None,
                               "peak_source": peak.source if peak else None}
        flops_per_s = flops / stats.median if stats and flops and stats.median > 0 else None
        out["gflops_per_s"] = flops_per_s / 1e9 if flops_per_s else None
        out["peak_fraction"] = flops_per_s / peak.flops if flops_per_s and peak else None
        batch = self.params.get("batch_size")
        out["examples_per_s"] = batch / stats.median if stats and batch and stats.median > 0 else None
        last = next((s["metrics"] for s in reversed(self.steps) if s.get("metrics")), None)
        out["final_metrics"] = last
        out["validation"] = {k: v for k, v in (self.epochs[-1]["metrics"] if self.epochs else {}).items()
                             if k.startswith("val_")} or None
        out["flags"] = [f.to_dict() for f in sanity_flags(out["peak_fraction"], stats)]
        if self.info.get("synthetic"):
            out["flags"].append({"code": "synthetic-data",
                                 "message": "trained on synthetic random data: accuracy is meaningless"})
        return out

    def record(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "id": self.id, "workload": self.workload, "params": self.params,
            "status": self.status, "started_at": self.started_at, "ended_at": self.ended_at,
            "device": self.info.get("device"), "dtype": self.info.get("dtype"),
            "per_replica_batch": self.info.get("per_replica_batch"),
            "dataset": self.info.get("dataset"), "synthetic": bool(self.info.get("synthetic")),
            "versions": self.info.get("versions"), "note": self.info.get("note"),
            "runtime": self.runtime.to_dict(), "summary": self.summary(),
            "steps": self.steps, "epochs": self.epochs, "error": self.error, "logs": self.logs[-50:],
        }
