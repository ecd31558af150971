"""The folder tree draws the architecture: each package of ``launcher`` imports only the layers
below it (lazy imports inside functions count too), there is no import cycle between modules, and
``worker`` never imports ``launcher``. See ARCHITECTURE.md."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

#: What each layer may import (besides itself, ``worker`` and the standard library).
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "netaddr": set(),
    "layout": set(),
    "spec": {"layout", "errors"},
    "plan": {"layout", "errors", "netaddr", "spec"},
    "ssh": {"layout", "errors", "netaddr"},
    "chief": {"layout", "errors", "plan"},
    "run": {"layout", "errors", "spec", "plan"},
    "preflight": {"layout", "errors", "spec", "plan"},
    "doctor": {"layout", "errors", "plan", "preflight"},
    "output": {"layout", "errors", "spec", "plan", "run"},
    "backends": {"layout", "errors", "netaddr", "spec", "plan", "ssh", "chief", "run",
                 "preflight"},
    "job": {"layout", "errors", "spec", "plan", "chief", "run", "backends", "output"},
    "drill": {"layout", "errors", "spec", "plan", "chief", "run", "backends", "output", "job"},
    "cli": {"layout", "errors", "netaddr", "spec", "plan", "ssh", "chief", "run", "backends",
            "preflight", "doctor", "output", "job", "drill"},
    "__main__": {"cli"},
    #: The documentation's generated reference (docs/hooks/reference.py): reads every layer.
    "reference": {"layout", "errors", "netaddr", "spec", "plan", "ssh", "chief", "run", "backends",
                  "preflight", "doctor", "output", "job", "drill", "cli"},
}


def modules(package: str) -> Iterator[tuple[str, Path]]:
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "launcher" and len(parts) > 1 else None


LAUNCHER = dict(modules("launcher"))


@pytest.mark.parametrize("module", sorted(m for m in LAUNCHER if layer(m)))
def test_each_module_imports_only_the_layers_below(module: str) -> None:
    own = layer(module)
    assert own in ALLOWED, f"{module}: a new layer? add it to ALLOWED and ARCHITECTURE.md"
    wrong = sorted(
        name for name in imports_of(LAUNCHER[module])
        if name in LAUNCHER and (other := layer(name)) is not None
        and other != own and other not in ALLOWED[own])
    assert not wrong, f"{module} ({own}) imports {wrong}"


def test_no_import_cycle_between_launcher_modules() -> None:
    graph = {m: {n for n in imports_of(p) if n in LAUNCHER and n != m and
                 LAUNCHER[n].name != "__init__.py"}
             for m, p in LAUNCHER.items()}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*trail[trail.index(nxt):], nxt] if nxt in trail else [node, nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


#: Engines whose code no module outside their own package may import (the local engine's
#: transport is every engine's for this machine, and the first launch's).
SEALED_ENGINES = ("slurm", "ssh")


@pytest.mark.parametrize("engine", SEALED_ENGINES)
def test_nothing_outside_an_engine_imports_its_code(engine: str) -> None:
    package = f"launcher.backends.{engine}"
    outside = sorted(
        module for module, path in LAUNCHER.items()
        if not (module == package or module.startswith(package + "."))
        and any(n == package or n.startswith(package + ".") for n in imports_of(path)))
    assert not outside, f"{outside} import {package}: go through launcher.backends instead"


def test_launcher_imports_only_the_wire_of_worker() -> None:
    wrong = sorted(
        f"{module}: {name}" for module, path in LAUNCHER.items() for name in imports_of(path)
        if name.split(".")[0] == "worker" and not name.startswith("worker.wire"))
    assert not wrong, "launcher may import only worker.wire (the protocol both sides share)"


def test_worker_never_imports_launcher() -> None:
    for module, path in modules("worker"):
        assert not [n for n in imports_of(path) if n.split(".")[0] == "launcher"], module


WORKER = dict(modules("worker"))
#: ``worker``'s parts (the rest of it is the training API, its top level), and what each of them
#: may import of ``worker`` besides itself: the wire is the bottom, the agent the top.
WORKER_PARTS: dict[str, set[str]] = {
    "wire": set(),
    "api": {"wire"},
    "runtime": {"wire", "api"},
    "agent": {"wire", "api", "runtime"},
    "doctor": {"wire", "agent"},  # tfcluster doctor's program, beside the agent (host memory)
    "examples": {"wire", "api"},
}


def worker_part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in WORKER_PARTS else "api"


@pytest.mark.parametrize("module", sorted(WORKER))
def test_each_part_of_worker_imports_only_the_parts_below(module: str) -> None:
    own = worker_part(module)
    wrong = sorted(name for name in imports_of(WORKER[module])
                   if name in WORKER and name != "worker"
                   and (other := worker_part(name)) != own and other not in WORKER_PARTS[own])
    assert not wrong, f"{module} ({own}) imports {wrong}"


def test_the_top_level_of_worker_is_the_training_api() -> None:
    top = sorted(p.stem for p in (ROOT / "worker").glob("*.py") if p.stem != "__init__")
    assert len(top) <= 12, f"worker/ has {len(top)} modules at its top level: {top}"


def test_no_worker_module_is_over_400_lines() -> None:
    long = {m: n for m, p in WORKER.items() if (n := len(p.read_text().splitlines())) > 400}
    assert not long


def test_the_ssh_layer_loads_without_pydantic_or_the_planner() -> None:
    code = ("import sys, launcher.ssh.known_hosts, launcher.ssh.connector; "
            "print(sorted(m for m in sys.modules if m.startswith(('pydantic', 'launcher.plan', "
            "'launcher.spec', 'launcher.backends'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True, timeout=60).stdout
    assert out.strip() == "[]"


def test_the_first_launch_loads_none_of_the_job_machinery() -> None:
    """``tfcluster run`` / ``local`` reserve and send the first launch before they import the job
    loop (launcher.cli.start, launcher.job.reservation, the local engine): what that imports
    must stay that small: no job loop, console, psutil or paramiko."""
    code = ("import sys, launcher.cli.start, launcher.job.reservation, launcher.backends.local; "
            "print(sorted(m for m in sys.modules if m.startswith(('launcher.job', "
            "'launcher.output.console', 'launcher.output.status', 'rich', 'psutil', "
            "'paramiko'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True, timeout=60).stdout
    assert out.strip() == str(sorted(["launcher.job", "launcher.job.reservation"]))


def test_no_launcher_module_is_over_400_lines() -> None:
    long = {m: n for m, p in LAUNCHER.items() if (n := len(p.read_text().splitlines())) > 400}
    assert not long
