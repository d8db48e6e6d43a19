"""Smart mining (Harwood et al., "Smart Mining for Deep Metric Learning", ICCV 2017): hard
negatives from the whole training split, through a nearest-neighbour index of its
embeddings refreshed as training goes.

* :func:`hard_negative_table` (:mod:`~tfdml.mining.table`): every example's k nearest
  neighbours of another class, from a :class:`tfdml.search.Index` (exact, HNSW or IVF);
* :class:`HardnessController` (:mod:`~tfdml.mining.controller`): the fraction of mined
  negatives, moved after each epoch from the observed loss;
* :class:`SmartMiningRefresh` (:mod:`~tfdml.mining.refresh`): the ``model.fit`` callback
  that refreshes the table and runs the controller.

What this follows of the paper, and from where: its abstract, introduction and Fig. 1 caption
(the text available to this library's authors; its method section, with the equations of the
mining and of the controller, was not) say that a nearest-neighbour graph (FANNG) of the whole
training set's embeddings, rebuilt as training goes, supplies hard triplets; that the loss
combines a triplet loss with a global loss on the embedding's distance distributions
(:class:`tfdml.losses.GlobalLoss`, Kumar B G et al. 2016); and that an adaptive controller
adjusts the mining's hyper-parameters. No section or equation numbers are cited for that
reason. What the paper does not say in those parts is this library's choice, each stated where
it is made: the k nearest neighbours of another class per example (no mined positives), their
mix with random negatives through one probability, a refresh every ``refresh_every`` epochs,
and the controller's rule (:mod:`~tfdml.mining.controller`).

The batches come from the data side's ``pipelines.designs.SmartMiningDesign``, whose
``neighbours`` and ``hard_fraction`` variables these parts write.
"""

from tfdml.mining.controller import HardnessController
from tfdml.mining.refresh import SmartMiningRefresh
from tfdml.mining.table import hard_negative_table

__all__ = ["HardnessController", "SmartMiningRefresh", "hard_negative_table"]
