"""Shared test set-up: quiet TensorFlow, deterministic seeds."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

# Two logical CPU devices for the whole session, so distribution tests can run
# MirroredStrategy on one machine; this must happen before TensorFlow
# initialises its devices, hence here and not in a fixture.
_cpus = tf.config.list_physical_devices("CPU")
if _cpus:
    tf.config.set_logical_device_configuration(
        _cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2
    )
LOGICAL_CPUS = ["/cpu:0", "/cpu:1"]


@pytest.fixture
def logical_cpus():
    """Names of the two logical CPU devices (for MirroredStrategy tests)."""
    return LOGICAL_CPUS


@pytest.fixture(scope="session")
def mirrored_strategy():
    """One MirroredStrategy over the two logical CPUs, shared by the session.

    Several MirroredStrategy objects in one process can reuse collective
    instance keys and abort each other's all-reduces; share this one.
    """
    return tf.distribute.MirroredStrategy(LOGICAL_CPUS)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``slow`` unless TFDML_SLOW=1 (CI runs the short versions)."""
    if os.environ.get("TFDML_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set TFDML_SLOW=1 to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
