"""The house has no circles: the import graph of playground/, read from the source with ast (imports at the top of a
module and inside its functions alike), has no cycles, its arrows go one way (ui → course → jobs → store → engine →
settings), the engine loads the kernels as files and never imports them, and no module imports another module's
private names."""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGE = ROOT / "playground"
# Where each layer sits: a module imports only its own layer or those below it. The entry points (the command
# line, `python kernels/<name>.py`, `python -m playground`) sit above them all and nothing imports them.
LAYERS = {"settings": 0, "engine": 1, "store": 2, "jobs": 3, "course": 4, "ui": 5}
ENTRY_POINTS = {"playground.cli", "playground.standalone", "playground.__main__"}
# The kernel model's modules, in the one order their imports go (each imports only those before it).
KERNEL_ORDER = ["words", "params", "buffers", "contract", "declarations", "static", "inferred", "loader"]

@dataclass(frozen=True)
class Import:
    importer: str
    module: str                 # the module imported (for `from p import m` of a module m: p.m)
    names: tuple[str, ...]      # the names taken from it (empty for `import m` and for a module taken by name)
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    # (templates/ holds a user's kernel file: text the page offers, not a module of the package)
    return {module_name(p): p for p in PACKAGE.rglob("*.py") if "templates" not in p.parts}


def imports_of(name: str, path: Path, known: set[str]) -> list[Import]:
    """Every import statement in the file, wherever it stands, each resolved to the module it loads."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [Import(name, alias.name, (), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names = []
            for alias in node.names:
                if f"{base}.{alias.name}" in known:  # `from . import config_choice`: the module itself
                    found.append(Import(name, f"{base}.{alias.name}", (), node.lineno))
                else:
                    names.append(alias.name)
            if names:
                found.append(Import(name, base, tuple(names), node.lineno))
    return found


@functools.cache
def graph() -> tuple[dict[str, set[str]], list[Import]]:
    """{module: the playground modules it loads}, and every import. Loading a.b.c runs the packages a and a.b
    first: those count too, except the importer's own packages, which ran before it did."""
    known = modules()
    edges: dict[str, set[str]] = {m: set() for m in known}
    every = []
    for name, path in known.items():
        for imp in imports_of(name, path, set(known)):
            every.append(imp)
            parts = imp.module.split(".")
            for i in range(1, len(parts) + 1):
                target = ".".join(parts[:i])
                if target in known and target != name and not name.startswith(target + "."):
                    edges[name].add(target)
    return edges, every


def cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def described(component: set[str], edges: dict[str, set[str]]) -> str:
    return "; ".join(f"{m} → {', '.join(sorted(edges[m] & component))}" for m in sorted(component))


def private_imports(every: list[Import]) -> set[tuple[str, str, str]]:
    return {(imp.importer, imp.module, n) for imp in every if imp.module.split(".")[0] == "playground"
            for n in imp.names if n.startswith("_") and not n.startswith("__")}


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


# -- cycles -------------------------------------------------------------------------------------------------------
def test_the_graph_reads_every_module_and_its_imports_in_functions_too():
    edges, _ = graph()
    assert {"playground.engine.kernel.loader", "playground.engine.actions", "playground.jobs.worker",
            "playground.ui.gateway", "playground.cli"} <= set(edges)
    # jobs/worker.py imports the engine inside main(), after the sandbox is set up
    assert "playground.engine.actions" in edges["playground.jobs.worker"]
    # `from .. import config_choice` is the module config_choice, not a name of the engine package
    assert "playground.engine.config_choice" in edges["playground.engine.kernel.contract"]


def test_no_import_cycles():
    edges, _ = graph()
    found = cycles(edges)
    assert not found, " | ".join(described(c, edges) for c in found)


# -- layers -------------------------------------------------------------------------------------------------------
def test_imports_go_down_the_layers_only():
    edges, _ = graph()
    wrong = []
    for importer, targets in edges.items():
        for target in targets:
            if target in ENTRY_POINTS and importer not in ENTRY_POINTS:
                wrong.append(f"{importer} → {target} (an entry point)")
            elif layer(importer) and layer(target) and LAYERS[layer(target)] > LAYERS[layer(importer)]:
                wrong.append(f"{importer} → {target}")
    assert not wrong, "imports up the layers (ui → course → jobs → store → engine → settings): " \
                      + "; ".join(sorted(wrong))


def test_the_engine_never_imports_jobs_ui_store_or_the_command_line():
    edges, _ = graph()
    for importer, targets in edges.items():
        if layer(importer) == "engine":
            assert {layer(t) for t in targets} <= {"engine", "settings"}, f"{importer} imports {sorted(targets)}"
        if layer(importer) == "jobs":
            assert {layer(t) for t in targets} <= {"jobs", "store", "engine", "settings"}, \
                f"{importer} imports {sorted(targets)}"


def test_nothing_in_the_playground_imports_the_kernels_package():
    # The kernels are the tutorial's files, loaded by path (kernel/loader.py); their catalogue is read as data.
    _, every = graph()
    wrong = [f"{imp.importer}:{imp.line}" for imp in every if imp.module.split(".")[0] == "kernels"]
    assert not wrong, f"imports of the kernels package: {wrong}"


def test_the_kernel_model_imports_one_way():
    edges, _ = graph()
    prefix = "playground.engine.kernel."
    for i, name in enumerate(KERNEL_ORDER):
        inside = {t[len(prefix):] for t in edges[prefix + name] if t.startswith(prefix)}
        later = inside - set(KERNEL_ORDER[:i])
        assert not later, f"kernel/{name}.py imports {sorted(later)}, which come after it"
    assert set(KERNEL_ORDER) == {m[len(prefix):] for m in edges if m.startswith(prefix)}, \
        "a module of engine/kernel/ missing from KERNEL_ORDER"
    # config_choice reads a kernel through its methods: importing the kernel package would run its __init__,
    # whose contract imports config_choice
    assert not {t for t in edges["playground.engine.config_choice"] if t.startswith("playground.engine.kernel")}


def test_the_answers_and_errors_are_the_bottom_of_the_engine():
    # Every layer builds and reads answers with them (engine/answers.py): they import nothing else of the playground
    edges, _ = graph()
    assert edges["playground.engine.errors"] <= {"playground.engine"}
    assert edges["playground.engine.answers"] <= {"playground.engine", "playground.engine.errors"}


def test_the_job_layer_reaches_a_backend_only_through_the_protocol():
    # runner picks a backend (local or Ray) and calls it as backend.Backend; what both do around a job is backend.py's
    edges, _ = graph()
    for backend in ("playground.jobs.local_backend", "playground.jobs.ray_backend"):
        assert "playground.jobs.backend" in edges[backend]
        assert "playground.jobs.runner" not in edges[backend]


# -- private names ------------------------------------------------------------------------------------------------
def test_no_module_imports_another_modules_private_names():
    _, every = graph()
    found = private_imports(every)
    assert not found, f"private names imported: {sorted(found)}"
