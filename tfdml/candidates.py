"""What the anchors of a batch are mined and scored against: a :class:`Candidates` value.

A loss's anchors are the rows of its batch; its candidates are the columns of the
[B, M] matrices it mines (distances, pair masks, pair weights): the batch itself
(M = B), or the batch followed by a cross-batch memory's K rows (M = B + K,
:meth:`tfdml.memory.CrossBatchMemory.candidates`). :meth:`tfdml.losses.MetricLoss.call`
hands the value to ``compute`` and ``compute`` to the batch helpers, so that the loss
object itself never changes during a call.
"""

import collections

from tfdml import masks

Candidates = collections.namedtuple(
    "Candidates", ["embeddings", "labels", "mask", "importance_weights", "importance_denominator"],
    defaults=(None, None))
Candidates.__doc__ = """What a batch's anchors are mined against (an immutable value).

Fields:
  embeddings: [K, d] embeddings of the candidates after the batch's own (a memory's rows,
    no gradient), or None: the batch alone.
  labels: [M] labels of all candidates (the batch's first).
  mask: [B, M] bool, the candidate pairs (anchor, candidate).
  importance_weights: [B, M] importance weights W of the pairs against a memory
    (:func:`tfdml.importance.memory_pair_weights`), or None: the batch's own weights
    (:func:`tfdml.importance.pair_weights`), if any.
  importance_denominator: the fixed C that divides the weighted sum of those pairs' terms,
    or None: the loss's ``tuple_reduction``.
"""


def of_batch(targets):
    """The batch itself as its own candidates (M = B): its labels and
    :func:`tfdml.masks.candidate_mask`."""
    return Candidates(None, targets.label, masks.candidate_mask(targets.label, targets.pair_id))


def is_batch(candidates):
    """True when ``candidates`` is None or the batch alone (no rows after the batch's)."""
    return candidates is None or candidates.embeddings is None
