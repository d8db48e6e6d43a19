"""Fast forms of the counts behind every retrieval metric (:mod:`tfdml.metrics.retrieval`).

For a chunk of queries, every retrieval metric needs ``at_least[i, j]``: how
many gallery items other than query ``i`` score at least its ``j``-th positive
score. The reference (:func:`tfdml.metrics.retrieval.chunk_counts`, compiled by
XLA) scores the chunk, sets the query's own score to −∞ and finds each
positive score in the sorted score row. The forms here return the same
``(at_least, thresholds, num_positives)``:

* ``"counting"`` (:func:`at_least_by_counting`, compiled by XLA): no sort;
  the items scoring at least each positive score are counted by comparisons
  (:func:`tfdml.kernels.chosen.count_at_least`; on CPU one pass over the
  scores per group of thresholds, :mod:`tfdml.kernels.counting`), and the
  query's own score, rather than set to −∞ (one more pass over the scores),
  is compared with the thresholds and taken out of the counts. Its compile
  time grows with the number of positives.
* ``"sorting"`` (:func:`at_least_by_sorting`): scores and thresholds under
  XLA, then each score row sorted with NumPy and the thresholds found by
  binary search; its cost per row does not grow with the number of positives.
* ``"count_or_sort"``: ``"counting"`` or ``"sorting"`` by the size of the
  evaluation (:func:`count_or_sort`; its crossovers are the table's
  parameters, :data:`tfdml.kernels.CHOICES`).

The form is chosen on the host, once per evaluation, by :func:`chunk_counter`.
"""

import numpy as np
import tensorflow as tf

from tfdml import kernels, primitives
from tfdml.kernels import chosen


def count_or_sort(num_positives, num_pairs, max_positives, max_positives_large, large_from_pairs):
    """``"counting"`` for an evaluation whose largest class gives ``num_positives``
    positives per query, scoring ``num_pairs`` query–gallery pairs, when
    ``num_positives <= max_positives``, or ``<= max_positives_large`` with at
    least ``large_from_pairs`` pairs (counting is faster per call once compiled,
    but compiles for longer as the positives grow, which a small evaluation does
    not earn back; benchmarks/RESULTS.md, "Evaluation"); else ``"sorting"``."""
    if num_positives <= max_positives:
        return "counting"
    if num_positives <= max_positives_large and num_pairs >= large_from_pairs:
        return "counting"
    return "sorting"


def count_chunk(query, gallery, gallery_norms, pos_idx, self_index):
    """The ``"counting"`` form (see the module docstring). The positive indices never
    hold the query itself (:func:`tfdml.metrics.retrieval.positive_ranks`)."""
    s = primitives.scores(query, gallery, gallery_norms)
    thr, num_pos = primitives.positive_thresholds(s, pos_idx)
    at_least = chosen.count_at_least(s, thr)
    self_s = tf.gather(s, tf.maximum(self_index, 0)[:, None], batch_dims=1)
    self_counted = (self_s >= thr) & (self_index >= 0)[:, None]
    return at_least - tf.cast(self_counted, tf.int32), thr, num_pos


at_least_by_counting = tf.function(count_chunk, jit_compile=True, autograph=False)


def at_least_by_sorting(query, gallery, gallery_norms, pos_idx, self_index):
    """The ``"sorting"`` form (see the module docstring): NumPy int64 counts."""
    s, thr, num_pos = primitives.scores_and_thresholds_xla(query, gallery, gallery_norms, pos_idx, self_index)
    s, thr = s.numpy(), thr.numpy()
    s.sort(axis=1)
    at_least = np.empty(thr.shape, np.int64)
    for i in range(s.shape[0]):
        at_least[i] = s.shape[1] - np.searchsorted(s[i], thr[i], side="left")
    return at_least, thr, num_pos.numpy()


#: The forms by name (``"count_or_sort"`` picks one of them).
FORMS = {"counting": at_least_by_counting, "sorting": at_least_by_sorting}


def chunk_counter(num_positives, num_pairs, reference):
    """The function that counts each chunk of an evaluation whose largest class gives
    ``num_positives`` positives per query, scoring ``num_pairs`` query–gallery pairs: the
    form the table chooses for ``"positive_counts"`` (for ``"count_or_sort"``, the one
    :func:`count_or_sort` picks), or ``reference``: the metrics' reference counts, passed
    in (:mod:`tfdml.metrics.retrieval` imports this module), which never ask the table."""
    choice = kernels.choose("positive_counts")
    form = choice.form
    if form == "count_or_sort":
        form = count_or_sort(num_positives, num_pairs, **choice.params)
    return FORMS.get(form, reference)
