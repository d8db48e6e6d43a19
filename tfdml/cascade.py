"""The encoder of a hard-aware deeply cascaded embedding (Yuan, Yang & Zhang, ICCV 2017, HDC):
one embedding head per depth of a backbone, the L2-normalised level embeddings concatenated.

:func:`build_cascade_encoder` taps a backbone at K layers of increasing depth (named, or
``"auto"``: the ends of its last K stages), pools each tapped feature map globally, maps it
with its own Dense head to d / K dimensions and L2-normalises it; the encoder's output is the
concatenation [e_1, …, e_K] (d dimensions), which retrieval, ``predict`` and ``export`` use
(each block of unit norm, so the whole has norm √K). :class:`tfdml.losses.HDCLoss` (with the
same K) trains level k on the pairs the levels before it found hard. The encoder is a plain
``keras.Model``: :class:`tfdml.models.EmbeddingModel` wraps it as any other.
"""

import keras

from tfdml.cascade_spec import AUTO, DEFAULT_LEVELS

#: The name of level k's Dense head (k = 1…K): a component of its variables' paths, which
#: a learning-rate multiplier names (:mod:`tfdml.optimizers`).
HEAD_NAME = "embedding_{}"


def head_names(levels):
    """The names of the K level heads of a cascade encoder, shallowest first."""
    return [HEAD_NAME.format(k) for k in range(1, int(levels) + 1)]


def _feature_maps(model):
    """The layers of ``model`` whose output is a rank-4 feature map, in graph order."""
    out = []
    for layer in model.layers:
        shape = getattr(getattr(layer, "output", None), "shape", None)
        if shape is not None and len(shape) == 4 and not isinstance(layer, keras.layers.InputLayer):
            out.append(layer)
    return out


def stage_ends(model, levels):
    """The names of the last layer of each of the last ``levels`` spatial resolutions of
    ``model`` (a stage: consecutive feature maps of one height × width), shallowest first."""
    ends = []
    for layer in _feature_maps(model):
        size = tuple(layer.output.shape[1:3])
        if ends and ends[-1][0] == size:
            ends[-1] = (size, layer.name)
        else:
            ends.append((size, layer.name))
    if len(ends) < levels:
        raise ValueError(f"build_cascade_encoder(layers='auto'): the backbone {model.name!r} has "
                         f"{len(ends)} stage(s) of distinct resolution, fewer than levels={levels}; "
                         "name the layers to tap (layers=[...]) or ask for fewer levels.")
    return [name for _, name in ends[-levels:]]


def _holder(backbone, names):
    """The functional model among ``backbone`` and its direct sub-models holding every layer of
    ``names``, and the backbone's layers that run before it (a ``preprocess`` wrapper's)."""
    own = {layer.name for layer in backbone.layers}
    if all(name in own for name in names):
        return backbone, []
    for index, layer in enumerate(backbone.layers):
        if isinstance(layer, keras.Model) and all(name in {sub.name for sub in layer.layers} for name in names):
            before = [b for b in backbone.layers[:index] if not isinstance(b, keras.layers.InputLayer)]
            return layer, before
    raise ValueError(f"build_cascade_encoder: the backbone {backbone.name!r} has no layers named "
                     f"{[n for n in names if n not in own]} (nor has one of its sub-models all of "
                     f"{names}); name layers of the backbone, or use layers='auto'.")


def build_cascade_encoder(backbone, layers=AUTO, levels=DEFAULT_LEVELS, embedding_dim=128, name="encoder"):
    """``inputs -> [e_1, …, e_K]``: K embedding heads on the backbone's features at K depths.

    Args:
      backbone: a functional ``keras.Model`` (e.g. :func:`tfdml.backbones.get_backbone`'s), or
        one that wraps a functional model after preprocessing layers (the
        ``keras.applications`` backbones).
      layers: the names of the K layers to tap, shallow to deep, or ``"auto"``: the end of
        each of the last ``levels`` stages (:func:`stage_ends`).
      levels: K when ``layers="auto"``.
      embedding_dim: d, the width of the concatenation; each level has d / K dimensions.
      name: the encoder's name.

    Each level: global average pooling of a feature map (a vector is taken as it is), a Dense
    head named ``embedding_k`` (k = 1…K) in the variable dtype of Keras' dtype policy, then
    L2 normalisation; the heads are concatenated in level order.
    """
    if isinstance(layers, str):
        if layers != AUTO:
            raise ValueError(f"build_cascade_encoder: layers must be a list of layer names or 'auto', "
                             f"got {layers!r}.")
        # A wrapper (preprocessing, then a functional network): the stages of the network.
        nested = [layer for layer in backbone.layers if isinstance(layer, keras.Model)]
        holder = max(nested, key=lambda m: len(_feature_maps(m))) if nested else backbone
        names = stage_ends(holder, int(levels))
    else:
        names = [str(n) for n in layers]
        if not names:
            raise ValueError("build_cascade_encoder: layers=[] taps nothing; name at least one layer.")
    if embedding_dim % len(names):
        raise ValueError(f"build_cascade_encoder: embedding_dim={embedding_dim} does not divide into "
                         f"{len(names)} levels of equal size; use a multiple of {len(names)}.")
    holder, before = _holder(backbone, names)
    taps = keras.Model(holder.inputs, [holder.get_layer(n).output for n in names], name=f"{name}_taps")
    inputs = keras.Input(shape=backbone.input_shape[1:], name="input")
    x = inputs
    for layer in before:
        x = layer(x)
    features = taps(x)
    features = features if isinstance(features, (list, tuple)) else [features]
    head_dtype = keras.config.dtype_policy().variable_dtype
    width = embedding_dim // len(names)
    blocks = []
    for k, feature in enumerate(features, start=1):
        if len(feature.shape) == 4:
            feature = keras.layers.GlobalAveragePooling2D(name=f"pool_{k}")(feature)
        elif len(feature.shape) != 2:
            feature = keras.layers.Flatten(name=f"flatten_{k}")(feature)
        emb = keras.layers.Dense(width, name=HEAD_NAME.format(k), dtype=head_dtype)(feature)
        blocks.append(keras.layers.UnitNormalization(name=f"l2_normalize_{k}", dtype=head_dtype)(emb))
    out = blocks[0] if len(blocks) == 1 else keras.layers.Concatenate(name="levels", dtype=head_dtype)(blocks)
    return keras.Model(inputs, out, name=name)
