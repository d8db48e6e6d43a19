"""The p-random design (Hong §4.1): independent positive and negative pairs."""

import numpy as np
import tensorflow as tf

from pipelines.designs.base import Design, DesignPlan
from pipelines.designs.checks import option_value, positive_int
from pipelines.designs.draws import uniform_below


class PRandomDesign(Design):
    """Hong §4.1 p-random design: independent positive (prob. p) / negative pairs.

    ``PRandomDesign(p, pairs)`` or ``PRandomDesign(p, batch_size=B)`` (pairs =
    B / 2). Rows 2k and 2k+1 hold pair k (``pair_id`` = k); the pair is
    ordered (first, second) as drawn. Classes with one example are left out
    of the positive class draw (w_pos uses L⁺, see the module docstring).
    Columns: label, class_size, w_pos, w_neg (Eq. 24), pair_id, example_id.
    """

    name = "p_random"
    pairs_only = True
    config_options = {
        "p": {"default": 0.5, "between": (0.0, 1.0), "doc": "probability of a positive pair",
              "why": "Eq. 24 divides by p and 1-p"},
        "pairs": {"default": 32, "min": 1, "doc": "pairs per batch", "why": "a batch holds pairs"},
    }

    def __init__(self, p=0.5, pairs=None, batch_size=None):
        self.p = option_value(self.config_options["p"], p, "p")
        if (pairs is None) == (batch_size is None):
            raise ValueError("Give exactly one of pairs and batch_size.")
        if batch_size is not None:
            batch_size = positive_int(batch_size, "batch_size", 2)
            if batch_size % 2:
                raise ValueError(f"batch_size={batch_size} is odd; a p-random batch holds pairs, use an even size.")
            pairs = batch_size // 2
        self.pairs = option_value(self.config_options["pairs"], pairs, "pairs")
        self.batch_size = 2 * self.pairs

    def get_config(self):
        return {"p": self.p, "pairs": self.pairs}

    def _plan(self, labels):
        plan = DesignPlan(labels, lambda sizes: np.ones_like(sizes, dtype=bool))
        plan.positive = np.flatnonzero(plan.sizes >= 2).astype(np.int32)
        if len(plan.sizes) < 2:
            raise ValueError(
                "The p-random design needs at least 2 classes for negative pairs; the split has "
                f"{len(plan.sizes)}."
            )
        if len(plan.positive) == 0:
            raise ValueError(
                "The p-random design needs a class with at least 2 examples for positive pairs; "
                "every class of the split has one example."
            )
        big_n, big_l, l_pos = plan.num_examples, plan.num_classes, len(plan.positive)
        pairs = big_n * (big_n - 1.0)
        plan.w_pos = l_pos / (self.p * pairs)
        plan.w_neg = big_l * (big_l - 1.0) / ((1.0 - self.p) * pairs)
        return plan

    def _draw(self, plan, consts, key, extra):
        count = self.pairs
        positive_classes = tf.constant(plan.positive)
        u = tf.random.stateless_uniform([8, plan.chunk, count], key, dtype=tf.float64)

        below = uniform_below
        sizes, offsets, order = consts["sizes"], consts["offsets"], consts["order"]
        # Positive: uniform class among those with >= 2 examples, ordered pair of distinct examples.
        pc = tf.gather(positive_classes, below(u[0], len(plan.positive)))
        n_pc = tf.gather(sizes, pc)
        a = below(u[1], n_pc)
        b = below(u[2], n_pc - 1)
        b = b + tf.cast(b >= a, tf.int32)
        pos_first = tf.gather(offsets, pc) + a
        pos_second = tf.gather(offsets, pc) + b
        # Negative: ordered pair of distinct uniform classes, one uniform example each.
        num_classes = len(plan.sizes)
        c1 = below(u[3], num_classes)
        c2 = below(u[4], num_classes - 1)
        c2 = c2 + tf.cast(c2 >= c1, tf.int32)
        neg_first = tf.gather(offsets, c1) + below(u[5], tf.gather(sizes, c1))
        neg_second = tf.gather(offsets, c2) + below(u[6], tf.gather(sizes, c2))
        is_positive = u[7] < self.p
        first = tf.gather(order, tf.where(is_positive, pos_first, neg_first))
        second = tf.gather(order, tf.where(is_positive, pos_second, neg_second))
        example_id = tf.reshape(tf.stack([first, second], axis=-1), [plan.chunk, 2 * count])
        pair_id = tf.tile(tf.repeat(tf.range(count, dtype=tf.int32), 2)[None, :], [plan.chunk, 1])
        return example_id, pair_id

