"""The command lines: installed as commands (setup.cfg's console_scripts), and the
top-level scripts are thin entry points to the same ``main``."""

import configparser
import importlib
import importlib.util
import os

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
