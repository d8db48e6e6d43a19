"""``import tfdml``: cheap and without side effects (no TensorFlow, no heavy dependency,
nothing added to ``sys.meta_path``, submodules loaded on first use); a saved model
loads through the one documented way, :func:`tfdml.load_model`.

Each check needs a fresh interpreter, and each interpreter that imports TensorFlow is the
costly part: checks that start from the same imports share one interpreter, which runs
them in turn and prints one line per check (:func:`_cases`), each check reading only what
its own step did; a test reads its check's line, and its failure names the check."""

import ast
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_HEAVY = ("matplotlib", "sklearn", "scipy", "yaml")

#: Defines, in a child, ``finders()`` (sys.meta_path as the names of its finders' classes)
#: and ``report(case, value)``, which prints one check's result as a JSON line.
_CHILD = ("import json\n"
          "def finders():\n"
          "    return [f'{c.__module__}.{c.__qualname__}' for c in\n"
          "            (f if isinstance(f, type) else type(f) for f in sys.meta_path)]\n"
          "def report(case, value):\n"
          "    print(json.dumps({'case': case, 'value': value}), flush=True)\n")


def _run(code):
    """``code`` run in a fresh interpreter that imports from this checkout."""
    return subprocess.run([sys.executable, "-c", f"import sys\nsys.path.insert(0, {ROOT!r})\n{code}"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})


def _fresh(code):
    """What ``code``, run in a fresh interpreter, prints; it must succeed."""
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _cases(code):
    """The checks of ``code``, run in one fresh interpreter with :data:`_CHILD`'s helpers:
    a function of a check's name that returns the value the child reported for it, and
    fails naming the check (with the child's error) if the child stopped before it."""
    proc = _run(_CHILD + code)
    reported = {}
    for line in proc.stdout.splitlines():
        if line.startswith('{"case": '):
            record = json.loads(line)
            reported[record["case"]] = record["value"]

    def value(case):
        assert case in reported, (f"the fresh interpreter stopped before the check {case!r} "
                                  f"(exit {proc.returncode}):\n{proc.stderr[-2000:]}")
        return reported[case]

    return value


def test_config_loads_without_tensorflow():
    out = _fresh("import tfdml, tfdml_app.config, tfdml.files\n"
                 "from tfdml_app.config import validate\n"
                 "print('tensorflow imported:', 'tensorflow' in sys.modules)")
    assert "tensorflow imported: False" in out


def test_import_tfdml_imports_no_tensorflow_and_no_heavy_dependency():
    out = _fresh(f"import tfdml\nprint(sorted(m for m in {_HEAVY + ('tensorflow', 'keras')!r} if m in sys.modules))")
    assert out.strip() == "[]"


@pytest.fixture(scope="module")
def tensorflow_alone_finders():
    """sys.meta_path before and after ``import tensorflow``, alone in a fresh interpreter."""
    alone = _cases("report('start', finders())\nimport tensorflow\nreport('after', finders())")
    return alone("start"), alone("after")


@pytest.mark.parametrize("first, second", [("tfdml", "pipelines"), ("pipelines", "tfdml")])
def test_import_tfdml_and_pipelines_leaves_sys_meta_path_as_it_was(first, second, tensorflow_alone_finders):
    """Importing tfdml (alone, or with pipelines, in either order) adds no finder to
    sys.meta_path and loads none of tfdml's Keras side. pipelines imports TensorFlow,
    whose own dependencies add finders when they load: the import of both changes
    sys.meta_path exactly as ``import tensorflow`` alone does, in another fresh process."""
    both = _cases(f"report('start', finders())\nimport {first}\nreport('after first', finders())\n"
                  f"import {second}\nreport('after both', finders())\n"
                  "report('keras side', sorted(m for m in ('tfdml.losses', 'tfdml.models', 'tfdml.optimizers')"
                  " if m in sys.modules))")
    tf_start, tf_after = tensorflow_alone_finders
    assert tf_start == both("start")
    if first == "tfdml":
        assert both("after first") == both("start")
    assert both("after both") == tf_after
    assert both("keras side") == []


def _registering_modules():
    """The modules of tfdml that register a class with Keras (a class decorated with
    ``register_keras_serializable``), read from their source."""
    found = set()
    for folder, dirs, names in os.walk(os.path.join(ROOT, "tfdml")):
        dirs[:] = [d for d in dirs if not d.startswith((".", "__pycache__"))]
        for name in (n for n in names if n.endswith(".py")):
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
            if any(isinstance(node, ast.ClassDef) and any(
                    "register_keras_serializable" in ast.unparse(d) for d in node.decorator_list)
                   for node in ast.walk(tree)):
                parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
                found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


@pytest.fixture(scope="module")
def keras_then_tfdml_keras_side():
    """One fresh interpreter: ``import keras``, then ``import tfdml`` and
    ``tfdml._import_keras_classes()``. Its checks: 'keras alone' and 'with tfdml' (the heavy
    modules loaded after each step), 'not imported' (the modules that register a class with
    Keras that the import of tfdml's Keras side left unloaded)."""
    heavy = f"sorted(m for m in {_HEAVY!r} if m in sys.modules)"
    return _cases(f"import keras\nreport('keras alone', {heavy})\n"
                  f"import tfdml\ntfdml._import_keras_classes()\nreport('with tfdml', {heavy})\n"
                  f"report('not imported', sorted(m for m in {sorted(_registering_modules())!r}"
                  " if m not in sys.modules))")


def test_load_model_registers_every_tfdml_class_keras_saves(keras_then_tfdml_keras_side):
    """:func:`tfdml.load_model` imports every module that registers a class with Keras
    (losses, samplers, models, optimizers, callbacks, ...) before Keras reads the file."""
    assert {"tfdml.models", "tfdml.optimizers", "tfdml.losses.margin"} <= _registering_modules()
    assert keras_then_tfdml_keras_side("not imported") == []


def test_keras_classes_load_without_matplotlib_sklearn_or_yaml():
    """Keras itself imports matplotlib and scikit-learn when they are installed, so
    they are made unimportable here: tfdml's Keras side loads and registers its classes
    without them (config, plots and the metrics that need them import them on use)."""
    out = _fresh("for m in ('matplotlib', 'sklearn', 'yaml'):\n    sys.modules[m] = None\n"
                 "import tfdml, keras\ntfdml._import_keras_classes()\n"
                 "print(keras.saving.get_registered_object('tfdml>MarginLoss') is tfdml.losses.MarginLoss,\n"
                 "      all(f'tfdml.{n}' in sys.modules for n in tfdml._SUBMODULES))")
    assert out.split() == ["True", "True"]


def test_tfdml_keras_classes_import_no_yaml_or_matplotlib_beyond_keras(keras_then_tfdml_keras_side):
    """In one fresh process: the heavy modules loaded by Keras alone, then after tfdml's Keras side."""
    keras_alone = keras_then_tfdml_keras_side("keras alone")
    with_tfdml = keras_then_tfdml_keras_side("with tfdml")
    assert with_tfdml == keras_alone and "yaml" not in with_tfdml


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A ``model.keras`` of an EmbeddingModel trained one step with a MarginLoss that
    learns β0 and per-class β's and a ``tfdml.optimizers.Adam``; ``(path, data)`` with
    ``data.npz`` holding the inputs, the model's embeddings of them and its β's."""
    import keras

    from tfdml import losses, models, optimizers

    folder = tmp_path_factory.mktemp("saved_run")
    keras.utils.set_random_seed(0)
    encoder = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.UnitNormalization()])
    model = models.EmbeddingModel(encoder)
    model.compile(optimizer=optimizers.Adam(0.05), loss=losses.MarginLoss(num_classes=4, nu=0.1))
    x = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    model.fit(x, np.repeat(np.arange(4), 4), batch_size=16, epochs=1, verbose=0)
    beta = model.loss_parameters[0]
    assert float(beta.beta0.numpy()) != pytest.approx(1.2)  # β0 learned: the file holds state
    path = str(folder / "model.keras")
    model.save(path)
    data = str(folder / "data.npz")
    np.savez(data, x=x, embeddings=model.predict(x, verbose=0), beta0=beta.beta0.numpy(),
             beta_class=beta.beta_class.numpy())
    return path, data


#: The check 'load': the saved run loaded with tfdml.load_model gives the saved embeddings and
#: β's; reports the model's class, the β's module, the optimizer's class and its step count.
_LOAD = """
import numpy as np
model = tfdml.load_model({path!r})
data = np.load({data!r})
np.testing.assert_allclose(model.predict(data["x"], verbose=0), data["embeddings"], atol=1e-6)
beta = model.loss_parameters[0]
np.testing.assert_allclose(beta.beta0.numpy(), data["beta0"])
np.testing.assert_allclose(beta.beta_class.numpy(), data["beta_class"])
report('load', [type(model) is tfdml.models.EmbeddingModel, type(beta).__module__,
                type(model.optimizer) is tfdml.optimizers.Adam, int(model.optimizer.iterations.numpy())])
"""

#: The check 'keras alone' (run before 'load', while only ``import tfdml`` has run): the
#: error of Keras's own loader given the saved run, as its type and message.
_KERAS_ALONE = """
load = keras.saving.load_model  # the one call of it outside tfdml.load_model
try:
    load({path!r})
except Exception as error:
    report('keras alone', f"{{type(error).__name__}}: {{error}}")
else:
    report('keras alone', 'loaded')
"""


@pytest.fixture(scope="module")
def loads(saved_run):
    """import order -> the checks of one fresh interpreter that imports tfdml and keras in
    that order and loads the saved run: with keras first, 'load'; with tfdml first,
    'keras alone' and then 'load'."""
    path, data = saved_run
    return {
        "import keras\nimport tfdml": _cases("import keras\nimport tfdml\n" + _LOAD.format(path=path, data=data)),
        "import tfdml\nimport keras": _cases("import tfdml\nimport keras\n" + _KERAS_ALONE.format(path=path)
                                             + _LOAD.format(path=path, data=data)),
    }


@pytest.mark.parametrize("imports", ["import keras\nimport tfdml", "import tfdml\nimport keras"])
def test_saved_model_loads_in_a_fresh_process_through_tfdml_load_model(loads, imports):
    assert loads[imports]("load") == [True, "tfdml.losses.margin", True, 1]


def test_keras_load_model_without_tfdml_load_model_names_the_missing_class(loads):
    """Keras alone does not know tfdml's classes after a bare ``import tfdml``: its error
    names the class (the guide says to load with :func:`tfdml.load_model`)."""
    error = loads["import tfdml\nimport keras"]("keras alone")
    assert error.startswith("TypeError") and "'EmbeddingModel'" in error, error


def test_every_loader_of_the_repository_goes_through_tfdml_load_model():
    """No code or doc of the repository calls Keras's loader but tfdml.load_model itself
    (and the test above, which shows what calling it directly does)."""
    keras_loader = re.compile(r"(saving|models)\.load_model\(|from keras\.(saving|models) import")
    found = set()
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith((".", "__pycache__", "build", "dist"))
                   and not d.endswith(".egg-info")]
        for name in (n for n in names if n.endswith((".py", ".md", ".yaml", ".cfg", ".toml"))):
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as fh:
                if any(keras_loader.search(line) for line in fh):
                    found.add(os.path.relpath(path, ROOT).replace(os.sep, "/"))
    assert found == {"tfdml/__init__.py"}
