"""Keras callbacks: retrieval / clustering metrics on a held-out split during ``fit``
(and :class:`LossOnSample`, a fixed objective on a training sample), and the
guards of a training run: :class:`NaNGuard` (stop at the first non-finite loss
or embedding, naming the last good checkpoint) and :class:`EarlyStop` (patience
counted on a best checkpoint, resumable).

:class:`RetrievalEvaluation` embeds a held-out split every ``every_n_epochs``
epochs with :func:`tfdml.metrics.evaluate_embeddings` (the same code as
``evaluate.py``) and writes the results into ``logs``, so ``History``,
``CSVLogger``, ``ModelCheckpoint(monitor=...)``, ``EarlyStopping(monitor=...)``
and the progress bar see them.

Keys written to ``logs`` (see :func:`tfdml.metrics.metric_keys`), with an
optional ``prefix``: ``recall@k`` and ``precision@k`` for each k in ``ks``,
``map@r``, ``r_precision``, ``map``, ``nmi``, ``f1``,
``verification_accuracy``, ``verification_accuracy_std``, ``roc_auc``,
``eer``. All are larger-is-better except ``eer``; Keras only guesses "max"
for names containing "acc", so give the mode explicitly::

    callbacks = [
        tfdml.callbacks.RetrievalEvaluation((x_val, y_val), metrics=["recall", "map@r"]),
        keras.callbacks.ModelCheckpoint("best.keras", monitor="map@r", mode="max",
                                        save_best_only=True),
        keras.callbacks.EarlyStopping(monitor="recall@1", mode="max", patience=3),
    ]

Put this callback *before* the ones that read its keys (callbacks run in list
order; Keras appends History and the progress bar last). With
``every_n_epochs > 1`` the keys are absent on the other epochs, which
ModelCheckpoint and EarlyStopping skip with a warning.

Distribution: embeddings come from ``model.predict``, which splits the
batches over the replicas of the model's strategy and returns them in order.
"""

import math
import os

import numpy as np
import keras
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from tfdml import metrics as _metrics
from tfdml import models as _models


class RetrievalEvaluation(keras.callbacks.Callback):
    """Evaluate the embedding of a held-out split at the end of epochs.

    Args:
      data: ``(x, labels)`` arrays, or a ``tf.data.Dataset`` of batched
        ``(x, labels)``. A dataset must yield the same order on every pass (no
        reshuffling): inputs and labels are read in separate passes, the
        labels once.
      every_n_epochs: evaluate after epochs ``n, 2n, ...`` (and never more).
      metrics, ks: metric names and the k of Recall@k / Precision@k
        (:mod:`tfdml.metrics`); validated here.
      log_dir: if given, the values are also written as TensorBoard scalars
        ``retrieval/<key>`` ("@" written as "_at_") at step = the epoch counted
        from 1 (as Keras' progress bar and ``history.csv``); the
        tensorboard package is not needed to write them.
      batch_size: prediction batch size for array data.
      distance: ``"euclidean"``, ``"squared_euclidean"`` or ``"cosine"``.
      prefix: prepended to every key (e.g. ``"val_"``).
      verbose: 1 prints one line of results per evaluation.
      keep_embeddings: keep the last evaluation's embeddings and labels as
        :attr:`last_embedded` (``{"epoch", "embeddings", "labels"}``, the epoch
        counted from 1), so that a final evaluation of the same model on the
        same split need not embed it again.
      **evaluate_kwargs: passed to :func:`tfdml.metrics.evaluate_embeddings`
        (``chunk_size``, ``seed``, ``nmi_average``, ``num_pairs``, ...).
    """

    def __init__(self, data, every_n_epochs=1, metrics=_metrics.DEFAULT_METRICS,
                 ks=_metrics.DEFAULT_KS, log_dir=None, batch_size=256, distance="euclidean",
                 prefix="", verbose=0, keep_embeddings=False, **evaluate_kwargs):
        super().__init__()
        self.metric_names, self.ks = _metrics.parse_metrics(metrics, ks)
        _metrics.knn.check_distance(distance)
        if isinstance(every_n_epochs, bool) or not isinstance(every_n_epochs, (int, np.integer)) \
                or every_n_epochs < 1:
            raise ValueError(f"every_n_epochs must be a positive integer, got {every_n_epochs!r}.")
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
        allowed = {"chunk_size", "seed", "nmi_average", "num_clusters", "num_pairs", "n_folds"}
        unknown = sorted(set(evaluate_kwargs) - allowed)
        if unknown:
            raise ValueError(
                f"Unknown argument(s) {unknown} for RetrievalEvaluation; "
                f"valid extra arguments: {sorted(allowed)}."
            )
        self.every_n_epochs = int(every_n_epochs)
        self.log_dir = log_dir
        self.batch_size = int(batch_size)
        self.distance = distance
        self.prefix = str(prefix)
        self.verbose = verbose
        self.evaluate_kwargs = evaluate_kwargs
        self._x, self._labels, self._dataset = self._check_data(data)
        self._writer = None
        self.keys = [self.prefix + k for k in _metrics.metric_keys(self.metric_names, self.ks)]
        self.last_results = None
        self.keep_embeddings = bool(keep_embeddings)
        self.last_embedded = None

    @staticmethod
    def _check_data(data):
        if isinstance(data, tf.data.Dataset):
            spec = data.element_spec
            if not (isinstance(spec, tuple) and len(spec) == 2):
                raise ValueError(
                    "RetrievalEvaluation needs a dataset of (x, labels) batches; got elements "
                    f"{spec}. Map it with `ds.map(lambda x, y: (x, y))` first."
                )
            return None, None, data
        if isinstance(data, (tuple, list)) and len(data) == 2:
            x, labels = data
            labels = np.asarray(labels).reshape(-1)
            n = len(x) if not isinstance(x, dict) else len(next(iter(x.values())))
            if labels.size != n:
                raise ValueError(
                    f"RetrievalEvaluation got {n} inputs and {labels.size} labels; "
                    "they must match."
                )
            if n < 2:
                raise ValueError("RetrievalEvaluation needs at least 2 held-out examples.")
            return x, labels, None
        raise ValueError(
            "RetrievalEvaluation data must be an (x, labels) tuple of arrays or a "
            f"tf.data.Dataset of (x, labels) batches, got {type(data).__name__}."
        )

    def _labels_of_dataset(self):
        if self._labels is None:
            parts = [np.asarray(y).reshape(-1) for y in self._dataset.map(lambda x, y: y)]
            self._labels = np.concatenate(parts)
        return self._labels

    def embed(self):
        """Embeddings [N, d] of the held-out split from the current model."""
        if self._dataset is not None:
            out = self.model.predict(self._dataset.map(lambda x, y: x), verbose=0)
        else:
            out = self.model.predict(self._x, batch_size=self.batch_size, verbose=0)
        if isinstance(out, (dict, list, tuple)):
            raise ValueError(
                "RetrievalEvaluation needs a model with one output, the [N, d] embedding; "
                f"this model returns a {type(out).__name__}."
            )
        return out

    def evaluate(self, epoch=None):
        """Evaluate now; returns the dict of prefixed results. With ``keep_embeddings``,
        the embeddings are kept as :attr:`last_embedded` with ``epoch`` (counted from 1)."""
        embeddings = self.embed()
        labels = self._labels_of_dataset() if self._dataset is not None else self._labels
        if embeddings.shape[0] != labels.size:
            raise ValueError(
                f"The model produced {embeddings.shape[0]} embeddings for {labels.size} labels; "
                "is the evaluation dataset reshuffled or infinite?"
            )
        if self.keep_embeddings:
            self.last_embedded = {"epoch": epoch, "embeddings": embeddings, "labels": labels}
        results = _metrics.evaluate_embeddings(
            embeddings, labels, self.metric_names, self.ks, distance=self.distance,
            **self.evaluate_kwargs,
        )
        return {self.prefix + k: v for k, v in results.items()}

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every_n_epochs:
            return
        results = self.evaluate(epoch + 1)
        self.last_results = results
        if logs is not None:
            for key in self.keys:
                logs[key] = results[key]
        if self.verbose:
            line = " - ".join(f"{k}: {results[k]:.4f}" for k in self.keys)
            print(f"Epoch {epoch + 1}: {line}")
        if self.log_dir is not None:
            self._write_summaries(epoch, results)

    def _write_summaries(self, epoch, results):
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        # tf.summary.write with the "scalars" plugin metadata is what
        # tf.summary.scalar emits; it works without the tensorboard package.
        metadata = summary_pb2.SummaryMetadata()
        metadata.plugin_data.plugin_name = "scalars"
        with self._writer.as_default():
            for key in self.keys:
                tf.summary.write("retrieval/" + key.replace("@", "_at_"),
                                 tf.constant(results[key], tf.float32), step=epoch + 1,
                                 metadata=metadata)
        self._writer.flush()

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class LossOnSample(keras.callbacks.Callback):
    """The value of a loss on one fixed sample of examples, logged at the end of epochs.

    Hong et al. §6.3, Fig. 2: "At every 100 iterations, the loss (10) on the full
    train dataset is recorded", with and without importance sampling. The
    mini-batch losses of two such runs cannot be compared: one estimates Eq. 10,
    the other a sum reweighted by its batch design. This callback scores every
    run on the same objective: ``loss`` (built without importance weights for
    Eq. 10) over all the pairs of a fixed uniform sample of the training split,
    taken as one batch. Each ordered pair of the sample is a uniform pair of the
    split (P_U of Eq. 19), so with ``tuple_reduction="mean"`` the value is an
    unbiased estimate of Eq. 10 / (N(N − 1)).

    Args:
      data: ``(x, y)``: inputs and their targets, plain labels or the
        batch-contract dict (:mod:`tfdml.targets`; ``class_size`` for Hong's
        losses), embedded in one ``predict`` and scored as one batch.
      loss: a ``keras.losses.Loss`` taking ``(y, embeddings)``.
      every_n_epochs: log after epochs ``n, 2n, ...``.
      key: the ``logs`` key (default ``"train_objective"``).
      batch_size: prediction batch size.
    """

    def __init__(self, data, loss, every_n_epochs=1, key="train_objective", batch_size=256):
        super().__init__()
        if not (isinstance(data, (tuple, list)) and len(data) == 2):
            raise ValueError(f"LossOnSample data must be an (x, y) pair, got {type(data).__name__}.")
        if isinstance(every_n_epochs, bool) or not isinstance(every_n_epochs, (int, np.integer)) \
                or every_n_epochs < 1:
            raise ValueError(f"every_n_epochs must be a positive integer, got {every_n_epochs!r}.")
        self.x, self.y = data
        self.loss = loss
        self.every_n_epochs = int(every_n_epochs)
        self.key = str(key)
        self.batch_size = int(batch_size)

    def value(self):
        """The loss of the current model on the sample, as a float: of the embeddings, or of
        what the loss scores of them (``model.loss_inputs``: an EmbeddingModel's projection
        head, in inference mode)."""
        embeddings = tf.convert_to_tensor(self.model.predict(self.x, batch_size=self.batch_size, verbose=0))
        loss_inputs = getattr(self.model, "loss_inputs", None)
        if loss_inputs is not None:
            embeddings = loss_inputs(embeddings, training=False)
        return float(self.loss(self.y, embeddings))

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every_n_epochs or logs is None:
            return
        logs[self.key] = self.value()


@keras.saving.register_keras_serializable(package="tfdml")
class EpochSummary(keras.callbacks.Callback):
    """One line per epoch (for runs without progress bars, ``train.py --quiet``):
    ``epoch 3/8: loss 0.4123, val_map@r 0.5120 (12 s)``.

    ``keys``: the figures to show after the loss, when present in the epoch's
    logs (default: every held-out figure, i.e. keys with a ``val_`` or
    ``test_`` prefix); ``stream``: where to print (default: stdout).
    """

    def __init__(self, keys=None, stream=None):
        super().__init__()
        self.keys = keys
        self.stream = stream
        self._started = None

    def on_epoch_begin(self, epoch, logs=None):
        import time

        self._started = time.time()

    def on_epoch_end(self, epoch, logs=None):
        import sys
        import time

        logs = logs or {}
        keys = self.keys or [k for k in logs if k.startswith(("val_", "test_"))]
        parts = [f"loss {float(logs['loss']):.4f}"] if "loss" in logs else []
        parts += [f"{k} {float(logs[k]):.4f}" for k in keys if k in logs]
        total = self.params.get("epochs") if self.params else None
        seconds = time.time() - self._started if self._started else 0.0
        line = f"epoch {epoch + 1}{'/' + str(total) if total else ''}: {', '.join(parts)} ({seconds:.0f} s)"
        print(line, file=self.stream or sys.stdout, flush=True)

    def get_config(self):
        return {"keys": self.keys}


class HeldOutTensorBoard(keras.callbacks.TensorBoard):
    """``keras.callbacks.TensorBoard`` that files test-split figures as held-out.

    Keras writes every key without a ``val_`` prefix to the ``train`` run, so
    the test split's per-epoch figures (``test_map@r``, from
    :class:`RetrievalEvaluation` with ``prefix="test_"``) would be drawn as
    training figures. Here each key with a prefix of ``held_out`` goes to its
    own run instead (default: ``test_*`` → ``<log_dir>/test``, as
    ``epoch_map@r``), ``val_*`` to ``validation`` as in Keras, the rest to
    ``train``. The logs seen by later callbacks are not changed. Every run's
    step is the epoch counted from 1 (Keras' own TensorBoard counts from 0), as
    Keras' progress bar and ``history.csv`` count it.
    """

    def __init__(self, log_dir="logs", held_out=(("test_", "test"),), **kwargs):
        super().__init__(log_dir=log_dir, **kwargs)
        self.held_out = tuple((str(p), str(run)) for p, run in held_out)
        self._held_out_writers = {}

    def on_epoch_end(self, epoch, logs=None):
        logs = dict(logs or {})
        by_run = {}
        for prefix, run in self.held_out:
            for key in [k for k in logs if k.startswith(prefix)]:
                by_run.setdefault(run, {})[key[len(prefix):]] = logs.pop(key)
        # Keras files the epoch of on_epoch_end(0) at step 0; here at step 1, the
        # epoch as the progress bar and history.csv count it.
        super().on_epoch_end(epoch + 1, logs)
        for run, values in by_run.items():
            writer = self._held_out_writers.get(run)
            if writer is None:
                writer = tf.summary.create_file_writer(os.path.join(self.log_dir, run))
                self._held_out_writers[run] = writer
            with writer.as_default():
                for name, value in values.items():
                    tf.summary.scalar(f"epoch_{name}", value, step=epoch + 1)
            writer.flush()

    def on_train_end(self, logs=None):
        super().on_train_end(logs)
        for writer in self._held_out_writers.values():
            writer.close()
        self._held_out_writers = {}


class NonFiniteError(RuntimeError):
    """Training produced a non-finite loss or embedding (:class:`NaNGuard`); the
    message names the step, the last good checkpoint and the fix."""


class NaNGuard(keras.callbacks.Callback):
    """Stops training at the first non-finite loss or embedding with a message
    naming the step and the last good checkpoint (Keras' TerminateOnNaN stops
    silently). Embeddings are checked in the train step
    (``tfdml._models.NONFINITE_METRIC``): a loss can hide a NaN embedding
    behind a mask or a max, depending on the CPU's kernels.

    ``backup``: a :class:`tfdml.runs.Backup` (its ``describe()`` names the
    checkpoint). It raises :class:`NonFiniteError` at once, before end-of-epoch callbacks
    could evaluate or checkpoint a broken model; the backup of the last
    completed epoch stays in place for a resume.
    """

    def __init__(self, backup):
        super().__init__()
        self.backup = backup
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        loss = logs.get("loss")
        bad_rows = logs.get(_models.NONFINITE_METRIC)
        if bad_rows is not None and float(bad_rows) > 0:
            what = f"the embeddings became non-finite (NaN or Inf in {int(float(bad_rows))} row(s))"
        elif loss is not None and not math.isfinite(float(loss)):
            what = f"the loss became {float(loss)}"
        else:
            return
        raise NonFiniteError(
            f"{what} at epoch {self.epoch + 1}, step {batch + 1}. "
            f"Last good checkpoint: {self.backup.describe()}. Lower optimizer.learning_rate or check the data, "
            f"then rerun the same command to resume from that checkpoint."
        )


class EarlyStop(keras.callbacks.Callback):
    """Stops ``fit`` after ``patience`` evaluations in a row without a better
    best checkpoint (``checkpoint``: the AtomicCheckpoint before it in the
    list). ``wait`` is restored from the backup, so a resumed run stops where
    an uninterrupted one would. Epochs without evaluation do not count."""

    def __init__(self, checkpoint, patience, wait=0):
        super().__init__()
        self.checkpoint, self.patience, self.wait = checkpoint, int(patience), int(wait)
        self.last_best = checkpoint.best
        self.stopped_epoch = None

    def on_epoch_end(self, epoch, logs=None):
        if (logs or {}).get(self.checkpoint.monitor) is None:
            return
        if self.checkpoint.best != self.last_best:
            self.wait, self.last_best = 0, self.checkpoint.best
            return
        self.wait += 1
        if self.wait >= self.patience:
            self.stopped_epoch = epoch
            self.model.stop_training = True
