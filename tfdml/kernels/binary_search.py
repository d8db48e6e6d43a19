"""Fast form of :func:`tfdml.primitives.count_less_equal` (binary lifting over sorted rows).

The reference path (its ``unroll`` left None) runs the ⌈log2(N + 1)⌉ lifting steps in a ``tf.while_loop``: one
step body, compiled once under XLA (each written-out step would compile to fused
loops of its own, and XLA on CPU spends a large part of the first call compiling
them). ``unrolled``: the same steps written out at trace time when N is static, so
TensorFlow's graph executor runs them without a loop frame per step (graph mode on CPU).
Both run the same steps on the same values, so they give the same counts.
"""

FORMS = ("unrolled",)


def unrolled(lift, count, top):
    """``count`` after ``lift(count, step)`` for step = ``top``, ``top`` / 2, …, 1
    (``top`` a Python int: the largest power of two <= N, or 0)."""
    step = top
    while step >= 1:
        count = lift(count, step)
        step //= 2
    return count
