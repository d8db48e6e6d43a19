"""A training batch without a positive pair, for a loss that scores nothing on one.

Multi-similarity with its mining (Wang et al. 2019), triplet and the other losses whose
formula or sampler needs tuples (``needs_tuples``) are 0, with no gradient, on a batch
where no two examples share a class. ``EmbeddingModel.fit`` counts such batches in the
step's logs (``batches_without_positive_pairs``, summed over the epoch) and warns once
per ``fit``, in every ``jit_compile`` mode; a batch with positives adds nothing.
"""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdml import losses, models

B = 8
X = np.random.default_rng(0).normal(size=(B, 5)).astype("float32")
PAIRED = np.repeat(np.arange(4), 2).astype("int64")
DISTINCT = np.arange(B).astype("int64")


def _model(loss, jit_compile):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((5,))
    encoder = keras.Model(inputs, keras.layers.UnitNormalization()(keras.layers.Dense(4)(inputs)))
    model = models.EmbeddingModel(encoder)
    model.compile(optimizer="sgd", loss=loss, jit_compile=jit_compile)
    return model


def _batches(*labels):
    return tf.data.Dataset.from_tensor_slices((np.stack([X] * len(labels)), np.stack(labels)))


def _fit(model, labels, epochs=1):
    seen = []
    callback = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: seen.append(dict(logs)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(_batches(*labels), epochs=epochs, verbose=0, callbacks=[callback])
    shown = [str(w.message) for w in caught if models.NO_POSITIVES_LOG in str(w.message)]
    return seen, shown, history


@pytest.mark.parametrize("jit_compile", [False, "auto", True])
def test_multi_similarity_batches_without_a_positive_pair_are_counted_and_warned(jit_compile):
    model = _model(losses.MultiSimilarityLoss(), jit_compile)
    seen, shown, history = _fit(model, [PAIRED, DISTINCT, PAIRED, DISTINCT], epochs=2)
    counts = [logs.get(models.NO_POSITIVES_LOG, 0) for logs in seen]
    assert counts == [0, 1, 1, 2] * 2  # summed over each epoch, as the metrics are
    assert history.history[models.NO_POSITIVES_LOG] == [2, 2]
    assert len(shown) == 1  # once per fit
    assert shown[0].startswith("MultiSimilarityLoss: 1 training batch had no positive pair")
    assert "pipelines.designs" in shown[0]


def test_batches_with_positives_add_no_log_entry_and_no_warning():
    seen, shown, history = _fit(_model(losses.TripletLoss(sampler="hard"), False), [PAIRED, PAIRED])
    assert all(models.NO_POSITIVES_LOG not in logs for logs in seen) and shown == []
    assert models.NO_POSITIVES_LOG not in history.history


def test_which_losses_need_positive_pairs():
    assert losses.MultiSimilarityLoss().needs_positive_pairs  # its mining keeps negatives near positives
    assert losses.TripletLoss(sampler="hard").needs_positive_pairs
    assert losses.ContrastiveLoss(sampler="semi_hard").needs_positive_pairs  # triplets
    assert not losses.ContrastiveLoss().needs_positive_pairs  # negative pairs alone still train it
    assert not losses.MultiSimilarityLoss(sampler=None).needs_positive_pairs
    assert not losses.ProxyAnchorLoss(num_classes=4, embedding_dim=4).needs_positive_pairs
    # A cross-batch memory holds positives from earlier batches.
    assert not losses.TripletLoss(sampler="hard", memory={"size": 16}).needs_positive_pairs
