"""The command lines: installed as commands (setup.cfg's console_scripts), and the
top-level scripts are thin entry points to the same ``main``."""

import configparser
import importlib
import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def console_scripts():
    """``{command: "module:function"}`` of setup.cfg."""
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, "setup.cfg"))
    lines = parser["options.entry_points"]["console_scripts"].strip().splitlines()
    return dict((part.strip() for part in line.split("=", 1)) for line in lines)


def test_the_three_command_lines_are_installed_as_commands():
    assert console_scripts() == {"tfdml-train": "tfdml_app.train_cli:main",
                                 "tfdml-evaluate": "tfdml_app.evaluate_cli:main",
                                 "tfdml-search": "tfdml_app.search_cli:main"}
    # The names the commands' help and messages use are these commands and the scripts.
    from tfdml_app import commands

    assert {command: f"tfdml_app.{tool}_cli:main" for tool, (command, _) in commands.COMMANDS.items()} \
        == console_scripts()
    assert all(os.path.exists(os.path.join(ROOT, script)) for _, script in commands.COMMANDS.values())


@pytest.mark.parametrize("command", ["tfdml-train", "tfdml-evaluate", "tfdml-search"])
def test_each_entry_point_imports_and_answers_help(command, capsys):
    module, function = console_scripts()[command].split(":")
    main = getattr(importlib.import_module(module), function)
    assert callable(main)
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    assert "usage:" in capsys.readouterr().out


@pytest.mark.parametrize("script, module", [("train", "train_cli"), ("evaluate", "evaluate_cli"),
                                            ("search", "search_cli")])
def test_the_top_level_scripts_call_the_package_s_main(script, module):
    spec = importlib.util.spec_from_file_location(f"{script}_script", os.path.join(ROOT, f"{script}.py"))
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    assert loaded.main is importlib.import_module(f"tfdml_app.{module}").main


@pytest.mark.parametrize("script, other", [("train.py", None), ("evaluate.py", "search.py"),
                                           ("search.py", None)])
def test_each_script_names_itself_and_the_other_scripts_in_its_help(script, other):
    """``python train.py --help`` says ``usage: train.py``; the installed command says
    ``usage: tfdml-train`` (tests/test_packaging.py, from a wheel install)."""
    run = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"usage: {script} "), run.stdout
    assert "tfdml-" not in run.stdout, run.stdout
    if other:
        assert other in run.stdout.replace("\n", " ")
