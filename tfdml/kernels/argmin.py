"""Fast form of :func:`tfdml.primitives.first_argmin` (the lowest index holding the minimum).

``one_pass``: ``tf.argmin``, a single (value, index) reduction. TensorFlow's CPU
kernel keeps the first of equal minima, which is the contract; its documentation
does not promise that on other devices, so only the CPU table chooses it, and only
in graph mode (XLA runs a (value, index) reduction element by element on CPU, slower
than the reference's two fused reductions).
"""

import tensorflow as tf

FORMS = ("one_pass",)


def one_pass(values, axis=-1, largest=False):
    """``tf.argmin(values, axis)`` (``tf.argmax`` with ``largest``) as int32."""
    if largest:
        return tf.argmax(values, axis=axis, output_type=tf.int32)
    return tf.argmin(values, axis=axis, output_type=tf.int32)
