"""The README's promises: two commands first, .ci/run runs the second, the catalogue's tables are the
registry and configs/, the README stays short (its examples and the guide's run in test_doc_examples.py)."""

import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
GUIDE = open(os.path.join(ROOT, "docs", "guide.md"), encoding="utf-8").read()
CATALOGUE = open(os.path.join(ROOT, "docs", "catalogue.md"), encoding="utf-8").read()


def _blocks(lang, text=README):
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_readme_opens_with_the_two_commands_and_ci_runs_the_second():
    first_two = _blocks("bash")[:2]
    assert "train.py --config configs/default.yaml" in first_two[0]
    assert "pytest" in first_two[1]
    assert first_two[1].strip() in open(os.path.join(ROOT, ".ci", "run")).read()
    # Nothing but prose comes before them.
    assert README.index(first_two[0]) < README.index("## ")


def test_ci_fails_when_the_readme_test_command_fails_and_stops_there(tmp_path):
    # `set -e` ignores a failure inside an `a && b && c` list unless it is the last command:
    # a failed install must still fail CI, not fall through to the minimum-versions suite.
    import shutil
    import subprocess

    (tmp_path / ".ci").mkdir()
    shutil.copy(os.path.join(ROOT, ".ci", "run"), tmp_path / ".ci" / "run")
    marker = tmp_path / "min_versions_ran"
    (tmp_path / ".ci" / "min_versions").write_text(f"touch {marker}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    result = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], env=env,
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert not marker.exists()


def _readme_figures():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "readme_figures", os.path.join(ROOT, "benchmarks", "readme_figures.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_main_job_table_is_the_rendering_of_its_runs():
    """The README's main-job figures come from one command. Rendering the
    README's own per-seed numbers must reproduce its block (table, mean row, sentence)."""
    figures = _readme_figures()
    block = README.split(figures.BEGIN)[1].split(figures.END)[0].strip()
    rows = {}
    for line in block.splitlines():
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        if line.startswith("| raw pixels") or line.startswith("| default config, seed"):
            rows[cells[0]] = dict(zip([k for _, k in figures.COLUMNS], map(float, cells[1:])))
    seeds = sorted(int(name.rsplit(" ", 1)[1]) for name in rows if "seed" in name)
    seconds = int(re.search(r"about (\d+) s each", block).group(1))
    queries = int(re.search(r"\(([\d,]+) leave-one-out queries\)", block).group(1).replace(",", ""))
    runs = [{"metrics": rows[f"default config, seed {s}"], "baseline": rows["raw pixels"],
             "seconds": seconds, "num_queries": queries} for s in seeds]
    machine_line = re.match(r"Measured (.*?)\(`python", block).group(1)
    rendered = figures.render(runs, seeds, machine_line)
    assert block.splitlines() == rendered.splitlines()
    assert figures.replace_block(README, rendered) == README


def test_replace_block_refuses_a_readme_without_one_block():
    figures = _readme_figures()
    import pytest

    with pytest.raises(ValueError, match="one <!-- readme_figures"):
        figures.replace_block("no markers here", "x")
    text = f"a\n{figures.BEGIN}\nold\n{figures.END}\nb"
    assert figures.replace_block(text, "new") == f"a\n{figures.BEGIN}\nnew\n{figures.END}\nb"


def _own_loss_example():
    return next(b for b in _blocks("python", GUIDE) if "tfdml.losses.register" in b)


def test_add_your_own_loss_example_runs_and_configs_find_it(capsys):
    """The user guide's "Add your own loss" example, as written."""
    import tfdml
    import tfdml_app.config

    try:
        exec(compile(_own_loss_example(), "docs/guide.md", "exec"), {"__name__": "guide_own_loss"})
        assert re.search(r"loss \d+\.\d{4}", capsys.readouterr().out)
        cls = tfdml.losses.LOSSES["squared_hinge_pairs"]
        # Its options and samplers come from the class, as for the built-in losses.
        with pytest.raises(tfdml_app.config.ConfigError, match="'thresold'.*did you mean 'threshold'"):
            tfdml_app.config.validate({"loss": {"name": "squared_hinge_pairs",
                                            "options": {"thresold": 1.0}}})
        assert "distance_weighted" in tfdml_app.config.valid_samplers("squared_hinge_pairs")
        import keras

        again = keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(cls(threshold=0.5, importance=True)))
        assert type(again) is cls and again.threshold == 0.5 and again.importance
    finally:
        tfdml.losses.LOSSES.pop("squared_hinge_pairs", None)


def test_train_py_imports_a_module_that_registers_a_loss(tmp_path, monkeypatch, capsys):
    import tfdml
    import train

    (tmp_path / "my_losses.py").write_text(_own_loss_example())
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        "data: {source: digits}\n"
        "design: {name: m_per_class, m: 4, n: 5}\n"
        "model: {backbone: mlp, backbone_options: {width: 8}, embedding_dim: 8}\n"
        "loss: {name: squared_hinge_pairs, sampler: random, options: {threshold: 0.7}}\n"
        "training: {epochs: 1, steps_per_epoch: 2}\n"
        "evaluation: {metrics: [recall], ks: [1], baseline: null}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        code = train.main(["--import", "my_losses", "--config", str(cfg), "--quiet",
                           "--set", f"output_dir={tmp_path / 'run'}"])
        assert code == 0, capsys.readouterr().err
        assert (tmp_path / "run" / "finished.json").exists()
        assert train.main(["--import", "no_such_module_here", "--config", str(cfg)]) == 2
        assert "--import no_such_module_here" in capsys.readouterr().err
    finally:
        tfdml.losses.LOSSES.pop("squared_hinge_pairs", None)
        sys.modules.pop("my_losses", None)


def test_the_xla_forms_paragraph_matches_the_library_and_names_what_exists():
    # The user guide quotes the compacted width (16 slots an anchor, classes of more than 17
    # take the whole grid) and points to the table of semi-hard's thresholds; they must stay
    # the library's.
    from tfdml import kernels
    from tfdml.kernels import chosen
    from tfdml.samplers import base

    text = " ".join(GUIDE.split())
    width = kernels.choose("triplet_slots", mode="xla", device="CPU").params["width"]
    assert f"on up to {width} valid triplets per anchor (B·{width} slots)" in text
    assert f"when a class has more than {width + 1} examples" in text
    assert "`tfdml.kernels.CHOICES`" in text
    assert all("sort_above" in choice.params for choice in kernels.CHOICES["CPU"]["semi_hard"].values())
    assert "`tfdml.kernels.chosen.stable_order`" in text and callable(chosen.stable_order)
    assert callable(getattr(base.Sampler, "xla_is_slower", None))


def _losses_table():
    """{loss.name: {column: cell}} of the catalogue's losses table."""
    section = CATALOGUE.split("\n## Losses\n")[1].split("\n## ")[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = dict(zip(header, (c.strip() for c in line.strip("|").split("|"))))
        rows[cells["`loss.name`"].strip("`")] = cells
    return rows


def test_losses_table_has_a_row_for_each_registered_loss_and_its_columns_are_the_classes():
    from tfdml import losses
    from tfdml.losses.proxies import ProxyLoss

    own = {name: cls for name, cls in losses.LOSSES.items() if cls.__module__.startswith("tfdml.")}
    rows = _losses_table()
    assert sorted(rows) == sorted(own), "docs/catalogue.md losses table != tfdml.losses.LOSSES"
    for name, cls in own.items():
        row = rows[name]
        assert row["class"] == f"`{cls.__name__}`", name
        kinds = () if row["samplers"] == "—" else tuple(k.strip() for k in row["samplers"].split(","))
        assert kinds == tuple(cls.sampler_kinds), (name, kinds, cls.sampler_kinds)
        assert row["importance"] == ("yes" if cls.supports_importance else "no"), name
        assert row["proxies"] == ("yes" if issubclass(cls, ProxyLoss) else "no"), name
        assert re.search(r"et al\.| & |draft", row["paper, equation"]), f"{name}: no paper cited"


def test_readme_is_short_lists_every_config_and_points_to_the_docs():
    assert len(README.splitlines()) <= 250
    listed = set(re.findall(r"`(configs/[\w.-]+\.yaml)`", CATALOGUE.split("\n## Configs\n")[1]))
    on_disk = {f"configs/{name}" for name in os.listdir(os.path.join(ROOT, "configs")) if name.endswith(".yaml")}
    assert listed == on_disk, f"docs/catalogue.md configs table: missing {on_disk - listed}, stale {listed - on_disk}"
    in_readme = set(re.findall(r"`(configs/[\w.-]+\.yaml)`", README))
    assert in_readme <= on_disk, f"README names configs that do not exist: {in_readme - on_disk}"
    for target in ("docs/guide.md", "docs/design.md", "docs/config.md", "docs/catalogue.md", "benchmarks/RESULTS.md",
                   "study/REPORT.md"):
        assert f"]({target}" in README, target
    for target in re.findall(r"\]\(([^)#\s]+)", README):
        if not re.match(r"[a-z]+://", target):
            assert os.path.exists(os.path.join(ROOT, target)), target
    assert not re.search(r"\bissue\s+\d", README + GUIDE, re.I)


def test_readme_anchors_into_the_guide_exist():
    def anchor(heading):
        return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")

    anchors = {anchor(h) for h in re.findall(r"^#+ (.+)$", GUIDE, flags=re.M)}
    for target in re.findall(r"\]\(docs/guide\.md#([^)]+)\)", README):
        assert target in anchors, target
