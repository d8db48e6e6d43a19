"""Shared test set-up: quiet TensorFlow, deterministic seeds."""

import gc
import os
import weakref

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
# XLA compiles for the suite without its slow backend optimisations and with its CPU
# backend's older, faster-compiling fusion code generator: the tests check what
# computations return (these settings change it by float rounding at most, which the
# tolerances allow), and most of the suite's XLA time is compilation. Subprocesses
# the tests start inherit it. `XLA_FLAGS= pytest` runs the suite at XLA's defaults.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true "
                                   "--xla_cpu_use_fusion_emitters=false")

import keras  # noqa: E402
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

# The kernels table's entries that need CPU instruction-set flags (bfloat16 compute under
# model.dtype_policy "auto") are chosen in this process as on a CPU without any, whatever
# CPU runs the suite, so no test's path depends on the machine; the tests of those entries
# give the flags they need with monkeypatch. Subprocesses the tests start see the real CPU.
from tfdml import kernels as _kernels  # noqa: E402

_kernels.cpu_features = lambda: frozenset()


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


class NonFiniteAfter(keras.layers.Layer):
    """Test layer: passes its input through, except that from the training call
    number ``after + 1`` on, row 0 of its output is NaN (``value``).

    NaN is written into the output directly, so the tests of the NaN guard do
    not depend on whether the CPU's kernels propagate a NaN input through the
    network (oneDNN's max and ReLU may not).
    """

    def __init__(self, after=0, value=float("nan"), **kwargs):
        super().__init__(**kwargs)
        self.after = after
        self.value = value
        self.calls = self.add_weight(shape=(), initializer="zeros", trainable=False, name="calls")

    def call(self, x, training=False):
        if not training:
            return x
        self.calls.assign_add(1.0)
        row = tf.range(tf.shape(x)[0])[:, None] == 0
        poisoned = tf.where(row, tf.constant(self.value, x.dtype), x)
        return tf.where(self.calls > self.after, poisoned, x)


@pytest.fixture
def nonfinite_after():
    """The :class:`NonFiniteAfter` test layer class."""
    return NonFiniteAfter


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``slow`` unless TFDML_SLOW=1 (CI runs the short versions)."""
    if os.environ.get("TFDML_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set TFDML_SLOW=1 to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


# tf.data input iterators a test left in reference cycles (a fit or a loop that raised keeps
# its suspended generator, and the iterator in it, alive until a garbage collection) are
# collected when the test ends (EmbeddingModel.fit releases its own; a plain Keras model or a
# custom loop does not). Destroying such an iterator waits for its autotuning thread, the
# longer the longer it lay uncollected; left to a later full collection, the wait lands,
# grown, in whichever test triggers it.
_DATA_ITERATORS = weakref.WeakSet()


def _track_data_iterators():
    from tensorflow.python.data.ops import iterator_ops, multi_device_iterator_ops

    for cls in (iterator_ops.OwnedIterator, multi_device_iterator_ops.OwnedMultiDeviceIterator):
        def __init__(self, *args, init=cls.__init__, **kwargs):
            init(self, *args, **kwargs)
            _DATA_ITERATORS.add(self)

        cls.__init__ = __init__


_track_data_iterators()


@pytest.fixture(autouse=True)
def _collect_data_iterators_left_in_cycles():
    before = set(map(id, _DATA_ITERATORS))
    yield
    if any(id(it) not in before for it in list(_DATA_ITERATORS)):
        gc.collect()
