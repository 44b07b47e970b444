"""Why an accelerator that is present is not used, in one sentence, and the command that fixes it.

The machine's own findings live here (no driver, no accelerator, nothing to run a TPU with);
each backend adds its own (`Backend.verdicts`), naming itself, and every fix command names
versions that are published.
"""

from __future__ import annotations

from tpulab.backends import install_one, registry
from tpulab.machine.detect import RuntimeReport
from tpulab.machine.verdict import Verdict

__all__ = ["Verdict", "diagnose"]


def diagnose(report: RuntimeReport) -> list[Verdict]:
    backends = list(registry().values())
    out: list[Verdict] = []
    # A backend that drives the TPU speaks first: the others' verdicts say it runs there instead.
    for b in sorted(backends, key=lambda b: b.fitness(report, "tpu").preference):
        out += b.verdicts(report, [o for o in backends if o is not b])
    general = [b for b in backends if b.chosen_by_auto]  # those that run every workload: one of them is needed
    if report.tpu is not None and not any(b.installed(report.packages) for b in general):
        wants = max(general, key=lambda b: bool(b.tpu_install))
        names = " nor ".join(b.title for b in sorted(general, key=lambda b: not b.tpu_install))
        out.append(Verdict("error", "tpu", f"TPU {report.tpu.generation or 'unknown generation'} found, but "
                           f"neither {names} is installed: install {wants.title} (what TPUs run today).",
                           wants.tpu_install, wants.name))
    if report.tpu is None and not any(b.installed(report.packages) for b in general):
        device = report.default_device
        ranked = sorted(general, key=lambda b: -b.fitness(report, device).preference)
        first, alternatives = install_one(ranked)
        out.append(Verdict("error", device, f"neither {' nor '.join(b.title for b in ranked)} is installed: tpulab "
                           f"runs nothing here until one is{alternatives}.", first))
    if report.gpu_hardware and not report.gpus:
        out.append(Verdict("error", "gpu", f"{report.gpu_hardware} NVIDIA GPU(s) on the PCI bus, but no NVIDIA "
                           "driver is loaded.", "sudo apt-get install -y nvidia-driver  # then reboot; check with "
                           "nvidia-smi"))
    if not report.tpu and not report.gpu_hardware:
        fix = "Colab: Runtime > Change runtime type > a GPU or TPU" if report.colab else None
        out.append(Verdict("info", "cpu", "No GPU or TPU found: runs will use the CPU, as the article's first "
                           "'TPU' timing unknowingly did.", fix))
    return out
