"""The smart-mining design (Harwood et al., "Smart Mining for Deep Metric Learning", ICCV
2017): triplets whose negatives come from a table of each example's nearest neighbours of
another class in the whole training split, mixed with random negatives.

The table and the fraction of mined negatives are data the model side writes: the design
owns two variables, :attr:`SmartMiningDesign.neighbours` ([N_all, k] int32, −1 until the
first refresh) and :attr:`SmartMiningDesign.hard_fraction` (a float32 scalar), which
:class:`tfdml.mining.SmartMiningRefresh` assigns (the table from an index of the split's
embeddings, the fraction from :class:`tfdml.mining.HardnessController`). The batches read
them when they are drawn.
"""

import numpy as np
import tensorflow as tf

from pipelines.designs.base import Design, DesignPlan
from pipelines.designs.checks import option_value
from pipelines.designs.draws import uniform_below

__all__ = ["SmartMiningDesign"]


class SmartMiningDesign(Design):
    """Batches of n triplets (anchor, positive, negative): B = 3n rows.

    ``SmartMiningDesign(anchors=n, k=K, hard_fraction=p)`` or ``SmartMiningDesign(batch_size=B)``
    (n = B / 3). Rows [0, n) are the anchors, rows [n, 2n) their positives, rows [2n, 3n) their
    negatives, in the same order. Each triplet is drawn independently:

    * the anchor: a uniform example of the classes with at least two examples;
    * the positive: a uniform other example of the anchor's class;
    * the negative: with probability p (:attr:`hard_fraction`, read when the batch is drawn)
      a uniform one of the anchor's k mined neighbours (:attr:`neighbours`, the approximate
      nearest examples of another class from the last refresh); otherwise, or while the
      table is not filled yet (entries −1), a uniform example of another class.

    ``refresh_every``, ``step`` and ``approximate`` are the schedule the model side follows
    (:class:`tfdml.mining.SmartMiningRefresh`: epochs between refreshes, the controller's
    step, the index's approximate structure, None for exact search); the application builds
    that callback from them.

    The losses score every tuple of the batch as usual (a triplet loss with its sampler
    sees the mined negatives beside the anchors; the paper adds the global loss,
    :class:`tfdml.losses.GlobalLoss`, on the batch's distances); ``label`` keeps the classes.
    Mined positives are not drawn: which positives the paper mines is in its method
    section, which was not available (:mod:`tfdml.mining`). Columns:
    ``label``, ``class_size``, ``example_id``. No importance columns: the mined negatives'
    probability depends on the embedding, so Hong et al.'s weights (a known design Q) are
    not defined for them.

    Under ``tf.distribute`` the batches are drawn on the host by one input pipeline and split
    among the replicas; the table is a host variable the pipeline reads, not per-replica
    state, so every replica's rows come from the same table.

    tf.data draws batches ahead of the training step (prefetch): a refresh reaches the
    batches drawn after it, a few steps later than the step it happens at.
    """

    name = "smart_mining"
    mined_table = True
    config_aliases = {"n": "anchors"}
    config_options = {
        "n": {"default": 16, "min": 2, "doc": "triplets per batch (anchors), each anchor, positive "
              "and negative a row", "why": "a batch needs two anchors to mix mined and random negatives"},
        "k": {"default": 10, "min": 1, "doc": "mined neighbours of another class kept per example",
              "why": "the table holds at least one neighbour"},
        "hard_fraction": {"default": 0.5, "between": (0.0, 1.0),
                          "doc": "initial probability that a negative is a mined one (the controller "
                                 "changes it)", "why": "a probability; 0 or 1 leave nothing to control"},
        "refresh_every": {"default": 1, "min": 1, "doc": "epochs between refreshes of the table",
                          "why": "a count of epochs"},
        "step": {"default": 0.05, "between": (0.0, 1.0),
                 "doc": "the controller's change of hard_fraction after an epoch",
                 "why": "a change of a probability"},
    }
    #: The ``approximate=`` choices of the index searched (None: exact search).
    approximate_choices = (None, "hnsw", "ivf")

    def __init__(self, anchors=None, k=10, hard_fraction=0.5, refresh_every=1, step=0.05,
                 approximate=None, batch_size=None):
        if (anchors is None) == (batch_size is None):
            raise ValueError("Give exactly one of anchors and batch_size.")
        if batch_size is not None:
            if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                    or batch_size % 3 or batch_size < 6:
                raise ValueError(f"batch_size={batch_size!r}: a smart-mining batch holds triplets, "
                                 "use a multiple of 3 of at least 6.")
            anchors = int(batch_size) // 3
        self.anchors = option_value(self.config_options["n"], anchors, "anchors")
        self.k = option_value(self.config_options["k"], k, "k")
        self.initial_hard_fraction = option_value(self.config_options["hard_fraction"],
                                                  hard_fraction, "hard_fraction")
        self.refresh_every = option_value(self.config_options["refresh_every"], refresh_every,
                                          "refresh_every")
        self.step = option_value(self.config_options["step"], step, "step")
        if approximate not in self.approximate_choices:
            raise ValueError(f"approximate={approximate!r}: choose one of "
                             f"{', '.join(map(repr, self.approximate_choices))} (None: exact search).")
        self.approximate = approximate
        self.batch_size = 3 * self.anchors
        self.neighbours = None
        self.hard_fraction = None

    def get_config(self):
        return {"anchors": self.anchors, "k": self.k, "hard_fraction": self.initial_hard_fraction,
                "refresh_every": self.refresh_every, "step": self.step, "approximate": self.approximate}

    def _plan(self, labels):
        plan = DesignPlan(labels, lambda sizes: sizes >= 2)
        if plan.num_classes == 0:
            raise ValueError("The smart-mining design needs a class with at least 2 examples (an "
                             "anchor and its positive); every class of the split has one example.")
        if len(plan.sizes) < 2:
            raise ValueError("The smart-mining design needs at least 2 classes for negatives; the "
                             "split has 1.")
        others = len(labels) - int(plan.sizes.max())
        if self.k > others:
            raise ValueError(f"k={self.k} mined neighbours of another class, but the largest class "
                             f"leaves {others} examples of other classes; use k <= {others}.")
        rank = np.empty(len(labels), np.int32)
        rank[plan.order] = np.arange(len(labels), dtype=np.int32) - plan.offsets[plan.dense[plan.order]]
        plan.rank = rank
        plan.anchor_pool = plan.order[np.isin(plan.dense[plan.order], plan.eligible)]
        self._make_state(len(labels))
        return plan

    def _make_state(self, count):
        """The table and the fraction the model side assigns, made once for a split of
        ``count`` examples (a later split of another size is refused)."""
        if self.neighbours is not None:
            if int(self.neighbours.shape[0]) != count:
                raise ValueError(
                    f"This SmartMiningDesign's table is sized for {int(self.neighbours.shape[0])} "
                    f"examples; the split has {count}. Use one design per training split.")
            return
        with tf.device("/cpu:0"):
            self.neighbours = tf.Variable(tf.fill([count, self.k], -1), trainable=False,
                                          name="smart_mining_neighbours")
            self.hard_fraction = tf.Variable(self.initial_hard_fraction, dtype=tf.float32,
                                             trainable=False, name="smart_mining_hard_fraction")

    def _draw(self, plan, consts, key, extra):
        shape = [plan.chunk, self.anchors]
        u = tf.random.stateless_uniform([5] + shape, key, dtype=tf.float64)
        pool = tf.constant(plan.anchor_pool)
        rank = tf.constant(plan.rank)
        dense = tf.constant(plan.dense)
        sizes, offsets, order = consts["sizes"], consts["offsets"], consts["order"]
        anchor = tf.gather(pool, uniform_below(u[0], len(plan.anchor_pool)))
        cls = tf.gather(dense, anchor)
        n_c, start = tf.gather(sizes, cls), tf.gather(offsets, cls)
        # Positive: uniform among the class's other examples (skip the anchor's own rank).
        b = uniform_below(u[1], n_c - 1)
        b = b + tf.cast(b >= tf.gather(rank, anchor), tf.int32)
        positive = tf.gather(order, start + b)
        # Random negative: uniform among the positions of ``order`` outside the anchor's class.
        r = uniform_below(u[2], len(plan.labels) - n_c)
        random_negative = tf.gather(order, r + tf.cast(r >= start, tf.int32) * n_c)
        mined = tf.gather(tf.gather(self.neighbours, anchor), uniform_below(u[3], self.k), batch_dims=2)
        use_mined = (u[4] < tf.cast(self.hard_fraction.read_value(), tf.float64)) & (mined >= 0)
        negative = tf.where(use_mined, mined, random_negative)
        return tf.concat([anchor, positive, negative], axis=1), None
