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
