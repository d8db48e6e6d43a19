"""Evaluate a trained embedding model on a test split.

    python evaluate.py --model runs/default/model.keras
    python evaluate.py --model runs/default/export --config runs/default/config.yaml
    python evaluate.py --model model.keras --data digits --metrics recall map@r --ks 1 2 4 8

``--model`` is a ``.keras`` file or an exported SavedModel directory (its
``serve`` endpoint or ``serving_default`` signature: images → embeddings).
The split is embedded with a progress bar, the metrics of
:func:`tfdml.metrics.evaluate_embeddings` are printed as a table and written
to ``OUT/metrics.json``, and these plots are written to ``OUT``:

* ``retrieval_grid.png`` — queries and their top-k results, right (green) and
  wrong (red) (Lu et al. 2019 Fig. 5; image data only);
* ``distance_histogram.png`` — positive- and negative-pair distances (Wu et
  al. 2017 Fig. 7);
* ``pr_curve.png`` — mean interpolated precision-recall (Lu Fig. 4c);
* ``roc.png`` — ROC of verification pairs drawn from the labels (Lu Fig. 4f).

Only two sections of a ``--config`` YAML are read (see :func:`read_config`);
command-line flags override them.
"""

import argparse
import os
import sys

import numpy as np

DEFAULT_METRICS = ("recall", "precision", "map@r", "r_precision", "map", "nmi", "f1",
                   "verification")
DEFAULT_KS = (1, 2, 4, 8)


def quiet_tensorflow_import():
    """Import TensorFlow without its C++ start-up lines in the terminal (the
    one implementation for train.py and evaluate.py).

    ``TF_CPP_MIN_LOG_LEVEL`` is set to 2 unless the user set it (TensorFlow
    reads it once). absl writes INFO lines such as "oneDNN custom operations
    are on" to the process's stderr before its logging is initialised,
    whatever that level says: the file descriptor of stderr is pointed at
    /dev/null for the import only; Python exceptions raised by the import
    still reach the user (they are printed after stderr is restored).
    """
    if "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


class EvaluationError(Exception):
    """A problem with the user's input, reported as one line without a stack trace."""


# --------------------------------------------------------------------------- config


def read_config(path):
    """The keys of a train.py YAML that evaluation uses, and nothing else.

    Keys read (all optional)::

        data:
          source: mnist5k            # a pipelines.sources name
          options: {...}             # keyword arguments of get_source(name, ...)
          test_split: test           # the split to evaluate
        image:
          size: null                 # resize to size × size before the model
          channels: null             # 1 or 3: convert channels before the model
        evaluation:
          metrics: [recall, map@r, r_precision, nmi]   # tfdml.metrics names
          ks: [1, 2, 4, 8]
          distance: euclidean        # euclidean | squared_euclidean | cosine
          baseline: raw_pixels       # also score a model-free baseline (or null)

    ``image.size`` / ``image.channels`` are the training run's model-input
    transform (``pipelines.augment.to_model_input``), applied here too.
    Returns a dict with ``source`` (name or None), ``source_kwargs``,
    ``split``, ``image_size``, ``image_channels``, ``metrics``, ``ks``,
    ``distance`` and ``baseline`` (None where absent).
    """
    import yaml

    if not os.path.isfile(path):
        raise EvaluationError(f"--config {path!r}: no such file.")
    from tfdml.config import read_yaml  # numbers as train.py reads them (1e-3 is a float)

    try:
        with open(path) as f:
            config = read_yaml(f) or {}
    except yaml.YAMLError as err:
        raise EvaluationError(f"--config {path!r} is not valid YAML: {err}") from None
    if not isinstance(config, dict):
        raise EvaluationError(f"--config {path!r} must be a mapping of sections.")
    data = config.get("data") or {}
    image = config.get("image") or {}
    evaluation = config.get("evaluation") or {}
    if not all(isinstance(v, dict) for v in (data, image, evaluation)):
        raise EvaluationError(
            f"--config {path!r}: 'data', 'image' and 'evaluation' must be mappings.")
    source = data.get("source")
    kwargs = dict(data.get("options") or {})
    if source is not None and not isinstance(source, str):
        raise EvaluationError(f"--config: data.source must be a source name, got {source!r}.")
    if source is not None:
        import experiment  # image.size / image.channels feed the folder and tfds sources, as in training

        kwargs = experiment.image_source_options(source, kwargs, image)
    return {
        "source": source,
        "source_kwargs": kwargs,
        "split": data.get("test_split"),
        "image_size": image.get("size"),
        "image_channels": image.get("channels"),
        "metrics": evaluation.get("metrics"),
        "ks": evaluation.get("ks"),
        "distance": evaluation.get("distance"),
        "baseline": evaluation.get("baseline"),
    }


def model_input_transform(size=None, channels=None):
    """Per-batch map to the model's input size / channels, or None when neither is set."""
    if size is None and channels is None:
        return None
    from pipelines import augment

    def transform(x):
        return augment.to_model_input(x, channels=channels or x.shape[-1], size=size)

    return transform


# --------------------------------------------------------------------------- model


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
    import keras

    import tfdml  # noqa: F401 - registers tfdml's serialisable objects

    try:
        model = keras.saving.load_model(path, compile=False)
    except Exception as err:  # noqa: BLE001
        raise EvaluationError(f"Could not load the Keras model {path!r}: {err}") from None
    outputs = getattr(model, "outputs", None) or [None]  # subclassed models have none
    if len(outputs) != 1:
        raise EvaluationError(
            f"The model {path!r} has {len(outputs)} outputs; evaluate.py needs one, "
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
            f"({sorted(inputs)}); evaluate.py needs one image input."
        )
    (name, spec), = inputs.items()

    def call(x):
        out = loaded.signatures["serving_default"](**{name: tf.cast(x, spec.dtype)})
        if len(out) != 1:
            raise EvaluationError(
                f"The SavedModel's serving_default returns {len(out)} outputs "
                f"({sorted(out)}); evaluate.py needs one, the embedding."
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
                f"The model returns a {type(out).__name__}; evaluate.py needs one [batch, d] "
                "embedding tensor."
            )
        out = np.asarray(out)
        if out.ndim != 2 or out.shape[0] != x.shape[0]:
            raise EvaluationError(
                f"The model output has shape {out.shape} for a batch of {x.shape[0]}: not an "
                "embedding. evaluate.py needs a model mapping each input to one vector "
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


# --------------------------------------------------------------------------- data


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


# --------------------------------------------------------------------------- run


def run(model, split, out_dir, metrics=DEFAULT_METRICS, ks=DEFAULT_KS, distance="euclidean",
        batch_size=256, chunk_size=None, seed=0, num_pairs=6000, grid_queries=8, grid_k=8,
        verbose=1, extra_info=None, make_plots=True, transform=None, baseline=None,
        show_table=True, calibrate=None, save_index=None):
    """Embed ``split`` with ``model`` (a path or an embedder), evaluate, write JSON and PNGs.

    ``split``: an object with ``labels``, ``dataset()`` (unbatched (image,
    label)) and optionally ``load(indices)`` / ``images`` for the grid.
    ``transform``: optional per-batch map applied before the model (the
    training run's model-input transform, see :func:`model_input_transform`).
    ``baseline="raw_pixels"`` also scores the L2-normalised raw pixels of the
    same split with the same metrics (written to metrics.json as
    ``baseline``, printed next to the model's figures).
    ``calibrate=TARGET`` also chooses a match threshold (:func:`calibration_report`),
    written to calibration.json and to metrics.json as ``calibration`` (and
    ``calibration.png``).
    ``save_index=PATH`` writes the split's embeddings as a
    :class:`tfdml.search.Index` (ids: positions in the split; with labels).
    Returns the metrics dict.
    """
    from tfdml import metrics as tm
    from tfdml import plots

    names, ks = tm.parse_metrics(metrics, ks)
    tm.knn.check_distance(distance)
    embedder = load_embedder(model) if isinstance(model, (str, os.PathLike)) else model
    num = int(len(split.labels))
    if verbose:
        print(f"Embedding {num} examples ...")
    embeddings, labels = embed(embedder, split.dataset(), num, batch_size, verbose, transform)
    results, details = tm.evaluate_embeddings(
        embeddings, labels, names, ks, distance=distance, chunk_size=chunk_size, seed=seed,
        num_pairs=num_pairs, pr_levels=np.linspace(0.0, 1.0, 101) if make_plots else None,
        return_details=True)

    baseline_results = baseline_details = None
    if baseline is not None:
        vectors, _ = baseline_vectors(baseline, split, batch_size, verbose)
        baseline_results, baseline_details = tm.evaluate_embeddings(
            vectors, labels, names, ks, distance=distance, chunk_size=chunk_size, seed=seed,
            num_pairs=num_pairs, pr_levels=np.linspace(0.0, 1.0, 101) if make_plots else None,
            return_details=True)
        if make_plots and "pairs" not in details:
            # The ROC shows the baseline whatever the metrics: the same pairs for both.
            details["pairs"] = verification_pairs(embeddings, labels, distance, seed, num_pairs)
            baseline_details["pairs"] = verification_pairs(vectors, labels, distance, seed, num_pairs)

    os.makedirs(out_dir, exist_ok=True)
    written = []
    if make_plots:
        reference = None
        if baseline is not None:
            reference = {"name": baseline.replace("_", " "), "details": baseline_details}
        written = plots.write_all(
            embeddings, labels, out_dir, distance=distance, images=_image_loader(split),
            seed=seed, num_pairs=num_pairs, grid=(grid_queries, grid_k), chunk_size=chunk_size,
            details=details, pr_label=f"mAP {results['map']:.4f}" if "map" in results else None,
            class_names=getattr(split, "class_names", None), title=_split_title(split),
            baseline=reference)

    info = {"num_examples": num, "embedding_dim": int(embeddings.shape[1]),
            "distance": distance, "metrics_requested": list(names), "ks": list(ks),
            **(extra_info or {})}
    from tfdml import files

    record = {"metrics": _jsonable(results), "info": info,
              "plots": [os.path.basename(p) for p in written]}
    if baseline_results is not None:
        record["baseline"] = {"name": baseline, "metrics": _jsonable(baseline_results)}
    if save_index is not None:
        from tfdml import search

        search.Index("cosine" if distance == "cosine" else "euclidean").add(
            embeddings, np.arange(len(embeddings), dtype=np.int64), labels=labels).save(save_index)
        record["index"] = os.path.abspath(save_index)
        if verbose:
            print(f"Wrote the index {save_index}")
    if calibrate is not None:
        record["calibration"] = calibration_report(embeddings, labels, distance, calibrate,
                                                   out_dir if make_plots else None, seed)
        if make_plots and "threshold" in record["calibration"]:
            record["plots"].append("calibration.png")
        files.write_json(os.path.join(out_dir, "calibration.json"), record["calibration"])
        if verbose:
            c = record["calibration"]
            print(f"Calibration: {c['error']}" if "error" in c else
                  f"Calibration: threshold {c['threshold']:.4g} ({c['distance']}) gives "
                  f"precision {c['precision']:.4f}, recall {c['recall']:.4f} "
                  f"(target {c['target_precision']})")
    files.write_json(os.path.join(out_dir, "metrics.json"), record)
    if verbose:
        if show_table:  # train.py prints its own summary of the same figures
            print(format_table(results, baseline_results, baseline))
        print(f"Wrote {os.path.join(out_dir, 'metrics.json')} and "
              f"{', '.join(os.path.basename(p) for p in written)}")
    return results


def calibration_report(embeddings, labels, distance, target_precision, out_dir=None, seed=0):
    """A match threshold for these embeddings (:func:`tfdml.search.calibrate`), as a dict.

    A seeded random half of the examples is the index, the other half the
    calibration queries. ``squared_euclidean`` calibrates a euclidean
    threshold (same ranking). A target no threshold reaches is reported as
    ``{"error": ...}``, not raised: the metrics are still worth writing.
    """
    from tfdml import search

    index_distance = "cosine" if distance == "cosine" else "euclidean"
    order = np.random.default_rng(seed).permutation(len(labels))
    half = len(order) // 2
    if half < 1:
        return {"error": "calibration needs at least two examples"}
    index = search.Index(index_distance).add(embeddings[order[:half]], order[:half],
                                             labels=np.asarray(labels)[order[:half]])
    report = {"target_precision": float(target_precision), "distance": index_distance,
              "num_index": int(half), "num_queries": int(len(order) - half), "seed": int(seed)}
    try:
        cal = search.calibrate(index, embeddings[order[half:]], np.asarray(labels)[order[half:]],
                               target_precision=target_precision)
    except ValueError as err:
        return {**report, "error": str(err)}
    report.update({"threshold": cal.threshold, **{k: v for k, v in
                                                  cal.at(cal.threshold).items()
                                                  if k != "threshold"}})
    if out_dir is not None:
        cal.plot(os.path.join(out_dir, "calibration.png"))
    return report


def _split_title(split):
    """'test split, classes 5, 6, 7, 8, 9' (shortened beyond 12 classes)."""
    names = list((getattr(split, "class_names", None) or {}).values())
    shown = ", ".join(names[:12]) + (f", ... ({len(names)} classes)" if len(names) > 12 else "")
    return f"{getattr(split, 'name', 'evaluated')} split" + (f", classes {shown}" if names else "")


def _jsonable(results):
    out = {}
    for k, v in results.items():
        if isinstance(v, (np.integer, int)):
            out[k] = int(v)
        else:
            v = float(v)
            out[k] = None if np.isnan(v) else v
    return out


BASELINES = ("raw_pixels",)


def verification_pairs(embeddings, labels, distance, seed, num_pairs):
    """The verification pairs of ``labels`` (:func:`tfdml.metrics.sample_pairs`,
    the pairs of the ``verification`` metrics and of the plots) with their
    scores, as ``evaluate_embeddings``'s ``details["pairs"]``; None when the
    labels give no pairs."""
    from tfdml import metrics as tm

    try:
        first, second, issame, _ = tm.sample_pairs(labels, num_pairs=num_pairs, seed=seed)
    except ValueError:
        return None
    scores, values = tm.pair_scores(embeddings, first, second, distance)
    return dict(issame=issame, scores=scores, values=values)


def baseline_vectors(name, split, batch_size=256, verbose=0):
    """``(vectors, labels)`` of a model-free baseline on ``split``
    (``"raw_pixels"``: each image flattened and L2-normalised)."""
    import tensorflow as tf

    if name not in BASELINES:
        raise EvaluationError(f"Unknown baseline {name!r}; choose one of {', '.join(BASELINES)}.")

    def raw_pixels(x):
        flat = tf.reshape(tf.cast(x, tf.float32), [tf.shape(x)[0], -1])
        return tf.math.l2_normalize(flat, axis=1)

    if verbose:
        print("Scoring the raw-pixel baseline ...")
    return embed(raw_pixels, split.dataset(), int(len(split.labels)), batch_size, verbose=0)


def baseline_metrics(name, split, metrics, ks, distance="euclidean", batch_size=256,
                     chunk_size=None, seed=0, num_pairs=6000, verbose=0, return_details=False,
                     pr_levels=None):
    """The metrics of a model-free baseline on ``split``.

    ``"raw_pixels"``: each image flattened and L2-normalised, the reference
    the issue tracker and the README compare the main job with.
    ``return_details`` / ``pr_levels``: as in
    :func:`tfdml.metrics.evaluate_embeddings` (for the plots, which draw the
    baseline's PR curve and ROC next to the model's).
    """
    from tfdml import metrics as tm

    vectors, labels = baseline_vectors(name, split, batch_size, verbose)
    return tm.evaluate_embeddings(vectors, labels, metrics, ks, distance=distance,
                                  chunk_size=chunk_size, seed=seed, num_pairs=num_pairs,
                                  pr_levels=pr_levels, return_details=return_details)


def _cell(value):
    return str(int(value)) if isinstance(value, (int, np.integer)) else f"{float(value):.4f}"


def format_table(results, baseline=None, baseline_name="baseline"):
    """Text table of the results, with a column for a baseline's when given
    (figures right-aligned under their column's name)."""
    width = max([len("metric")] + [len(k) for k in results])
    columns = [("value" if baseline is None else "model", results)]
    if baseline is not None:
        columns.append((baseline_name, baseline))
    widths = [max([len(name)] + [len(_cell(v)) for v in figures.values()]) for name, figures in columns]
    lines = [f"{'metric':<{width}}" + "".join(f"  {name:>{w}}" for (name, _), w in zip(columns, widths)),
             "-" * width + "".join(f"  {'-' * w}" for w in widths)]
    for key in results:
        lines.append(f"{key:<{width}}" + "".join(
            f"  {_cell(figures[key]) if key in figures else '-':>{w}}"
            for (_, figures), w in zip(columns, widths)))
    return "\n".join(lines)


# --------------------------------------------------------------------------- CLI


def build_parser():
    p = argparse.ArgumentParser(
        prog="evaluate.py",
        description="Evaluate an embedding model: retrieval, clustering and verification "
                    "metrics, metrics.json and PNG plots.",
        epilog="Ranking and ties: every distance ranks on one score (cosine first puts the "
               "embeddings on the unit sphere, where cos = 1 - d^2/2), so unit-norm "
               "embeddings get the same neighbours and the same metrics by cosine and by "
               "euclidean. Retrieval metrics rank a negative tied with a positive before it "
               "(ties never raise a metric, and the metrics do not depend on the order of "
               "the data); neighbour lists (the retrieval grid, search.py) put equal "
               "distances lower index first. See tfdml.metrics.retrieval and "
               "tfdml.metrics.knn.")
    p.add_argument("--model", required=True, help="a .keras file or a SavedModel directory")
    p.add_argument("--config", help="a train.py YAML; its data: and evaluation: sections are used")
    p.add_argument("--data", help="data source name (overrides the config), e.g. mnist5k, digits")
    p.add_argument("--split", default=None, help="split to evaluate (default: test)")
    p.add_argument("--out", default=None,
                   help="output directory (default: 'evaluation' next to the model)")
    p.add_argument("--metrics", nargs="+", default=None,
                   help=f"metric names (default: {' '.join(DEFAULT_METRICS)})")
    p.add_argument("--ks", nargs="+", type=int, default=None,
                   help="k of Recall@k / Precision@k (default: 1 2 4 8)")
    p.add_argument("--distance", default=None,
                   help="euclidean (default), squared_euclidean, cosine")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--chunk-size", type=int, default=None, help="queries per kNN chunk")
    p.add_argument("--num-pairs", type=int, default=6000, help="verification pairs (LFW: 6000)")
    p.add_argument("--grid", type=int, nargs=2, default=(8, 8), metavar=("QUERIES", "K"),
                   help="retrieval grid size (default 8 8; 0 0 for none)")
    p.add_argument("--no-plots", action="store_true", help="write metrics.json only")
    p.add_argument("--baseline", choices=BASELINES, default=None,
                   help="also score a model-free baseline on the same split (raw_pixels)")
    p.add_argument("--calibrate", type=float, default=None, metavar="PRECISION",
                   help="also choose a match threshold reaching this nearest-neighbour "
                        "precision on a random half of the split (e.g. 0.99)")
    p.add_argument("--save-index", default=None, metavar="PATH",
                   help="also write the embeddings as a tfdml.search.Index (.npz; ids: "
                        "positions in the split)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress bar or table")
    return p


def main(argv=None):
    """The command line; exit status 0, or 2 with a one-line message for a problem of
    the model file, the data or the options (``TFDML_DEBUG=1`` shows the traceback)."""
    args = build_parser().parse_args(argv)
    quiet_tensorflow_import()
    from tfdml import errors
    try:
        check_model_path(args.model)
        config = read_config(args.config) if args.config else {}
        source = args.data or config.get("source") or "mnist5k"
        # Source options from the config apply to the config's source only.
        kwargs = (config.get("source_kwargs") or {}) if source == config.get("source") else {}
        split_name = args.split or config.get("split") or "test"
        metrics = args.metrics or config.get("metrics") or DEFAULT_METRICS
        ks = args.ks or config.get("ks") or DEFAULT_KS
        distance = args.distance or config.get("distance") or "euclidean"
        from tfdml import metrics as tm

        tm.parse_metrics(metrics, ks)  # fail on a typo before loading anything
        tm.knn.check_distance(distance)
        if args.calibrate is not None and not 0.0 < args.calibrate <= 1.0:
            raise ValueError(f"--calibrate must be a precision in (0, 1], got {args.calibrate}.")
        out = args.out or os.path.join(os.path.dirname(os.path.abspath(args.model)), "evaluation")
        embedder = load_embedder(args.model)
        split = load_split(source, kwargs, split_name)
        run(embedder, split, out, metrics, ks, distance, batch_size=args.batch_size,
            chunk_size=args.chunk_size, seed=args.seed, num_pairs=args.num_pairs,
            grid_queries=args.grid[0], grid_k=args.grid[1], verbose=0 if args.quiet else 1,
            make_plots=not args.no_plots, baseline=args.baseline or config.get("baseline"),
            calibrate=args.calibrate, save_index=args.save_index,
            transform=model_input_transform(config.get("image_size"), config.get("image_channels")),
            extra_info={"model": os.path.abspath(args.model), "data": source,
                        "source_kwargs": kwargs, "split": split_name})
    except (EvaluationError, *errors.USER_ERROR_TYPES) as err:
        return errors.report(err, "evaluate.py: error: ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
