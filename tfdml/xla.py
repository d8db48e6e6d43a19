"""Whether the ops being built will be compiled by XLA.

Some computations have a fast form in each mode: XLA needs fixed shapes and
fuses elementwise work into its reductions, while TensorFlow's graph kernels
handle data-dependent shapes and run an arg-min as one pass. A sampler or
loss asks :func:`is_compiling` at trace time (:func:`tfdml.kernels.choose`
asks it for the table's mode) and builds the form that suits the mode; both
forms give the same selection and the same loss.
"""

try:  # TensorFlow's own test for this (tf.function wraps XLA tracing in an XLA context)
    from tensorflow.python.framework import ops as _ops
    from tensorflow.python.ops import control_flow_util as _control_flow_util
except ImportError:  # pragma: no cover - a future TensorFlow without these modules
    _control_flow_util = None


def is_compiling():
    """True while tracing for XLA: inside ``tf.function(jit_compile=True)`` (also nested,
    and Keras' ``jit_compile=True``), False in graph mode without XLA and eagerly.

    Uses TensorFlow's internal test (the one ``tf.function`` uses to nest XLA
    functions). Should a TensorFlow version lack it, this answers True: the
    fixed-shape forms are correct in every mode, only slower in graph mode."""
    if _control_flow_util is None:  # pragma: no cover
        return True
    return bool(_control_flow_util.GraphOrParentsInXlaContext(_ops.get_default_graph()))


def opaque_to_constant_analysis(*tensors):
    """The same ``tensors``, through a ``tf.while_loop`` that runs zero times.

    Before a ``tf.switch_case`` under XLA: tf2xla looks for compile-time constants among
    the values a case captures by interpreting all the HLO upstream of each of them,
    element by element (``xla::ValueInference``, from ``XlaCaseOp``); behind a distance
    matrix that is matrix products run by an interpreter, seconds of a first call. The
    analysis stops at a loop, and XLA's optimizer removes a loop that never runs, so the
    compiled program is the one without it (tested on the optimized HLO)."""
    import tensorflow as tf

    if not tensors:
        return ()
    out = tf.while_loop(lambda i, *_: i < 0, lambda i, *values: (i + 1, *values),
                        (tf.constant(0, tf.int32), *tensors))
    return tuple(out[1:])
