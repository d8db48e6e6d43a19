"""The two-view design: every image of a batch twice, under independent random augmentation
(SimCLR, Chen et al. 2020 §2.1; the batches of SupCon, VICReg and Barlow Twins)."""

import numpy as np
import tensorflow as tf

from pipelines.designs.base import Design, DesignPlan
from pipelines.designs.checks import option_value, positive_int
from pipelines.designs.draws import permutation_blocks
from pipelines.view_augment import ViewTransform


class TwoViewDesign(Design):
    """N distinct images per batch, each twice: B = 2N rows.

    ``TwoViewDesign(images=N)`` or ``TwoViewDesign(batch_size=B)`` (N = B / 2). Each epoch
    is a fresh uniform permutation of the split's examples cut into blocks of N (the last
    N_all mod N examples of the permutation are dropped for that epoch), so every image
    appears at most once per epoch. Rows [0, N) are the first views of the block's images,
    rows [N, 2N) the second views, in the same order.

    Columns: ``label`` (the class, carried along for SupCon and for evaluation; the
    self-supervised losses do not read it), ``class_size`` and ``example_id``, the image's
    index in the split, equal for its two views: what the losses of two views
    (:mod:`tfdml.losses.views`) pair the rows by. No importance columns (``w_pos``,
    ``w_neg``): the pairs of two views of one image are not pairs of the split, so
    Hong et al.'s weights are not defined for them.

    The views differ only through the augmentation: :meth:`batches` applies a
    :class:`pipelines.view_augment.ViewTransform` (SimCLR's operations, each image drawn
    independently) unless it is given another ``transform``, which must draw each image's
    operations independently too.
    """

    name = "two_views"
    two_views = True
    config_aliases = {"n": "images"}
    config_options = {
        "n": {"default": 5, "min": 2, "doc": "distinct images per batch (images), each shown twice",
              "why": "one image has no other image to contrast with"},
    }

    def __init__(self, images=None, batch_size=None):
        if (images is None) == (batch_size is None):
            raise ValueError("Give exactly one of images and batch_size.")
        if batch_size is not None:
            batch_size = positive_int(batch_size, "batch_size", 4)
            if batch_size % 2:
                raise ValueError(f"batch_size={batch_size} is odd; a two-view batch holds each image twice, "
                                 "use an even size.")
            images = batch_size // 2
        self.images = option_value(self.config_options["n"], images, "images")
        self.batch_size = 2 * self.images

    def get_config(self):
        return {"images": self.images}

    def _plan(self, labels):
        plan = DesignPlan(labels, lambda sizes: np.ones_like(sizes, dtype=bool))
        if plan.num_examples < self.images:
            raise ValueError(
                f"images={self.images} distinct images per batch, but the split has {plan.num_examples}; "
                f"use images <= {plan.num_examples}."
            )
        return plan

    def batches_per_epoch(self, split_or_labels):
        """Batches in one pass over the split: floor(N_all / images)."""
        return self.validate(split_or_labels).num_examples // self.images

    def _chunks(self, plan, seed):
        examples = np.arange(len(plan.labels), dtype=np.int32)
        blocks = permutation_blocks(examples, self.images, plan.chunk, seed, salt=0x2F1E)
        return tf.data.Dataset.zip(tf.data.Dataset.counter(), blocks)

    def _draw(self, plan, consts, key, extra):
        return tf.concat([extra, extra], axis=1), None

    def batches(self, split, seed=0, transform=None, prefetch=True):
        """As :meth:`Design.batches`; ``transform=None`` gives each image SimCLR's
        augmentation at its own size (:class:`pipelines.view_augment.ViewTransform`)."""
        if transform is None:
            transform = ViewTransform()
        return super().batches(split, seed=seed, transform=transform, prefetch=prefetch)
