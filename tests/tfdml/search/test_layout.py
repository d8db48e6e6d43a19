"""The modules of tfdml.search: each one job, none over 400 lines, no import circle."""

import ast
import os

import tfdml.search

PACKAGE = os.path.dirname(tfdml.search.__file__)


def _modules():
    return sorted(f[:-3] for f in os.listdir(PACKAGE) if f.endswith(".py"))


def _imports(name):
    """The sibling modules ``name`` imports (at the top or inside functions)."""
    with open(os.path.join(PACKAGE, name + ".py"), encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    siblings, found = set(_modules()), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "tfdml.search":
            found |= {a.name for a in node.names if a.name in siblings}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tfdml.search."):
            found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names
                      if a.name.startswith("tfdml.search.")}
    return found - {name}


def test_no_module_is_over_400_lines():
    long = {}
    for name in _modules():
        with open(os.path.join(PACKAGE, name + ".py"), encoding="utf-8") as fh:
            count = sum(1 for _ in fh)
        if count > 400:
            long[name] = count
    assert not long, f"split these modules by job: {long}"


def test_the_modules_import_each_other_without_a_circle():
    """``__init__`` re-exports the others; among the others, imports form no cycle."""
    graph = {name: _imports(name) - {"__init__"} for name in _modules() if name != "__init__"}
    done, active = set(), []

    def visit(name):
        if name in active:
            raise AssertionError(f"import circle: {' -> '.join(active[active.index(name):] + [name])}")
        if name in done:
            return
        active.append(name)
        for other in sorted(graph[name]):
            visit(other)
        active.pop()
        done.add(name)

    for name in graph:
        visit(name)
    assert graph["index"] and "index" not in graph["calibration"]  # the graph was read


def test_the_package_exports_what_it_lists():
    assert all(hasattr(tfdml.search, name) for name in tfdml.search.__all__)
    assert {"Index", "calibrate", "export_lookup", "as_keys", "main"} <= set(tfdml.search.__all__)
