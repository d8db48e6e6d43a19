"""``import tfdml``: the config side loads without TensorFlow; with Keras, all
of tfdml loads and registers its serialisable classes, as it always did."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_CHECK = """
import sys
sys.path.insert(0, {root!r})
{imports}
import keras
import tfdml
print("registered:", keras.saving.get_registered_object("tfdml>EmbeddingModel") is tfdml.models.EmbeddingModel,
      keras.saving.get_registered_object("tfdml>MarginLoss") is tfdml.losses.MarginLoss)
"""


def _run(imports):
    proc = subprocess.run([sys.executable, "-c", _CHECK.format(root=ROOT, imports=imports)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_config_loads_without_tensorflow_and_keras_then_finds_tfdml():
    out = _run("import tfdml, tfdml_app.config, tfdml.files\n"
               "from tfdml_app.config import validate\n"
               "print('tensorflow imported:', 'tensorflow' in sys.modules)")
    assert "tensorflow imported: False" in out and "registered: True True" in out


def test_importing_one_submodule_registers_all():
    assert "registered: True True" in _run("import tfdml.losses")


_HEAVY = ("matplotlib", "sklearn", "scipy", "yaml")


def _fresh(code):
    proc = subprocess.run([sys.executable, "-c", f"import sys\nsys.path.insert(0, {ROOT!r})\n{code}"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_import_tfdml_imports_no_tensorflow_and_no_heavy_dependency():
    out = _fresh(f"import tfdml\nprint(sorted(m for m in {_HEAVY + ('tensorflow', 'keras')!r} if m in sys.modules))")
    assert out.strip() == "[]"


def test_tfdml_loads_with_keras_without_matplotlib_sklearn_or_yaml():
    """Keras itself imports matplotlib and scikit-learn when they are installed, so
    they are made unimportable here: tfdml's Keras side loads and registers its classes
    without them (config, plots and the metrics that need them import them on use)."""
    out = _fresh("for m in ('matplotlib', 'sklearn', 'yaml'):\n    sys.modules[m] = None\n"
                 "import tfdml, keras\n"
                 "print(keras.saving.get_registered_object('tfdml>MarginLoss') is tfdml.losses.MarginLoss,\n"
                 "      all(f'tfdml.{n}' in sys.modules for n in tfdml._SUBMODULES))")
    assert out.split() == ["True", "True"]


def test_tfdml_with_keras_imports_no_yaml_or_matplotlib_beyond_keras():
    """In one fresh process: the heavy modules loaded by Keras alone, then after tfdml."""
    heavy = f"print(sorted(m for m in {_HEAVY!r} if m in sys.modules))"
    keras_alone, with_tfdml = _fresh(f"import keras\n{heavy}\nimport tfdml\nimport tfdml.losses\n{heavy}").splitlines()
    assert with_tfdml == keras_alone and "yaml" not in with_tfdml
