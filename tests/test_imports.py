"""The layout of the code: no import circle among the modules of tfdml/, pipelines/,
tfdml_app/ and the top-level scripts, and no module over 450 lines.

A module's imports are read from its source (``ast``), at the top and inside
functions alike: an import inside a function is still an edge of the graph.
"""

import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("tfdml", "pipelines", "tfdml_app")
SCRIPTS = ("train.py", "evaluate.py", "search.py")
MAX_LINES = 450
#: A comment excusing a long module.
OVER = re.compile(r"^\s*# Over \d+ lines", re.IGNORECASE)


def module_files():
    """``{dotted module name: path}`` of every module of the packages and the scripts."""
    out = {}
    for package in PACKAGES:
        for folder, dirs, names in os.walk(os.path.join(ROOT, package)):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")))
            for name in sorted(n for n in names if n.endswith(".py")):
                path = os.path.join(folder, name)
                parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                out[".".join(parts)] = path
    for name in SCRIPTS:
        out[name[:-3]] = os.path.join(ROOT, name)
    return out


def imported_modules(name, path, known):
    """The modules of ``known`` that module ``name`` (file ``path``) imports: for
    ``from a.b import c`` the module ``a.b.c`` when it is one, else ``a.b``."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()

    def add(module):
        while module and module not in known:  # a.b.SYMBOL -> a.b
            module = module.rpartition(".")[0]
        if module:
            found.add(module)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return found - {name}


def import_graph():
    """``{module: set of the modules it imports}`` over :func:`module_files`."""
    files = module_files()
    return {name: imported_modules(name, path, files) for name, path in files.items()}


def find_cycle(graph):
    """One import circle of ``graph`` as a list ``[a, b, ..., a]``, or None."""
    done, active = set(), []

    def visit(name):
        if name in active:
            return active[active.index(name):] + [name]
        if name in done:
            return None
        active.append(name)
        for other in sorted(graph.get(name, ())):
            cycle = visit(other)
            if cycle:
                return cycle
        active.pop()
        done.add(name)
        return None

    for name in sorted(graph):
        cycle = visit(name)
        if cycle:
            return cycle
    return None


def test_the_graph_is_read():
    graph = import_graph()
    assert {"tfdml_app.fit", "tfdml_app.build", "tfdml.search.index", "pipelines.sources.core",
            "train"} <= set(graph)
    assert "tfdml_app.build" in graph["tfdml_app.fit"]
    assert "tfdml_app.train_cli" in graph["train"]
    assert "tfdml.search.index" not in graph["tfdml.search.calibration"]
    assert "tfdml.metrics" in graph["tfdml.callbacks"]  # from tfdml import metrics as _metrics


def test_find_cycle_finds_one_through_an_import_inside_a_function(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    import b\n")
    (tmp_path / "b.py").write_text("from a import f\n")
    known = {"a": str(tmp_path / "a.py"), "b": str(tmp_path / "b.py")}
    graph = {name: imported_modules(name, path, known) for name, path in known.items()}
    assert find_cycle(graph) == ["a", "b", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circle():
    cycle = find_cycle(import_graph())
    assert cycle is None, f"import circle: {' -> '.join(cycle)}"


def test_the_data_side_and_the_model_side_are_wired_by_the_application_only():
    graph = import_graph()
    for name, imports in graph.items():
        if name.startswith("tfdml.") or name == "tfdml":
            assert not any(m.split(".")[0] in ("pipelines", "tfdml_app") for m in imports), (name, imports)
        if name.startswith("pipelines"):
            # The one exception: the dependency-free registry class all parts are named with.
            assert not any(m.split(".")[0] in ("tfdml", "tfdml_app") and m != "tfdml.registry"
                           for m in imports), (name, imports)


def test_the_registry_the_data_side_imports_needs_no_tensorflow():
    """pipelines may import tfdml.registry because it (and tfdml's package module) loads
    nothing else: checked in a fresh interpreter."""
    import subprocess
    import sys

    code = ("import sys, tfdml.registry; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'keras', 'numpy', 'tfdml', 'pipelines', 'tfdml_app')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.stdout.strip() == "['tfdml', 'tfdml.registry']", out.stdout


@pytest.mark.parametrize("name, path", sorted(module_files().items()))
def test_no_module_over_450_lines(name, path):
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    assert len(lines) <= MAX_LINES, (
        f"{os.path.relpath(path, ROOT)} has {len(lines)} lines: split it by job (one module per job, "
        f"each under {MAX_LINES} lines)")
    assert not any(OVER.search(line) for line in lines), (
        f"{os.path.relpath(path, ROOT)} says why it is long: split it by job instead")


#: What the kernels may not import: the parts built on them.
ABOVE_THE_KERNELS = ("tfdml.samplers", "tfdml.metrics", "tfdml.losses", "tfdml.models")


def test_the_kernels_import_nothing_built_on_them():
    """tfdml/kernels holds the fast forms and the table that chooses them: samplers and
    metrics import the kernels, never the other way (docs/design.md, "Kernels")."""
    graph = import_graph()
    kernels = sorted(name for name in graph if name == "tfdml.kernels" or name.startswith("tfdml.kernels."))
    assert "tfdml.kernels.semi_hard" in kernels and "tfdml.kernels.retrieval" in kernels
    upward = {name: sorted(m for m in graph[name] if m in ABOVE_THE_KERNELS or m.startswith(tuple(a + "." for a in ABOVE_THE_KERNELS)))
              for name in kernels}
    upward = {name: found for name, found in upward.items() if found}
    assert not upward, f"kernels importing what is built on them: {upward}"


def test_the_primitives_import_nothing_of_tfdml_but_the_xla_helpers():
    """tfdml.primitives, the plain row primitives and score helpers, is the lowest layer:
    the kernels, samplers and metrics are built on it (docs/design.md, "Kernels")."""
    graph = import_graph()
    assert not sorted(m for m in graph["tfdml.primitives"] if m.split(".")[0] == "tfdml" and m != "tfdml.xla")
    assert "tfdml.primitives" in graph["tfdml.kernels.chosen"]


def test_the_table_is_read_through_choose_only():
    """No module of tfdml but tfdml.kernels reads ``CHOICES``: every choice goes through
    ``tfdml.kernels.choose``, which a device, a mode and ``kernels.forced`` all reach."""
    readers = []
    for name, path in module_files().items():
        if not name.startswith("tfdml.") or name == "tfdml.kernels":
            continue
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        for node in ast.walk(tree):
            named = (isinstance(node, ast.Attribute) and node.attr == "CHOICES") or (
                isinstance(node, ast.ImportFrom) and any(alias.name == "CHOICES" for alias in node.names))
            if named:
                readers.append(f"{name}:{node.lineno}")
    assert not readers, f"modules reading the kernels table itself: {readers}"


#: The parts of the loss contract and of the embedding model, each below the module it serves:
#: ``{module: the modules it may not import}``.
BELOW = {
    "tfdml.candidates": ("tfdml.memory", "tfdml.losses", "tfdml.models"),
    "tfdml.memory": ("tfdml.losses", "tfdml.models"),
    "tfdml.losses.batch": ("tfdml.losses.base", "tfdml.models"),
    "tfdml.losses.arguments": ("tfdml.losses.base", "tfdml.losses.batch", "tfdml.models"),
    "tfdml.losses.seeds": ("tfdml.losses.base", "tfdml.models"),
    "tfdml.compiled_loss": ("tfdml.models",),
    "tfdml.model_counters": ("tfdml.models",),
    "tfdml.loss_state": ("tfdml.models", "tfdml.losses"),
    "tfdml.keras_shims": ("tfdml.models",),
    "tfdml.dtype_policies": ("tfdml.models",),
    "tfdml.pddm": ("tfdml.losses", "tfdml.models"),
}


@pytest.mark.parametrize("name", sorted(BELOW))
def test_the_parts_of_the_loss_and_the_model_import_nothing_above_them(name):
    """The batch helpers, argument checks and seeds of the losses stand below the loss
    contract (tfdml.losses.base), the candidates below the memory and the losses, and the
    embedding model's parts below tfdml.models."""
    graph = import_graph()
    above = BELOW[name]
    found = sorted(m for m in graph[name] if m in above or m.startswith(tuple(a + "." for a in above)))
    assert not found, f"{name} imports {found}, which are built on it"


#: The parts built on the kernels: they take the table's answers from tfdml.kernels.chosen
#: or from a kernel's own function, never from the table.
TAKE_ANSWERS = ("tfdml.losses", "tfdml.samplers", "tfdml.metrics", "tfdml.models", "tfdml.dtype_policies",
                "tfdml.compiled_loss", "tfdml.model_counters")


def _takes_answers(name):
    return name in TAKE_ANSWERS or name.startswith(tuple(a + "." for a in TAKE_ANSWERS))


def test_the_parts_built_on_the_kernels_take_the_table_s_answers_and_read_no_choice():
    """The losses, samplers, metrics and the embedding model do not read the kernels
    table's choices: they ask tfdml.kernels.chosen, which answers plainly (a width, a yes or
    no, a policy name, a primitive run in its form), or a kernel's own function, which runs
    the form chosen or the reference path they pass in (docs/design.md, "Kernels")."""
    readers = []
    for name, path in module_files().items():
        if not _takes_answers(name):
            continue
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("choose", "is_reference", "form"):
                readers.append(f"{name}:{node.lineno}")
    assert not readers, f"modules interpreting the kernels table themselves: {readers}"
    graph = import_graph()
    checked = sorted(name for name in graph if _takes_answers(name))
    assert {"tfdml.samplers.semi_hard", "tfdml.metrics.retrieval", "tfdml.losses.base"} <= set(checked)
    table = sorted(name for name in checked if "tfdml.kernels" in graph[name])
    assert not table, f"modules importing the kernels table (tfdml.kernels itself): {table}"
