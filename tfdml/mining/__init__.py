"""Smart mining (Harwood et al., "Smart Mining for Deep Metric Learning", ICCV 2017): hard
negatives from the whole training split, through a nearest-neighbour index of its
embeddings refreshed as training goes.

* :func:`hard_negative_table` (:mod:`~tfdml.mining.table`): every example's k nearest
  neighbours of another class, from a :class:`tfdml.search.Index` (exact, HNSW or IVF);
* :class:`HardnessController` (:mod:`~tfdml.mining.controller`): the fraction of mined
  negatives, moved after each epoch from the observed loss;
* :class:`SmartMiningRefresh` (:mod:`~tfdml.mining.refresh`): the ``model.fit`` callback
  that refreshes the table and runs the controller.

What the paper says was read from its abstract and introduction and from summaries of it
(the text of its method section was not available when this was written): a nearest-neighbour
graph (FANNG) of the whole training set's embeddings, rebuilt as training goes, gives hard
triplets, and an adaptive controller adjusts the mining's hyper-parameters. No section or
equation numbers are cited for that reason; the controller's rule is this library's
(:mod:`~tfdml.mining.controller`).

The batches come from the data side's ``pipelines.designs.SmartMiningDesign``, whose
``neighbours`` and ``hard_fraction`` variables these parts write.
"""

from tfdml.mining.controller import HardnessController
from tfdml.mining.refresh import SmartMiningRefresh
from tfdml.mining.table import hard_negative_table

__all__ = ["HardnessController", "SmartMiningRefresh", "hard_negative_table"]
