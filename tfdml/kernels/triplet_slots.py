"""Forms in which a triplet loss holds a grid selection (the table's ``"triplet_slots"``).

The reference path computes on all B·M slots of the grid, weighted by 0 where not valid. Both
forms compute on the same valid triplets, so the loss is the same:

* ``valid_slots``: the valid slots alone (:func:`tfdml.samplers.base.valid_triplets`,
  a shape known at run time: graph mode and eagerly only; under XLA the reference runs);
* ``listed_slots``: up to ``width`` valid slots per anchor, fixed shapes
  (:func:`tfdml.samplers.base.compact_grid`), the whole grid when an anchor has more.

The helpers live in :mod:`tfdml.samplers.base` beside the selections they read; the
table is asked in :mod:`tfdml.kernels.chosen` (:func:`~tfdml.kernels.chosen.listed_slots_width`,
:func:`~tfdml.kernels.chosen.keeps_valid_slots_only`), and the losses act on its answer
(:mod:`tfdml.losses.batch`).
"""

FORMS = ("valid_slots", "listed_slots")
