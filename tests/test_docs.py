"""The docs in docs/: the config reference is the schema's rendering, links stay inside the
repository, and the docs say what the code does, not how it went."""

import importlib.util
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")


def _generator():
    spec = importlib.util.spec_from_file_location(
        "gen_config_reference", os.path.join(DOCS, "gen_config_reference.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _doc_files():
    return sorted(os.path.join(DOCS, name) for name in os.listdir(DOCS) if name.endswith(".md"))


#: The Markdown files outside docs/ that the tests of the docs read too: the benchmarks' and the study's.
REPORT_FILES = [os.path.join(ROOT, *parts) for parts in (("benchmarks", "README.md"), ("benchmarks", "RESULTS.md"),
                                                        ("study", "README.md"), ("study", "REPORT.md"))]


def _read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def test_config_reference_is_the_rendering_of_the_schema():
    expected = _generator().render()
    current = _read(os.path.join(DOCS, "config.md"))
    assert current == expected, (
        "docs/config.md is stale (tfdml_app.config.SCHEMA changed): run python docs/gen_config_reference.py")


def test_config_reference_lists_every_key_with_its_default():
    from tfdml_app import config

    text = _read(os.path.join(DOCS, "config.md"))

    def keys(schema, path=""):
        for key, field in schema.items():
            where = f"{path}.{key}" if path else key
            if isinstance(field, dict):
                yield from keys(field, where)
            else:
                yield where

    missing = [k for k in keys(config.SCHEMA) if f"| `{k}` |" not in text]
    assert not missing, f"docs/config.md lacks {missing}"


def test_a_loss_registered_by_a_user_does_not_change_the_reference(monkeypatch):
    """The README's example registers a loss in the test process: the reference lists
    tfdml's own losses, whatever else the process registered."""
    from tfdml import losses

    before = _generator().render()

    class ALossOfTheUser(losses.MetricLoss):
        def compute(self, targets, embeddings):
            return 0.0

    ALossOfTheUser.__module__ = "my_losses"
    monkeypatch.setitem(losses.LOSSES, "a_loss_of_the_user", ALossOfTheUser)
    assert "a_loss_of_the_user" in _generator().config.SCHEMA["loss"]["name"].choices
    assert _generator().render() == before


def test_docs_link_only_to_files_of_the_repository():
    broken = []
    for path in _doc_files() + REPORT_FILES:
        prose = re.sub(r"```.*?```", "", _read(path), flags=re.S)  # code is not a link
        for target in re.findall(r"\]\(([^)#\s]+)", prose):
            if re.match(r"[a-z]+://", target):
                continue
            if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(path), target))):
                broken.append(f"{os.path.relpath(path, ROOT)} -> {target}")
    assert not broken, f"links to files that are not in the repository: {broken}"


def test_docs_and_results_name_no_design_page_outside_the_repository_nor_issues():
    paths = _doc_files() + REPORT_FILES
    found = []
    for path in paths:
        for number, line in enumerate(_read(path).splitlines(), 1):
            if "DESIGN.md" in line or re.search(r"\bissue\s+\d", line, re.I):
                found.append(f"{os.path.relpath(path, ROOT)}:{number}: {line.strip()[:80]}")
    assert not found, f"the docs point outside the repository or to the work log: {found}"


def _imported_packages(package):
    """Top-level names imported by the modules of ``package`` (import statements only)."""
    import ast

    found = {}
    for folder, _, names in os.walk(os.path.join(ROOT, package)):
        for name in names:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            for node in ast.walk(ast.parse(_read(path))):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    if module == "tfdml.registry":  # dependency-free: shared by both sides
                        continue
                    found.setdefault(module.split(".")[0], []).append(
                        f"{os.path.relpath(path, ROOT)}:{node.lineno}")
    return found


def test_the_data_side_and_the_model_side_do_not_import_each_other():
    """docs/design.md: pipelines (tf.data only) imports nothing of tfdml but the
    dependency-free tfdml.registry, and never Keras; tfdml never imports pipelines.
    They meet at the batch contract, in tfdml_app."""
    data_side = _imported_packages("pipelines")
    model_side = _imported_packages("tfdml")
    assert not data_side.get("tfdml") and not data_side.get("keras"), data_side
    assert "tfdml.registry" in _read(os.path.join(DOCS, "design.md"))
    assert not model_side.get("pipelines"), model_side["pipelines"]


def test_the_guide_s_examples_are_python_and_name_configs_that_exist():
    guide = _read(os.path.join(DOCS, "guide.md"))
    blocks = re.findall(r"```python\n(.*?)```", guide, flags=re.S)
    assert blocks
    for number, block in enumerate(blocks):
        compile(block, f"docs/guide.md, python block {number + 1}", "exec")
    named = set(re.findall(r"configs/[\w.-]+\.yaml", guide))
    missing = sorted(p for p in named if not os.path.exists(os.path.join(ROOT, p)))
    assert named and not missing, f"docs/guide.md names configs that do not exist: {missing}"


def test_the_guide_names_every_loss_that_takes_a_memory_and_no_other():
    """The cross-batch memory's list of losses is the registry's: a loss whose
    ``memory_refusal`` is None takes a memory."""
    import tfdml

    guide = " ".join(_read(os.path.join(DOCS, "guide.md")).split())
    sentence = re.search(r"The losses whose terms are pair or triplet terms of an anchor take it \((.*?)\)", guide)
    named = set(re.findall(r"`(\w+)`", sentence.group(1))) - {"loss.name"}
    takes = {name for name, cls in tfdml.losses.LOSSES.items() if cls.memory_refusal is None}
    assert named == takes
