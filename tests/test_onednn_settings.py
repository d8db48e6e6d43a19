"""The NaN tests under the other oneDNN setting.

Whether a NaN survives a network depends on the CPU's kernels: TensorFlow's
oneDNN kernels (``TF_ENABLE_ONEDNN_OPTS``, on by default on x86) may turn a
NaN into a finite number in a max or a ReLU, the plain Eigen kernels do not.
Main once went red on a fresh machine because a test passed with one setting
only. The suite runs with whatever the machine sets; this test
reruns the tests of non-finite inputs, embeddings and the guard in a
subprocess with the other setting, so that both are covered on every run.
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

NAN_TESTS = [
    "tests/test_train.py::test_nonfinite_input_is_refused_at_the_source",
    "tests/test_train.py::test_nonfinite_embeddings_stop_with_step_and_checkpoint",
    "tests/test_train.py::test_nonfinite_embeddings_at_the_first_step",
    "tests/tfdml/test_models.py::test_nonfinite_embeddings_are_reported_even_when_the_loss_hides_them",
    "tests/pipelines/test_pipeline_sources.py::test_arrays_source_refuses_nonfinite_features_naming_the_rows",
]


def test_nan_tests_pass_with_the_other_onednn_setting():
    current = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1")  # unset means on (x86)
    other = "0" if current != "0" else "1"
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": other, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", *NAN_TESTS],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, f"TF_ENABLE_ONEDNN_OPTS={other}:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
    assert " passed" in proc.stdout and "failed" not in proc.stdout
