"""Embedding a ``tf.data`` dataset with a model, for :meth:`Index.add_model
<tfdml.search.Index.add_model>`."""

import numpy as np


def embed_dataset(model, dataset, verbose=1):
    """``(embeddings [N, d], labels [N] or None)`` of ``dataset`` embedded by ``model``, its
    elements and progress bar as :meth:`Index.add_model <tfdml.search.Index.add_model>`
    describes them; an empty dataset or float labels are a ValueError."""
    import keras
    import tensorflow as tf

    total = int(dataset.cardinality())
    bar = keras.utils.Progbar(total if total >= 0 else None, verbose=verbose,
                              unit_name="batch")
    chunks, ys = [], []
    for step, element in enumerate(dataset):
        x, y = (element[0], element[1]) if isinstance(element, (tuple, list)) else (
            element, None)
        out = model(x, training=False)
        chunks.append(np.asarray(tf.convert_to_tensor(out)))
        if isinstance(y, dict):
            y = y.get("label")
        if y is not None:
            ys.append(np.asarray(y))
        bar.update(step + 1)
    if not chunks:
        raise ValueError("The dataset is empty: nothing to add to the index.")
    x = np.concatenate(chunks)
    labels = None
    if ys:
        y = np.concatenate(ys)
        if y.dtype.kind == "f":
            raise ValueError(
                "The dataset's labels are floats; labels must be int64 or strings "
                "(cast them in the pipeline, e.g. tf.cast(y, tf.int64))."
            )
        labels = y.reshape(-1)
    return x, labels
