"""benchmarks/shipped_configs.py: the recorded table of the shipped configs is the rendering
of the committed runs, every config on the bundled data has a run of its current form, and
each beats raw pixels on the held-out split or says in its header what it demonstrates."""

import importlib.util
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))  # readme_figures.py, machine.py
_spec = importlib.util.spec_from_file_location("shipped_configs",
                                               os.path.join(ROOT, "benchmarks", "shipped_configs.py"))
shipped_configs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shipped_configs)

RESULTS = shipped_configs.load_results()
NAMES = shipped_configs.configs_on_bundled_data()


def _run(model, raw):
    keys = [key for _, key in shipped_configs.COLUMNS]
    return {"seed": 0, "seconds": 10.0, "config_sha256": "x",
            "metrics": dict(zip(keys, model)), "baseline": dict(zip(keys, raw))}


def test_a_figure_counts_as_lost_when_raw_pixels_are_as_good():
    run = _run([0.98, 0.50, 0.60, 0.49], [0.97, 0.40, 0.50, 0.49])
    assert shipped_configs.losing_figures(run) == ["nmi"]
    block = shipped_configs.render({"machine": "Measured here", "runs": {
        "default": _run([0.98, 0.5, 0.6, 0.7], [0.97, 0.4, 0.5, 0.5]), "npair": run}})
    assert "| `default` | 0.980 / 0.970 | 0.500 / 0.400 | 0.600 / 0.500 | 0.700 / 0.500 | on every figure |" in block
    assert "| `npair` |" in block and "| not on nmi; it demonstrates the N-pair loss" in block


def test_a_losing_config_says_in_its_row_what_it_demonstrates(tmp_path, monkeypatch):
    (tmp_path / "shown.yaml").write_text("# A config.\n# Demonstrates: the first line\n# and the next.\nseed: 0\n")
    (tmp_path / "plain.yaml").write_text("# A config.\nseed: 0\n")
    monkeypatch.setattr(shipped_configs, "config_path", lambda name: str(tmp_path / f"{name}.yaml"))
    losing = _run([0.98, 0.50, 0.60, 0.49], [0.97, 0.40, 0.50, 0.49])
    winning = _run([0.98, 0.50, 0.60, 0.50], [0.97, 0.40, 0.50, 0.49])
    assert shipped_configs.verdict("shown", losing) == "not on nmi; it demonstrates the first line and the next."
    assert shipped_configs.verdict("plain", losing) == "not on nmi"
    assert shipped_configs.verdict("shown", winning) == "on every figure"
    block = shipped_configs.render({"machine": "Measured here", "runs": {"shown": losing, "plain": winning}})
    assert block.splitlines()[-1].endswith("| not on nmi; it demonstrates the first line and the next. |")
    assert block.splitlines()[-2].endswith("| on every figure |")


def test_the_configs_on_bundled_data_are_found():
    assert "default" in NAMES and "proxy_anchor" in NAMES
    assert "cars196_margin" not in NAMES and "folder_template" not in NAMES


def test_the_recorded_table_is_the_rendering_of_the_committed_runs():
    with open(shipped_configs.results_tables.tables_path("shipped_configs"), encoding="utf-8") as f:
        recorded = f.read()
    assert recorded == shipped_configs.render(RESULTS) + "\n"
    with open(shipped_configs.results_tables.RESULTS_PATH, encoding="utf-8") as f:
        assert recorded in f.read()


@pytest.mark.parametrize("name", NAMES)
def test_every_config_on_bundled_data_has_a_run_of_its_current_form(name):
    assert name in RESULTS["runs"], f"run python benchmarks/shipped_configs.py --configs {name} --write"
    assert RESULTS["runs"][name]["config_sha256"] == shipped_configs.config_digest(name), (
        f"configs/{name}.yaml changed since its run: python benchmarks/shipped_configs.py --configs {name} --write")


@pytest.mark.parametrize("name", NAMES)
def test_every_config_beats_raw_pixels_or_says_what_it_demonstrates(name):
    losing = shipped_configs.losing_figures(RESULTS["runs"][name])
    assert not losing or shipped_configs.demonstrates(name), (
        f"raw pixels beat configs/{name}.yaml on {', '.join(losing)}, and its header has no "
        f"'{shipped_configs.DEMONSTRATES}' line")


def test_what_a_config_demonstrates_is_the_end_of_its_header(tmp_path, monkeypatch):
    (tmp_path / "shown.yaml").write_text("# A config.\n# Demonstrates: the first line\n# and the next.\nseed: 0\n# not this\n")
    (tmp_path / "plain.yaml").write_text("# A config.\nseed: 0\n")
    monkeypatch.setattr(shipped_configs, "config_path", lambda name: str(tmp_path / f"{name}.yaml"))
    assert shipped_configs.demonstrates("shown") == "the first line and the next."
    assert shipped_configs.demonstrates("plain") is None
