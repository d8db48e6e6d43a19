"""The state layers of a loss (``loss.parameter_layers``: learned margins, proxies,
sampler seeds, a cross-batch memory) as an :class:`tfdml.models.EmbeddingModel` holds them
for every save route.

Keras tracks them in a list of the model (the optimizer trains them; ``save_weights`` and
``.keras`` files save them), which ``tf.train.Checkpoint`` does not walk: the model also
holds them in a :class:`LossState` module, which it does. A state layer sized by the
embeddings (a ``build_for(embedding_dim)`` method: a cross-batch memory built without
``embedding_dim``) is built as soon as the encoder's output size is known
(:func:`build_sized_by_embeddings`), so that a fresh model has its variables to restore
into; ``load_weights`` refuses one that has none yet (:func:`refuse_unbuilt`) rather than
let Keras skip it silently.
"""

import tensorflow as tf


class LossState(tf.Module):
    """The loss's state layers as a TensorFlow trackable (``layers``, in the order of
    ``loss.parameter_layers``): what ``tf.train.Checkpoint`` of the model saves them under."""

    def __init__(self, layers):
        super().__init__(name="loss_state")
        self.layers = list(layers)


def unbuilt_layers(layers):
    """The state layers sized by the embeddings (a ``build_for(embedding_dim)`` method)
    that have no variables yet."""
    return [layer for layer in layers if not layer.built and callable(getattr(layer, "build_for", None))]


def build_sized_by_embeddings(layers, dim, strategy):
    """Build the state layers of :func:`unbuilt_layers` for embeddings of size ``dim`` (what
    the loss scores: the encoder's output, or a projection head's) under ``strategy``, so
    that their variables exist before weights or a checkpoint are restored into them;
    nothing while ``dim`` is None, not known yet (they are then built at the first batch)."""
    pending = unbuilt_layers(layers)
    if not pending or dim is None:
        return
    with strategy.scope():
        for layer in pending:
            layer.build_for(dim)


def refuse_unbuilt(layers):
    """Raise ``ValueError`` for ``load_weights`` when a state layer has no variables to load
    into yet (:func:`unbuilt_layers`): Keras would skip its saved state silently."""
    pending = [layer.name for layer in unbuilt_layers(layers)]
    if pending:
        raise ValueError(
            f"load_weights: the loss's state layer(s) {pending} have no variables yet (their "
            "size follows the embeddings, and this model's encoder gives no output size before "
            "its first batch), so their saved state would be skipped. Build the loss with the "
            "embedding size, e.g. memory={'size': K, 'embedding_dim': d}, or give the encoder a "
            "keras.Input.")


def output_size(encoder, input_shape=None):
    """The last dimension of ``encoder``'s output (for inputs of ``input_shape`` when
    given), or None when it is not known yet."""
    try:
        shape = encoder.compute_output_shape(input_shape) if input_shape is not None else encoder.output_shape
    except (AttributeError, ValueError, TypeError, NotImplementedError):
        return None
    if not isinstance(shape, (tuple, list)) or not shape or isinstance(shape[0], (tuple, list)):
        return None  # no output yet, or several
    return None if shape[-1] is None else int(shape[-1])
