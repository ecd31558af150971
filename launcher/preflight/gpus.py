"""Pre-flight's GPU check: what ``nvidia-smi`` lists on each host, against what the plan gives
its tasks (``resources.gpus_per_task``: :attr:`HostPlan.gpus_needed`).

:data:`GPU_PROBE` is a fragment of the host probe (it fills ``out["gpus"]`` with one
``{"index", "name", "memory"}`` per GPU, or ``out["gpu_error"]``; no ``nvidia-smi`` on PATH means
no GPU). :func:`check_gpus` reads it: the ``GPUS`` cell shows the count and model, and a host with
fewer GPUs than its tasks need fails with one line naming host, needed and found.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # not at run time: the early probe imports GPU_PROBE before the rest
    from launcher.plan.planner import HostPlan
    from launcher.preflight.report import HostReport

#: Runs inside the probe (any Python 3), after ``out`` exists and before it is printed.
GPU_PROBE = r"""
try:
    # nvidia-smi looked for on PATH by hand: shutil and subprocess cost the probe 7 ms to import
    smi = None
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(folder or ".", "nvidia-smi")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            smi = candidate
            break
    if smi:
        import subprocess
        done = subprocess.run([smi, "--query-gpu=index,name,memory.total",
                               "--format=csv,noheader"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=10)
        if done.returncode == 0:
            gpus = []
            for line in done.stdout.decode("utf-8", "replace").splitlines():
                cells = [c.strip() for c in line.split(",")]
                if len(cells) >= 2 and cells[0]:
                    gpus.append({"index": cells[0], "name": cells[1],
                                 "memory": cells[2] if len(cells) > 2 else ""})
            out["gpus"] = gpus
        else:
            err = done.stderr.decode("utf-8", "replace").strip().splitlines()
            out["gpu_error"] = "nvidia-smi exited %d: %s" % (done.returncode,
                                                             err[-1] if err else "")
    else:
        out["gpus"] = []
except BaseException as exc:
    out["gpu_error"] = "%s: %s" % (type(exc).__name__, exc)
"""


def check_gpus(report: HostReport, host: HostPlan, found: dict[str, Any]) -> None:
    """Fill ``report``'s GPU cell from the probe's ``found``; fail if the host has too few."""
    needed = host.gpus_needed
    error = found.get("gpu_error")
    gpus = found.get("gpus")
    if error is not None or not isinstance(gpus, list):
        report.gpus = "UNKNOWN"
        why = str(error or "the probe did not report GPUs")
        if needed:
            report.fail(f"GPUs: host {host.name} needs {needed}, found none that nvidia-smi "
                        f"could list ({why})")
        elif error is not None:
            report.warnings.append(f"could not list GPUs: {why}")
        return
    names = sorted({str(g.get("name", "?")) for g in gpus if isinstance(g, dict)})
    report.gpus = f"{len(gpus)}" + (f" ({', '.join(names)})" if names else "") \
        + (f", needs {needed}" if needed else "")
    if needed > len(gpus):
        report.gpus = f"TOO FEW: {len(gpus)} of {needed}"
        report.fail(f"GPUs: host {host.name} needs {needed} "
                    f"({len(host.tasks)} task(s) x resources.gpus_per_task), found "
                    f"{len(gpus)}" + ("" if gpus else " (no nvidia-smi)"))
