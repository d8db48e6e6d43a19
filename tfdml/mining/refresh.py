"""The callback that refreshes smart mining's table during ``model.fit`` and runs its
controller (Harwood et al., "Smart Mining for Deep Metric Learning", ICCV 2017)."""

import keras
import numpy as np

from tfdml.mining.table import hard_negative_table
from tfdml.search.embedding import embed_dataset

__all__ = ["SmartMiningRefresh"]


class SmartMiningRefresh(keras.callbacks.Callback):
    """Every ``refresh_every`` epochs, embed the training split and rebuild the table of each
    example's nearest neighbours of another class; after every epoch, let ``controller``
    see the epoch's loss.

    Args:
      data: a ``tf.data`` dataset of the training split's inputs, ``x`` or ``(x, y)``
        batches, every example once and in the split's order (no shuffling, no random
        augmentation): row i of the table is example i of this order.
      labels: [N] integer labels of those examples.
      neighbours: the ``[N, k]`` int32 ``tf.Variable`` the table is written into
        (``SmartMiningDesign.neighbours``, which its batches read).
      refresh_every: epochs between refreshes (the table is also built at the first epoch
        of every ``fit``, so a resumed run does not start from an empty table).
      controller: a :class:`~tfdml.mining.HardnessController`, or None.
      monitor: the log key the controller observes (default ``"loss"``).
      distance, backend, approximate, search_params: the :class:`tfdml.search.Index`
        searched (:func:`~tfdml.mining.hard_negative_table`).
      verbose: 1 shows a progress bar while the split is embedded.

    Writes ``hard_fraction`` into the epoch's logs when there is a controller.
    :attr:`refreshed_at` lists the epochs (0-based) whose start refreshed the table.
    """

    def __init__(self, data, labels, neighbours, refresh_every=1, controller=None,
                 monitor="loss", distance="euclidean", backend="tensorflow", approximate=None,
                 search_params=None, verbose=1):
        super().__init__()
        if isinstance(refresh_every, bool) or not isinstance(refresh_every, (int, np.integer)) \
                or refresh_every < 1:
            raise ValueError(f"refresh_every must be an integer >= 1, got {refresh_every!r}.")
        self.labels = np.asarray(labels).reshape(-1)
        if len(neighbours.shape) != 2 or int(neighbours.shape[0]) != self.labels.shape[0]:
            raise ValueError(f"neighbours is {tuple(neighbours.shape)}, the split has "
                             f"{self.labels.shape[0]} labels: the table needs one row per example.")
        self.data = data
        self.neighbours = neighbours
        self.k = int(neighbours.shape[1])
        self.refresh_every = int(refresh_every)
        self.controller = controller
        self.monitor = monitor
        self.search = {"distance": distance, "backend": backend, "approximate": approximate,
                       **(search_params or {})}
        self.verbose = verbose
        self.refreshed_at = []
        self._fresh_fit = True

    def on_train_begin(self, logs=None):
        self._fresh_fit = True

    def refresh(self):
        """Embed the split with the model and write the new table; returns it."""
        x, _ = embed_dataset(self.model, self.data, verbose=self.verbose)
        if x.shape[0] != self.labels.shape[0]:
            raise ValueError(f"data gave {x.shape[0]} embeddings for {self.labels.shape[0]} labels: "
                             "give every example of the training split once, in order.")
        table = hard_negative_table(x, self.labels, self.k, **self.search)
        self.neighbours.assign(table)
        return table

    def on_epoch_begin(self, epoch, logs=None):
        if self._fresh_fit or epoch % self.refresh_every == 0:
            self.refresh()
            self.refreshed_at.append(int(epoch))
            self._fresh_fit = False

    def on_epoch_end(self, epoch, logs=None):
        if self.controller is None or logs is None:
            return
        if self.monitor not in logs:
            raise ValueError(f"SmartMiningRefresh: the logs have no {self.monitor!r} for the "
                             f"controller (they have {', '.join(sorted(logs))}); set monitor= "
                             "to one of them.")
        logs["hard_fraction"] = self.controller.observe(logs[self.monitor])
