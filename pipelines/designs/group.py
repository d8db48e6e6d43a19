"""The (m, n)-group design (Hong §4.2) and the m-per-class design (FaceNet batches with
balanced classes), which share their checks and the weights of Hong Eq. 25."""

import logging

import numpy as np
import tensorflow as tf

from pipelines.designs.base import Design, DesignPlan
from pipelines.designs.checks import option_value, split_batch_arg
from pipelines.designs.draws import distinct_uniform, draw_m_per_class, permutation_blocks

log = logging.getLogger(__name__)

_WARNED = set()


def warn_left_out(plan, m, design):
    """Log (once per design and label set) how many classes a group design leaves out."""
    left = len(plan.sizes) - plan.num_classes
    key = (design, len(plan.labels), len(plan.sizes), left)
    if left and key not in _WARNED:
        _WARNED.add(key)
        log.warning(
            "%s: %d of %d classes have fewer than m=%d examples and are left out of the design "
            "(the weights use the remaining N=%d examples, L=%d classes).",
            design, left, len(plan.sizes), m, plan.num_examples, plan.num_classes,
        )


def group_weights(plan, m, n):
    """Hong Eq. 25 (normalising constant 1): (w_pos, w_neg)."""
    big_n, big_l = plan.num_examples, plan.num_classes
    pairs = big_n * (big_n - 1.0)
    w_pos = big_l * (m * n - 1.0) / ((m - 1.0) * pairs)
    w_neg = big_l * (big_l - 1.0) * (m * n - 1.0) / (m * (n - 1.0) * pairs)
    return w_pos, w_neg



def group_plan(labels, m, n, design):
    """Checks and Eq. 25 weights shared by the group and m-per-class designs."""
    plan = DesignPlan(labels, lambda sizes: sizes >= m)
    largest = int(plan.sizes.max())
    if largest < m:
        raise ValueError(
            f"m={m} is larger than every class (the largest has {largest} examples); "
            f"use m <= {largest}."
        )
    if plan.num_classes < n:
        if plan.num_classes >= 2:
            fix = f"use n <= {plan.num_classes} or a smaller m"
        else:  # n >= 2 always: only a smaller m lets a second class in
            second = int(np.sort(plan.sizes)[-2]) if len(plan.sizes) > 1 else 0
            fix = (f"use m <= {second} so that two classes qualify" if second >= 2
                   else "the split needs two classes with at least two examples each")
        raise ValueError(
            f"n={n} classes per batch, but only {plan.num_classes} classes have at least m={m} "
            f"examples; {fix}."
        )
    warn_left_out(plan, m, design)
    plan.w_pos, plan.w_neg = group_weights(plan, m, n)
    sizes = plan.sizes[plan.eligible].astype(np.float64)
    triplets = float(np.sum(sizes * (sizes - 1.0) * (plan.num_examples - sizes)))
    # W_apn = w_triplet·N_a(N_a−1)·N_n (derivation: tfdml.importance).
    plan.w_triplet = plan.num_classes * (plan.num_classes - 1.0) / triplets
    return plan



#: The ``m`` of the group and m-per-class designs' ``config_options``.
M_OPTION = {"default": 8, "min": 2, "doc": "examples per class",
            "why": "a class needs two examples in a batch to give a positive pair"}


class GroupDesign(Design):
    """Hong §4.2 (m, n)-group design: n classes, m examples each, all ordered pairs.

    ``GroupDesign(m, n)`` or ``GroupDesign(m, batch_size=B)`` (n = B / m).
    Needs m ≥ 2 and n ≥ 2 (Eq. 9 / 25 divide by m−1 and n−1). Classes with
    fewer than m examples are left out (see the module docstring). Columns:
    label, class_size, w_pos, w_neg (Eq. 25), example_id, w_triplet and
    w_memory (the memory pairs' constant N(N−1)·(mn/L)², see the module
    docstring: batches are drawn independently). The batch is grouped by
    class: rows [k·m, (k+1)·m) share a class.
    """

    name = "group"
    grouped_by_class = True
    independent_batches = True
    config_options = {
        "m": M_OPTION,
        "n": {"default": 5, "min": 2, "doc": "classes per batch",
              "why": "a batch needs two classes to give negative pairs, Eq. 25 divides by n-1"},
    }

    def __init__(self, m, n=None, batch_size=None):
        self.m = option_value(self.config_options["m"], m, "m")
        n = split_batch_arg(self.m, n, batch_size, "n")
        self.n = option_value(self.config_options["n"], n, "n")
        self.batch_size = self.m * self.n

    def get_config(self):
        return {"m": self.m, "n": self.n}

    def _plan(self, labels):
        plan = group_plan(labels, self.m, self.n, repr(self))
        inclusion = self.batch_size / plan.num_classes  # π_i·N_i (module docstring)
        plan.w_memory = plan.num_examples * (plan.num_examples - 1.0) * inclusion ** 2
        return plan

    def _draw(self, plan, consts, key, extra):
        k_class, k_example = tf.unstack(tf.random.experimental.stateless_split(key, 2))
        pick = distinct_uniform(k_class, plan.chunk, plan.num_classes, self.n)
        classes = tf.gather(consts["eligible"], pick)
        return draw_m_per_class(plan, consts, k_example, classes, self.m), None


class MPerClassDesign(Design):
    """FaceNet / balanced-classes batches: classes without replacement across an epoch.

    ``MPerClassDesign(m, classes_per_batch)`` or ``MPerClassDesign(m,
    batch_size=B)``. Each epoch is a fresh uniform permutation of the
    eligible classes (N_c ≥ m), independent of the previous epochs; its first
    ``floor(L / classes_per_batch) · classes_per_batch`` classes are cut into
    ``floor(L / classes_per_batch)`` blocks, one per batch, and the last
    ``L mod classes_per_batch`` classes of the permutation are dropped for that
    epoch (not carried over to the next one). So every class appears at most
    once per epoch, and in a given epoch with the same probability
    ``floor(L / n) · n / L`` (n = classes_per_batch) as any other class.
    Examples: m per class without replacement. Weights: Eq. 25 with
    n = classes_per_batch (exact; see the module docstring).
    """

    name = "m_per_class"
    grouped_by_class = True
    config_aliases = {"n": "classes_per_batch"}
    config_options = {
        "m": M_OPTION,
        "n": {"default": 5, "min": 2, "doc": "classes per batch (classes_per_batch)",
              "why": "a batch needs two classes to give negative pairs"},
    }

    def __init__(self, m, classes_per_batch=None, batch_size=None):
        self.m = option_value(self.config_options["m"], m, "m")
        n = split_batch_arg(self.m, classes_per_batch, batch_size, "classes_per_batch")
        self.classes_per_batch = option_value(self.config_options["n"], n, "classes_per_batch")
        self.batch_size = self.m * self.classes_per_batch

    def get_config(self):
        return {"m": self.m, "classes_per_batch": self.classes_per_batch}

    def _plan(self, labels):
        # Same constraints and weights as the (m, n)-group design.
        return group_plan(labels, self.m, self.classes_per_batch, repr(self))

    def batches_per_epoch(self, split_or_labels):
        """Batches in one pass over the (eligible) classes: floor(L / classes_per_batch)."""
        return self.validate(split_or_labels).num_classes // self.classes_per_batch

    def _chunks(self, plan, seed):
        blocks = permutation_blocks(plan.eligible, self.classes_per_batch, plan.chunk, seed, salt=0xE90C)
        return tf.data.Dataset.zip(tf.data.Dataset.counter(), blocks)

    def _draw(self, plan, consts, key, extra):
        return draw_m_per_class(plan, consts, key, extra, self.m), None

