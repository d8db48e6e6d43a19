"""Fast forms of :func:`tfdml.samplers.distance_weighted.draw_negatives`: the negatives
of only the valid slots are searched, where the reference path searches every slot of
the [B, M] grid (B anchors, M candidates). Both return the same [B, M] int32 (0
outside the valid slots).

* ``valid_slots``: the valid slots listed by ``tf.where`` (a shape known at run time:
  graph mode and eagerly only) and their draws scattered back;
* ``listed_slots``: fixed shapes, for XLA (below).
"""

import tensorflow as tf

from tfdml import kernels, primitives, xla
from tfdml.kernels import chosen

FORMS = ("valid_slots", "listed_slots")


def draw_negatives(cdf, last, uniform, valid, draw, reference):
    """[B, M] int32, the negative of every valid slot, in the form the table chooses for
    ``"distance_weighted"`` (:func:`valid_slots` outside XLA only, :func:`listed_slots`),
    or ``reference(cdf, last, uniform, valid)``: the sampler's reference path, passed in
    with its ``draw`` (the sampler imports this module), which never asks the table."""
    choice = kernels.choose("distance_weighted")
    if choice.form == "valid_slots" and not xla.is_compiling():
        return valid_slots(cdf, last, uniform, valid, draw)
    if choice.form == "listed_slots":
        return listed_slots(cdf, last, uniform, valid, draw, **choice.params)
    return reference(cdf, last, uniform, valid)


def valid_slots(cdf, last, uniform, valid, draw):
    """Only the valid slots, compacted by ``tf.where``; not for XLA. ``draw``: the sampler's
    inverse-CDF draw (:func:`tfdml.samplers.distance_weighted.draw`, passed in: that module
    imports this one)."""
    slots = tf.cast(tf.where(valid, name="valid_slots"), tf.int32)
    drawn = draw(cdf, last, tf.gather_nd(uniform, slots), slots[:, 0])
    return tf.scatter_nd(slots, drawn, tf.shape(valid))


def listed_slots(cdf, last, uniform, valid, draw, width):
    """Fixed shapes (XLA): when no anchor has more than ``width`` valid slots (with
    ``width`` = 16, m-per-class batches with m ≤ 17), each anchor's valid slots are
    listed in [B, width] and only those are searched, then written back to their
    columns; otherwise every slot of the grid is searched. ``draw`` as for
    :func:`valid_slots`."""
    size = tf.shape(cdf)[0]
    rows = tf.broadcast_to(tf.range(size)[:, None], tf.shape(valid))
    column, count = chosen.row_columns(valid, width)

    def every_slot():
        return tf.where(valid, draw(cdf, last, uniform, rows), 0)

    def only_listed():
        listed = tf.range(width)[None, :] < count[:, None]
        anchor = tf.broadcast_to(tf.range(size)[:, None], tf.shape(column))
        drawn = tf.where(listed, draw(cdf, last, primitives.gather_rows(uniform, column), anchor), 0)
        # Unlisted slots point at column N − 1 with value 0; a maximum keeps a listed one there.
        return tf.tensor_scatter_nd_max(tf.zeros_like(rows), tf.stack([anchor, column], axis=-1), drawn)

    return tf.cond(tf.reduce_max(count) <= width, only_listed, every_slot)
