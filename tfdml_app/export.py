"""What a finished run exports: ``model.keras``, ``saved_model/`` and the
``lookup/`` SavedModel with ``lookup.json``."""

import os
import sys

import numpy as np
import tensorflow as tf

from tfdml import files
from tfdml_app.data import model_input
from tfdml_app.embedding import embed
from tfdml_app.errors import ExperimentError
from tfdml_app.evaluation import calibration_report


def export(model, out, input_shape, saved_model=True):
    """``model.keras`` and (with ``saved_model``) ``saved_model/``, each replaced atomically.
    ``saved_model/`` holds the encoder (the same embedding function as ``model``), not the
    loss's state (proxies, learned margins, seeds): serving needs none of it."""
    import shutil

    files.save_model(model, os.path.join(out, "model.keras"))
    target = os.path.join(out, "saved_model")
    staging, old = f"{target}.partial", f"{target}.old"
    for leftover in (staging, old):
        shutil.rmtree(leftover, ignore_errors=True)
    if not saved_model:  # an earlier run's export is not this model's
        shutil.rmtree(target, ignore_errors=True)
        return
    model.export(staging, verbose=False)  # EmbeddingModel.export: the encoder alone
    if os.path.exists(target):
        os.replace(target, old)
    os.replace(staging, target)
    shutil.rmtree(old, ignore_errors=True)


def export_lookup(cfg, model, test_split, out, input_shape, embedded=None):
    """``lookup/`` (:func:`tfdml.search.export_lookup`) over the test split, and ``lookup.json``.

    The index holds every test example under its position in the split (int64
    ids) with its label; the threshold is calibrated to
    ``export.lookup_precision`` on a seeded half/half split of the same
    embeddings (:func:`tfdml_app.evaluation.calibration_report`). Without a threshold (the
    target is unreachable, or ``lookup_precision`` is null) ``is_match`` is
    False for every neighbour, never True; ``lookup.json``'s ``is_match`` says
    which rule holds, and :func:`tfdml_app.summary.summary` prints it. Like ``saved_model/``, the
    lookup takes model inputs (after the run's image transform). ``embedded``: the test
    split's ``(embeddings, labels)`` by ``model`` when the run's final evaluation has
    them (:func:`tfdml_app.fit.final_evaluation`), so that they are not computed again.
    """
    from tfdml import search

    ex, ev = cfg["export"], cfg["evaluation"]
    to_input = model_input(cfg)

    def embedder(x):
        return model(to_input(x), training=False)

    if ex["lookup_folder"]:
        embeddings, ids, labels = _embed_folder(embedder, ex["lookup_folder"], input_shape,
                                                ev["batch_size"])
        what = f"paths relative to {ex['lookup_folder']}"
    else:
        embeddings, labels = embedded if embedded is not None else embed(
            embedder, test_split.dataset(), int(len(test_split.labels)), ev["batch_size"], verbose=0)
        ids, what = np.arange(len(embeddings), dtype=np.int64), f"positions in the '{test_split.name}' split"
    distance = "cosine" if ev["distance"] == "cosine" else "euclidean"
    index = search.Index(distance).add(embeddings, ids, labels=labels)
    calibration = None
    if ex["lookup_precision"] is not None:
        calibration = calibration_report(embeddings, labels, distance,
                                                  ex["lookup_precision"], seed=cfg["seed"])
    threshold = (calibration or {}).get("threshold")
    never = "never: is_match is False for every neighbour, "
    if threshold is not None:
        rule = (f"distances <= {threshold:.6g} (precision {calibration['precision']:.4f} on "
                f"{calibration['num_queries']} held-out queries)")
    elif calibration is not None:  # a failed calibration never becomes "everything matches"
        rule = never + f"the calibration failed: {calibration['error']}"
        print(f"Warning: lookup/ has no threshold, is_match is False for every neighbour: "
              f"{calibration['error']}", file=sys.stderr)
    else:
        rule = never + "export.lookup_precision is null (no threshold); use the distances"
    search.export_lookup(model, index, os.path.join(out, "lookup"), k=ex["lookup_k"],
                         threshold=threshold,
                         input_signature=[tf.TensorSpec([None, *input_shape], tf.float32,
                                                        name="inputs")])
    record = {"k": ex["lookup_k"], "distance": distance, "threshold": threshold,
              "is_match": rule, "ids": what, "num_entries": len(index),
              "calibration": calibration}
    files.write_json(os.path.join(out, "lookup.json"), record)
    return record


def _embed_folder(embedder, folder, input_shape, batch_size):
    """(embeddings, ids, labels) of every image under ``folder``: ids are the
    paths relative to it, labels the class sub-folder (None unless every image
    sits in one), images decoded to the model's input size and channels."""
    from pipelines import sources

    try:
        files = sources.image_files(folder)
    except ValueError as err:
        raise ExperimentError(f"export.lookup_folder: {err}") from None
    rel = [os.path.relpath(f, folder) for f in files]
    classes = [r.split(os.sep)[0] if os.sep in r else None for r in rel]
    h, w, c = input_shape if len(input_shape) == 3 else (None, None, None)
    if h is None:
        raise ExperimentError("export.lookup_folder needs an image model ([H, W, C] inputs).")
    out = []
    for start in range(0, len(files), batch_size):
        images = sources.load_image_files(files[start:start + batch_size], (h, w), c)
        out.append(np.asarray(embedder(tf.constant(images))))
    labels = classes if all(k is not None for k in classes) else None
    return np.concatenate(out).astype(np.float32), rel, labels
