"""Loading an embedding model (a ``.keras`` file or a SavedModel) and
embedding a split with it, with one-line errors for what does not fit."""

import os

import numpy as np

from tfdml_app.errors import EvaluationError


def model_input_transform(size=None, channels=None):
    """Per-batch map to the model's input size / channels, or None when neither is set."""
    if size is None and channels is None:
        return None
    from pipelines import augment

    def transform(x):
        return augment.to_model_input(x, channels=channels or x.shape[-1], size=size)

    return transform


def check_model_path(path):
    """Fail early (before TensorFlow is imported) on a path that cannot be a model."""
    if not os.path.exists(path):
        raise EvaluationError(f"--model {path!r}: no such file or directory.")
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "saved_model.pb")):
            raise EvaluationError(
                f"--model {path!r} is a directory without saved_model.pb: give a .keras file "
                "or a directory written by model.export()."
            )
    elif not path.endswith(".keras"):
        raise EvaluationError(
            f"--model {path!r}: expected a .keras file or a SavedModel directory."
        )
    else:
        import zipfile

        if not zipfile.is_zipfile(path):
            raise EvaluationError(
                f"--model {path!r} is not a complete .keras archive ({os.path.getsize(path)} bytes; "
                "a .keras file is a zip): it was truncated or corrupted, e.g. by a run that stopped "
                "while writing it. Save or export the model again."
            )


def load_embedder(path):
    """A function images [B, ...] → embeddings [B, d] (NumPy), from a .keras or a SavedModel."""
    check_model_path(path)
    import tensorflow as tf

    if os.path.isdir(path):
        try:
            loaded = tf.saved_model.load(path)
        except Exception as err:  # noqa: BLE001 - any load failure is the user's file
            raise EvaluationError(f"Could not load the SavedModel at {path!r}: {err}") from None
        return _saved_model_fn(loaded, path)
    import tfdml

    try:
        model = tfdml.load_model(path, compile=False)
    except Exception as err:  # noqa: BLE001
        raise EvaluationError(f"Could not load the Keras model {path!r}: {err}") from None
    outputs = getattr(model, "outputs", None) or [None]  # subclassed models have none
    if len(outputs) != 1:
        raise EvaluationError(
            f"The model {path!r} has {len(outputs)} outputs; an embedding model has one, "
            "the [batch, d] embedding."
        )

    @tf.function(reduce_retracing=True, autograph=False)
    def call(x):
        return model(x, training=False)

    call.expected_input_shape = _expected_input_shape(model)
    return call


def _expected_input_shape(model):
    """The model's input shape without the batch axis, or None if unknown."""
    try:
        shape = model.input_shape
    except (AttributeError, ValueError):
        encoder = getattr(model, "encoder", None)  # tfdml.models.EmbeddingModel
        shape = getattr(encoder, "input_shape", None) if encoder is not None else None
    if not isinstance(shape, tuple) or not shape or not all(
            d is None or isinstance(d, int) for d in shape):
        return None
    return tuple(shape[1:])


def _shape_text(shape):
    return "×".join("?" if d is None else str(d) for d in shape)


def _saved_model_fn(loaded, path):
    import tensorflow as tf

    # The closures keep ``loaded`` alive: its variables die with it.
    if hasattr(loaded, "serve") and callable(loaded.serve):
        def call(x):
            fn = loaded.serve
            return fn(tf.cast(x, _first_dtype(fn) or tf.float32))

        return call
    signatures = getattr(loaded, "signatures", {}) or {}
    if "serving_default" not in signatures:
        raise EvaluationError(
            f"The SavedModel {path!r} has no 'serve' endpoint or 'serving_default' "
            f"signature (signatures: {sorted(signatures)})."
        )
    sig = signatures["serving_default"]
    inputs = sig.structured_input_signature[1]
    if len(inputs) != 1:
        raise EvaluationError(
            f"The SavedModel's serving_default takes {len(inputs)} inputs "
            f"({sorted(inputs)}); an embedding model takes one image input."
        )
    (name, spec), = inputs.items()

    def call(x):
        out = loaded.signatures["serving_default"](**{name: tf.cast(x, spec.dtype)})
        if len(out) != 1:
            raise EvaluationError(
                f"The SavedModel's serving_default returns {len(out)} outputs "
                f"({sorted(out)}); an embedding model returns one, the embedding."
            )
        return next(iter(out.values()))

    return call


def _first_dtype(fn):
    try:
        specs = fn.input_signature or ()
        return specs[0].dtype if specs else None
    except (AttributeError, TypeError):
        return None


def embed(embedder, dataset, num_examples, batch_size=256, verbose=1, transform=None):
    """Embeddings [N, d] and labels [N] of an unbatched (image, label) dataset; a progress bar."""
    import keras
    import tensorflow as tf

    bar = keras.utils.Progbar(num_examples, unit_name="image") if verbose else None
    embeddings, labels, done = [], [], 0
    batches = dataset.batch(batch_size)
    if transform is not None:
        batches = batches.map(lambda x, y: (transform(x), y))
    for x, y in batches.prefetch(tf.data.AUTOTUNE):
        try:
            out = embedder(x)
        except EvaluationError:
            raise
        except Exception as err:  # noqa: BLE001 - wrong input shape / dtype for the model
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            expected = getattr(embedder, "expected_input_shape", None)
            wants = f"expects inputs of shape {_shape_text(expected)} but " if expected else ""
            raise EvaluationError(
                f"The model {wants}cannot take the data's inputs of shape "
                f"{_shape_text(x.shape[1:])}: {first}. Evaluate on the data the model was trained "
                "for (--data), or pass the training run's --config so that its image.size / "
                "image.channels apply."
            ) from None
        if isinstance(out, (dict, list, tuple)):
            raise EvaluationError(
                f"The model returns a {type(out).__name__}; an embedding model returns one [batch, d] "
                "embedding tensor."
            )
        out = np.asarray(out)
        if out.ndim != 2 or out.shape[0] != x.shape[0]:
            raise EvaluationError(
                f"The model output has shape {out.shape} for a batch of {x.shape[0]}: not an "
                "embedding. An embedding model maps each input to one vector "
                "[batch, d] (e.g. the exported embedding model, not a classifier's feature map)."
            )
        embeddings.append(out.astype(np.float32))
        labels.append(np.asarray(y).reshape(-1))
        done += out.shape[0]
        if bar is not None:
            bar.update(min(done, num_examples))
    if not embeddings:
        raise EvaluationError("The split is empty: nothing to evaluate.")
    return np.concatenate(embeddings), np.concatenate(labels)


def load_split(source="mnist5k", source_kwargs=None, split="test"):
    """``pipelines.sources.get_source(source, **source_kwargs).split(split)``, with clear errors."""
    from pipelines import sources

    try:
        return sources.get_source(source, **(source_kwargs or {})).split(split)
    except TypeError as err:
        raise EvaluationError(f"Bad options for data source {source!r}: {err}") from None


def _image_loader(split):
    """``indices -> images`` for the retrieval grid, or None (non-image data)."""
    shape = tuple(getattr(split, "image_shape", ()) or ())
    if len(shape) not in (2, 3) or (len(shape) == 3 and shape[-1] not in (1, 3, 4)):
        return None
    if hasattr(split, "load"):
        return lambda idx: np.asarray(split.load(np.asarray(idx, np.int64)))
    if getattr(split, "images", None) is not None:
        return lambda idx: np.asarray(split.images)[idx]
    return None
