"""The README's promises: two commands first, .ci/run runs the second, the examples run."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = open(os.path.join(ROOT, "README.md")).read()


def _blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_readme_opens_with_the_two_commands_and_ci_runs_the_second():
    first_two = _blocks("bash")[:2]
    assert "train.py --config configs/default.yaml" in first_two[0]
    assert "pytest" in first_two[1]
    assert first_two[1].strip() in open(os.path.join(ROOT, ".ci", "run")).read()
    # Nothing but prose comes before them.
    assert README.index(first_two[0]) < README.index("## ")


def test_api_example_runs(capsys):
    example = _blocks("python")[0]
    assert "MarginLoss" in example and "model.fit" in example
    exec(compile(example, "README.md", "exec"), {"__name__": "readme_example"})
    assert "recall@1" in capsys.readouterr().out


def test_search_example_runs(capsys):
    example = next(b for b in _blocks("python") if "tfdml.search" in b)
    exec(compile(example, "README.md", "exec"), {"__name__": "readme_search_example"})
    out = capsys.readouterr().out
    assert "threshold" in out and "digit-" in out
