"""SimCLR's projection head (Chen et al. 2020, §2.1 and §4.2): a small MLP g(·) that maps
the representation h to z = g(h), where the contrastive loss applies. After training
g is thrown away and h is used downstream: the paper finds h better than z for other
tasks, since the loss makes z invariant to the augmentations and so discards information
that h keeps.

:class:`tfdml.models.EmbeddingModel` (``projection_head=[...]``) holds the head and applies
it to the embeddings given to the loss only; ``predict``, evaluation, retrieval and the
exported SavedModel use the embeddings without it.
"""

import keras

from tfdml import loss_state
from tfdml.projection_widths import check_widths


def build_projection_head(widths, name="projection_head"):
    """The head of ``widths`` (:func:`tfdml.projection_widths.check_widths`): for each
    width but the last, a Dense layer without bias, batch normalisation and a ReLU (SimCLR's
    hidden layer, g(h) = W⁽²⁾σ(W⁽¹⁾h), with the batch normalisation of its implementation),
    then a linear Dense layer to the last width.

    The output is not L2-normalised: the losses that compare by cosine similarity
    (NT-Xent, SupCon) normalise it themselves, and VICReg and Barlow Twins take the
    projections as they are (their papers' expander). The layers compute in the variable
    dtype of Keras' global dtype policy (float32 under ``mixed_bfloat16``), as the
    embedding layer of :func:`tfdml.models.build_encoder`."""
    widths = check_widths(widths)
    if widths is None:
        raise ValueError("build_projection_head needs widths, e.g. [128, 64]; a model without a head "
                         "takes projection_head=None.")
    dtype = keras.config.dtype_policy().variable_dtype
    layers = []
    for i, width in enumerate(widths[:-1]):
        layers += [keras.layers.Dense(width, use_bias=False, name=f"{name}_dense{i}", dtype=dtype),
                   keras.layers.BatchNormalization(name=f"{name}_bn{i}", dtype=dtype),
                   keras.layers.ReLU(name=f"{name}_relu{i}", dtype=dtype)]
    layers.append(keras.layers.Dense(widths[-1], name=f"{name}_output", dtype=dtype))
    return keras.Sequential(layers, name=name)


class ProjectionHeadMixin:
    """The projection head of :class:`tfdml.models.EmbeddingModel` (a mixin of it, which has
    ``encoder``): ``projection_head`` (the Keras layers, or None), ``projection_widths``
    (their widths, or None) and what the loss scores."""

    def _set_projection_head(self, widths):
        self.projection_widths = check_widths(widths)
        self.projection_head = None
        if self.projection_widths is not None:
            self.projection_head = build_projection_head(self.projection_widths)
            self._build_projection_head()  # its variables exist as soon as the encoder's size is known

    def loss_inputs(self, embeddings, training=False):
        """What the loss scores for ``embeddings`` [B, d]: the projection head's output
        [B, last width] when the model has one, else the embeddings."""
        if self.projection_head is None:
            return embeddings
        return self.projection_head(embeddings, training=training)

    def loss_input_size(self, input_shape=None):
        """The last dimension of :meth:`loss_inputs` (for inputs of ``input_shape`` when
        given), or None while the encoder's output size is not known."""
        if self.projection_widths is not None:
            return self.projection_widths[-1]
        return loss_state.output_size(self.encoder, input_shape)

    def _build_projection_head(self, input_shape=None):
        """Build the head for the encoder's output size once it is known, so that a fresh
        model has its variables to restore into and to build the optimizer for."""
        if self.projection_head is None or self.projection_head.built:
            return
        dim = loss_state.output_size(self.encoder, input_shape)
        if dim is not None:
            self.projection_head.build((None, dim))
