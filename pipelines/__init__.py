"""pipelines: the data side of tfdml, in tf.data only.

* :mod:`pipelines.sources` — ``get_source(name, **kwargs)``: bundled default
  data (``mnist5k``, ``digits``), image folders, TFDS benchmarks, arrays; each
  with an open-set ``"train"`` / ``"test"`` split by class.
* :mod:`pipelines.designs` — batch designs ``GroupDesign(m, n)``,
  ``PRandomDesign(p, pairs)``, ``MPerClassDesign(m, classes_per_batch)``
  (``get_design(name, **kwargs)``) with exact importance-weight columns
  (Hong et al. Eq. 24 / 25), and ``TwoViewDesign(images)``: every image twice.
* :mod:`pipelines.augment` — ``TrainTransform``, ``EvalTransform``,
  ``to_model_input``; :mod:`pipelines.view_augment` — ``ViewTransform``,
  SimCLR's augmentation.

Batches follow the batch contract in docs/design.md: ``(x, {"label", "class_size",
"w_pos", "w_neg"[, "pair_id"], "example_id"})``. This package never imports
the model side.
"""

from pipelines import augment, designs, sources, view_augment  # noqa: F401
from pipelines.designs import GroupDesign, MPerClassDesign, PRandomDesign, TwoViewDesign, get_design  # noqa: F401
from pipelines.sources import get_source  # noqa: F401
