"""Serving: :func:`export_lookup` writes a SavedModel whose ``lookup`` embeds, searches a
copy of an index and thresholds, with TensorFlow alone."""

import os

from tfdml import distance_names
from tfdml import files, primitives
from tfdml.metrics import knn as _knn
from tfdml.search.calibration import match_limit


def _lookup_module(model, index, k, threshold, input_signature):
    import tensorflow as tf

    distance = index.distance
    # The same frame as tfdml.metrics.knn.ranking_frame: on the sphere for
    # cosine (to_sphere, in the graph for queries), then centred on the
    # gallery (the query of zeros becomes minus the gallery's mean).
    frame = _knn.PreparedGallery(index.embeddings, distance)
    minus_c = -frame.centre[None, :]
    k_eff = min(int(k), len(index))
    limit = match_limit(threshold)

    class Lookup(tf.Module):
        def __init__(self):
            super().__init__(name="tfdml_lookup")
            self.model = model
            self.gallery = tf.Variable(frame.rows, trainable=False, name="gallery")
            # Computed once here: in the graph, every lookup would read the gallery again for them.
            self.gallery_norms = tf.Variable(frame.squared_norms, trainable=False, name="gallery_norms")
            self.offset = tf.Variable(minus_c[0], trainable=False, name="offset")
            self.ids = tf.Variable(index.ids, trainable=False, name="ids")
            self.threshold = tf.Variable(limit, trainable=False, name="threshold")
            self.embed = tf.function(self._embed, input_signature=input_signature)
            self.lookup = tf.function(self._lookup, input_signature=input_signature)

        def _embed(self, inputs):
            return tf.cast(self.model(inputs, training=False), tf.float32)

        def _lookup(self, inputs):
            e = self._embed(inputs)
            if distance_names.is_similarity(distance):
                e = _knn.to_sphere(e)
            values, positions = tf.math.top_k(primitives.scores(e + self.offset, self.gallery, self.gallery_norms),
                                              k=k_eff, sorted=True)
            if distance_names.is_similarity(distance):
                dist = tf.maximum(-0.5 * values, 0.0)  # 1 - cos = d²/2 on the sphere
            else:
                dist = tf.sqrt(tf.maximum(-values, 0.0))
            return {"ids": tf.gather(self.ids, positions), "distances": dist,
                    "is_match": dist <= self.threshold}

    return Lookup()


def _input_signature(model):
    """``[tf.TensorSpec([None, ...])]`` of a one-input model, from its ``inputs``, else
    those of its ``encoder`` (a :class:`tfdml.models.EmbeddingModel`, which has no
    ``inputs`` once loaded from a ``.keras`` file), else the shape it was built with."""
    import tensorflow as tf

    for part in (model, getattr(model, "encoder", None)):
        inputs = getattr(part, "inputs", None)
        if inputs and len(inputs) == 1:
            shape, dtype = inputs[0].shape, inputs[0].dtype or tf.float32
        else:
            built = part.get_build_config() if hasattr(part, "get_build_config") else None
            shape, dtype = (built or {}).get("input_shape"), tf.float32
        if isinstance(shape, (list, tuple)) and len(shape) > 1 and all(
                d is None or isinstance(d, int) for d in shape):
            return [tf.TensorSpec([None, *shape[1:]], dtype, name="inputs")]
    raise ValueError(
        "Cannot read the model's input shape (it needs exactly one input, and to have been "
        "built or called once); pass input_signature=[tf.TensorSpec([None, ...], tf.float32)]."
    )


def export_lookup(model, index, path, k=10, threshold=None, input_signature=None):
    """Write a SavedModel at ``path`` that embeds, searches ``index`` and thresholds.

    Load it with TensorFlow alone (``tf.saved_model.load(path)``); it has

    * ``lookup(inputs)`` -> ``{"ids": [B, k'] int64 or string, "distances":
      float32 [B, k'], "is_match": bool [B, k']}``, the same top-k as
      :meth:`Index.search` on ``embed(inputs)`` (ties: entry added first first),
      ``k' = min(k, len(index))``, ``is_match = distances <= threshold``;
    * ``embed(inputs)`` -> float32 [B, d], the model's embeddings;

    also registered as the serving signatures ``"lookup"`` (the default) and
    ``"embed"`` (output ``{"embeddings"}``). ``threshold``: a distance, a
    :class:`~tfdml.search.Calibration`, ``None`` (no threshold, e.g. a calibration that
    failed: ``is_match`` is False for every neighbour, never True) or
    ``float("inf")`` (every neighbour is a match).
    ``input_signature``: a list of one ``tf.TensorSpec``; default: the
    model's input shape (``model.inputs``, its encoder's for a loaded
    :class:`tfdml.models.EmbeddingModel`, or the shape it was built with).
    The index is copied into the SavedModel as variables (searched whole per
    batch: memory ∝ batch × N); the directory is written atomically
    (:func:`tfdml.files.atomic_directory`).
    """
    import tensorflow as tf

    if not len(index):
        raise ValueError("The index is empty: add embeddings before exporting a lookup.")
    if int(k) < 1:
        raise ValueError(f"k must be a positive integer, got {k}.")
    match_limit(threshold)  # a bad threshold fails before any tracing
    if input_signature is None:
        input_signature = _input_signature(model)
    module = _lookup_module(model, index, k, threshold, input_signature)
    probe = module.embed.get_concrete_function()
    if probe.structured_outputs.shape[-1] != index.dim:
        raise ValueError(
            f"The model's embeddings have dimension {probe.structured_outputs.shape[-1]} but "
            f"the index holds {index.dim}; export the model that built the index."
        )
    signatures = {
        "lookup": module.lookup.get_concrete_function(),
        "serving_default": module.lookup.get_concrete_function(),
        "embed": tf.function(lambda inputs: {"embeddings": module.embed(inputs)},
                             input_signature=input_signature).get_concrete_function(),
    }
    path = os.fspath(path)
    with files.atomic_directory(path) as tmp:
        tf.saved_model.save(module, tmp, signatures=signatures)
    return path

