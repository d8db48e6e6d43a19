"""Every fenced block of the README and the user guide, as a reader takes it.

The blocks of a document run in its order, in one scratch folder of that document that holds
`configs/` as in a clone, so that a command may use what an earlier one wrote:

* a Python block is executed as a script;
* a YAML block is a part of a config: the config schema checks it;
* a shell block (`bash`) is split into its commands; `train.py`, `evaluate.py` and `search.py` run
  through their own `main` (the command line a user types, in this process), with the
  placeholders the text explains replaced by a generated image folder. A `train.py`
  command gets a budget of one step (``TFDML_SLOW=1``: the printed budget);
* a `text` block is not code (the README's layout);
* a block that repeats, word for word, a block of an earlier document (the guide repeats some
  of the README's) runs there only: the same code on the same inputs.

What a block needs that the text says it needs (a trained run with a lookup, a module the
previous block defines, a folder of images) is made by :data:`PREPARE`. The commands that
are not run here are listed in :data:`NOT_RUN` with the reason: every other command runs,
so a new block is tested as soon as it is written.
"""

import os
import re
import shlex
import sys

import numpy as np
import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCUMENTS = ("README.md", os.path.join("docs", "guide.md"))
SLOW = os.environ.get("TFDML_SLOW") == "1"

#: A command of a shell block that is not run here, by its first words, and why.
NOT_RUN = {
    "python3 -m venv": "installs: CI runs the README's second command on a fresh machine",
    ".venv/bin/pip": "installs: CI runs the README's second command on a fresh machine",
    "pip": "installs: CI runs the README's second command on a fresh machine",
    "PEERS/bin/pip": "installs the peers (PyTorch), which the test machine does not have",
    "python -m venv": "installs the peers' environment",
    "python -c": "installs the peers' environment (a .pth file)",
    "apt-get": "installs system fonts (root and the Debian mirror)",
    "TF_CPP_MIN_LOG_LEVEL=2 .venv/bin/python -m pytest": "the test suite itself",
    "TFDML_SLOW=1": "the test suite itself",
    ".venv/bin/python -m ruff": "the linter: tests/test_lint.py runs it",
    "W0=": "multi-worker training: tests/test_multi_worker.py runs two workers",
    "W1=": "multi-worker training: tests/test_multi_worker.py runs two workers",
    "TF_CONFIG=": "multi-worker training: tests/test_multi_worker.py runs two workers",
    "PEERS/bin/python": "needs PyTorch and pytorch-metric-learning (the bench extra)",
    "python benchmarks/": "the benchmarks (timings on a quiet machine): tests/benchmarks",
    "python study/": "the reproduction study (hours, fonts): tests/study",
}

#: Placeholders of the text, replaced by what they stand for.
PLACEHOLDERS = {"FOLDER": "images", "IMAGE_OR_FOLDER": "images/5"}

#: The command-line programs of the repository, and their entry points.
PROGRAMS = {"train.py": "train", "evaluate.py": "evaluate", "search.py": "search"}


def _blocks():
    """(document, number, language, text) of every fenced block, in reading order."""
    found = []
    for document in DOCUMENTS:
        with open(os.path.join(ROOT, document), encoding="utf-8") as f:
            text = f.read()
        for number, match in enumerate(re.finditer(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M)):
            found.append((document, number + 1, match.group(1) or "text", match.group(2)))
    return found


BLOCKS = _blocks()


def _ran_before(document, lang, text):
    """The block of an earlier document with the same language and text, as "DOCUMENT, block
    N", else None."""
    for other, number, other_lang, other_text in BLOCKS:
        if other == document:
            return None
        if (other_lang, other_text) == (lang, text):
            return f"{other}, block {number}"
    return None


def _commands(text):
    """The commands of a shell block: lines joined at a trailing backslash, comments dropped,
    split at `&&`, a trailing `&` removed."""
    lines = re.sub(r"\\\n\s*", " ", text).splitlines()
    commands = []
    for line in lines:
        line = re.sub(r"\s+#.*$", "", line).strip()
        if not line or line.startswith("#"):
            continue
        for part in line.split("&&"):
            part = part.strip().rstrip("&").strip()
            if part:
                commands.append(part)
    return commands


def _not_run(command):
    return next((why for start, why in NOT_RUN.items() if command.startswith(start)), None)


def _program(words):
    """(entry point module name, argv) of a command of this repository, else None."""
    if len(words) >= 2 and words[0] in (".venv/bin/python", "python", "python3") and words[1] in PROGRAMS:
        return PROGRAMS[words[1]], words[2:]
    return None


@pytest.fixture(scope="module")
def scratch_folders(tmp_path_factory):
    """document -> its scratch folder (:func:`_scratch`), made when first asked for."""
    folders = {}

    def get(document):
        if document not in folders:
            folders[document] = _scratch(tmp_path_factory.mktemp("reader"))
        return folders[document]

    return get


def _scratch(folder):
    """``folder`` laid out as a clone (configs/), with a folder of images FOLDER/<class>/<image>
    (digits 5–9 of the bundled data) and one query image, query.png."""
    import tensorflow as tf

    from pipelines import sources

    os.symlink(os.path.join(ROOT, "configs"), folder / "configs")
    split = sources.get_source("mnist5k").split("test")
    for label in range(len(split.class_names)):
        where = folder / "images" / split.class_names[label]
        where.mkdir(parents=True)
        for number, index in enumerate(np.flatnonzero(split.labels == label)[:6]):
            pixels = tf.cast(tf.round(split.images[index] * 255.0), tf.uint8)
            (where / f"{number}.png").write_bytes(tf.io.encode_png(pixels).numpy())
    (folder / "query.png").write_bytes((folder / "images" / split.class_names[0] / "0.png").read_bytes())
    return folder


def _run_program(module_name, argv, capsys):
    import importlib

    argv = [PLACEHOLDERS.get(word, word) for word in argv]
    if module_name == "train" and not SLOW:
        argv += ["--set", "training.epochs=1", "--set", "training.steps_per_epoch=1"]
    if module_name == "train":
        argv.append("--quiet")
    module = importlib.import_module(module_name)
    code = module.main(argv)
    out, err = capsys.readouterr()
    assert code == 0, f"{module_name}.py {' '.join(argv)} exited {code}:\n{err[-3000:]}"
    return out


def _prepare_main_job(folder, capsys):
    """The main job's run, which the README's first command makes."""
    if not (folder / "runs" / "default" / "finished.json").exists():
        _run_program("train", ["--config", "configs/default.yaml"], capsys)


def _prepare_lookup_run(folder, capsys):
    """The guide's serving block reads a run trained with `export: {lookup: true}` (the YAML
    block before it) and a query image of the user's."""
    _run_program("train", ["--config", "configs/default.yaml", "--set", "output_dir=runs/default",
                           "--set", "export.lookup=true", "--set", "export.lookup_folder=images",
                           "--overwrite"], capsys)


def _prepare_own_loss_module(folder, capsys):
    """"Saved in `my_losses.py`": the guide's block that registers a loss, in that file."""
    block = next(text for _, _, lang, text in BLOCKS if lang == "python" and "tfdml.losses.register" in text)
    (folder / "my_losses.py").write_text(block)


#: What a block needs made before it runs (the text says so next to it), by a phrase of it.
PREPARE = {
    "--model runs/default/model.keras": _prepare_main_job,
    'tf.saved_model.load("runs/default/lookup")': _prepare_lookup_run,
    "--import my_losses": _prepare_own_loss_module,
}


#: What a Python block prints, by a phrase of it (a block that runs but prints nothing of its
#: point fails).
PRINTS = {
    'metrics=["recall", "map@r", "nmi"]': r"'recall@1': ",
    "from tfdml.search import": r"threshold \d\.\d{4}(.|\n)*digit-",
    "tfdml.losses.register": r"loss \d+\.\d{4}",
    "loss.memory.filled": r"\d+ embeddings in the memory",
    'lookup = tf.saved_model.load("runs/default/lookup")': r"\.png",
}


@pytest.fixture
def registries_restored():
    """Names a block registers (a loss of the guide's example) are removed after it."""
    import tfdml

    before = dict(tfdml.losses.LOSSES)
    modules = set(sys.modules)
    path = list(sys.path)
    yield
    for name in set(tfdml.losses.LOSSES) - set(before):
        tfdml.losses.LOSSES.pop(name)
    for name in set(sys.modules) - modules:
        if name == "my_losses":
            sys.modules.pop(name)
    sys.path[:] = path


def test_every_block_is_found():
    languages = {lang for _, _, lang, _ in BLOCKS}
    assert {"python", "bash", "yaml"} <= languages
    assert sum(document == "README.md" for document, *_ in BLOCKS) >= 5


@pytest.mark.parametrize("document, number, lang, text", BLOCKS,
                         ids=[f"{os.path.basename(d)}-{n}-{lang}" for d, n, lang, _ in BLOCKS])
def test_the_block_runs_as_printed(document, number, lang, text, scratch_folders, capsys, monkeypatch,
                                   registries_restored):
    where = f"{document}, block {number}"
    earlier = _ran_before(document, lang, text)
    if earlier and lang != "text":
        pytest.skip(f"{where}: the same code as {earlier}, which runs")
    scratch = scratch_folders(document)
    monkeypatch.chdir(scratch)
    for phrase, prepare in PREPARE.items():
        if phrase in text:
            prepare(scratch, capsys)
    if lang == "python":
        exec(compile(text, where, "exec"), {"__name__": "doc_example"})
        out = capsys.readouterr().out
        for phrase, printed in PRINTS.items():
            if phrase in text:
                assert re.search(printed, out), f"{where} printed {out[-2000:]!r}, not {printed!r}"
        return
    if lang == "yaml":
        from tfdml_app import config

        config.validate(yaml.safe_load(text))
        return
    if lang == "text":
        assert not any(_program(line.split()) for line in text.splitlines()), (
            f"{where} holds a command: mark it ```bash")
        pytest.skip(f"{where}: not code")
    assert lang == "bash", f"{where}: mark a block ```bash, ```python, ```yaml or ```text"
    ran = 0
    for command in _commands(text):
        if _not_run(command):
            continue
        program = _program(shlex.split(command))
        assert program, (f"{where}: {command!r} is neither run by this test nor listed in NOT_RUN "
                         "with the reason")
        _run_program(*program, capsys)
        ran += 1
    if not ran:
        pytest.skip(f"{where}: " + "; ".join(sorted({_not_run(c) for c in _commands(text)})))
