"""Evaluation of an embedding model on a split: metrics, ``metrics.json`` and
the plots (what ``evaluate.py`` and the end of a ``train.py`` run write)."""

import contextlib
import dataclasses
import json
import os
import shutil

import numpy as np

from tfdml.metric_names import DEFAULT_KS, DEFAULT_METRICS  # noqa: F401 - evaluate.py's defaults: the library's
from tfdml_app.embedding import _image_loader, embed, load_embedder
from tfdml_app.errors import EvaluationError


def read_config(path):
    """The keys of a train.py YAML that evaluation uses.

    The file is read by :func:`tfdml_app.config.read` and its keys and types
    are checked as train.py checks them (:func:`tfdml_app.config.check_structure`:
    a typo is refused, not ignored); of its sections, these keys are used (all
    optional)::

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
    from tfdml_app import config as config_lib
    from tfdml_app import data as data_lib

    if not os.path.isfile(path):
        raise EvaluationError(f"--config {path!r}: no such file.")
    # The one config reader and its checks of keys and types (as train.py reads it;
    # sections left out are not filled with train.py's defaults).
    config = config_lib.read(path)
    config_lib.check_structure(config)
    data = config.get("data") or {}
    image = config.get("image") or {}
    evaluation = config.get("evaluation") or {}
    source = data.get("source")
    kwargs = dict(data.get("options") or {})
    if source is not None:
        # image.size / image.channels feed the folder and tfds sources, as in training
        kwargs = data_lib.image_source_options(source, kwargs, image)
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


@dataclasses.dataclass(frozen=True)
class Options:
    """What an evaluation computes and writes (``evaluate.py``'s flags; the
    ``evaluation`` section of a ``train.py`` config).

    ``metrics`` / ``ks`` / ``distance``: as :func:`tfdml.metrics.evaluate_embeddings`;
    ``grid``: (queries, k) of the retrieval grid ((0, 0): none); ``plots``:
    write the PNGs; ``baseline="raw_pixels"``: also score the L2-normalised raw
    pixels of the same split with the same metrics (metrics.json's
    ``baseline``, printed next to the model's figures); ``calibrate=TARGET``:
    also choose a match threshold (:func:`calibration_report`), written to
    calibration.json and to metrics.json as ``calibration`` (and
    ``calibration.png``); ``save_index=PATH``: write the split's embeddings as
    a :class:`tfdml.search.Index` (ids: positions in the split; with labels);
    ``embedding_map``: also write ``projector/`` (TensorBoard's projector) and
    ``embedding_map.png`` (:mod:`tfdml.embedding_map`).
    """

    metrics: tuple = DEFAULT_METRICS
    ks: tuple = DEFAULT_KS
    distance: str = "euclidean"
    batch_size: int = 256
    chunk_size: int | None = None
    seed: int = 0
    num_pairs: int = 6000
    grid: tuple = (8, 8)
    plots: bool = True
    baseline: str | None = None
    calibrate: float | None = None
    save_index: str | None = None
    embedding_map: bool = False


@dataclasses.dataclass(frozen=True)
class Result:
    """What :func:`run` computed and wrote.

    ``metrics``: the model's figures (as :func:`tfdml.metrics.evaluate_embeddings`
    returns them); ``baseline``: ``{"name", "metrics"}`` of the baseline (JSON
    values: NaN as None) or None; ``calibration``: the calibration report or
    None; ``record``: what metrics.json holds; ``paths``: the files written
    (``metrics``, ``plots``, and ``calibration`` / ``index`` when written);
    ``embeddings``, ``labels``: the split's embeddings and labels (NumPy), for a
    caller that needs them again (a run's lookup/ index), so they are computed once.
    """

    metrics: dict
    baseline: dict | None
    calibration: dict | None
    record: dict
    paths: dict
    embeddings: object = None
    labels: object = None


def remove_earlier_plots(out_dir):
    """Remove the plots (and the projector files) that an earlier evaluation into ``out_dir``
    wrote (named in its metrics.json), so that none is left beside figures of another model: one this
    evaluation does not draw (plots off, or data that cannot support it) would stay."""
    try:
        with open(os.path.join(out_dir, "metrics.json")) as f:
            earlier = json.load(f)
        names = earlier.get("plots", [])
    except (OSError, ValueError, AttributeError):
        return
    for name in names:
        if isinstance(name, str) and os.path.basename(name) == name and name.endswith(".png"):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(out_dir, name))
    if earlier.get("projector") == "projector":
        shutil.rmtree(os.path.join(out_dir, "projector"), ignore_errors=True)


def run(model, split, out_dir, options=Options(), *, transform=None, extra_info=None, extra_record=None,
        verbose=1, show_table=True, embedded=None):
    """Embed ``split`` with ``model`` (a path or an embedder), evaluate as
    ``options`` (:class:`Options`) say, write metrics.json and the PNGs into
    ``out_dir``; returns a :class:`Result`.

    ``split``: an object with ``labels``, ``dataset()`` (unbatched (image,
    label)) and optionally ``load(indices)`` / ``images`` for the grid.
    ``transform``: optional per-batch map applied before the model (the
    training run's model-input transform, see :func:`tfdml_app.embedding.model_input_transform`).
    ``extra_info``: more keys of metrics.json's ``info``; ``extra_record``: more
    top-level keys of metrics.json (a run's ``last_epoch``). metrics.json is written
    once, whole. ``embedded``: the split's ``(embeddings, labels)`` from ``model``, in
    the split's order, when the caller has them (the split is then not embedded again).
    """
    from tfdml import metrics as tm
    from tfdml import plots

    o = options
    metrics, distance, batch_size, chunk_size, seed, num_pairs = (
        o.metrics, o.distance, o.batch_size, o.chunk_size, o.seed, o.num_pairs)
    make_plots, baseline, calibrate, save_index = o.plots, o.baseline, o.calibrate, o.save_index
    names, ks = tm.parse_metrics(metrics, o.ks)
    tm.knn.check_distance(distance)
    embedder = load_embedder(model) if isinstance(model, (str, os.PathLike)) else model
    num = int(len(split.labels))
    if embedded is not None:
        embeddings, labels = np.asarray(embedded[0]), np.asarray(embedded[1]).reshape(-1)
        if len(embeddings) != num or not np.array_equal(labels, np.asarray(split.labels).reshape(-1)):
            raise ValueError(f"the embeddings given are not those of the '{getattr(split, 'name', 'given')}' split "
                             f"({len(embeddings)} rows for its {num} examples, or labels in another order)")
    else:
        if verbose:
            print(f"Embedding {num} examples ...")
        embeddings, labels = embed(embedder, split.dataset(), num, batch_size, verbose, transform)
    results, details = tm.evaluate_embeddings(
        embeddings, labels, names, ks, distance=distance, chunk_size=chunk_size, seed=seed,
        num_pairs=num_pairs, pr_levels=np.linspace(0.0, 1.0, 101) if make_plots else None,
        per_class=True, return_details=True)

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
    remove_earlier_plots(out_dir)
    written = []
    if make_plots:
        reference = None
        if baseline is not None:
            reference = {"name": baseline.replace("_", " "), "details": baseline_details}
        written = plots.write_all(
            embeddings, labels, out_dir, distance=distance, images=_image_loader(split),
            seed=seed, num_pairs=num_pairs, grid=tuple(o.grid), chunk_size=chunk_size,
            details=details, pr_label=f"mAP {results['map']:.4f}" if "map" in results else None,
            class_names=getattr(split, "class_names", None), title=_split_title(split),
            baseline=reference)
    if o.embedding_map:
        from tfdml import embedding_map

        projector, picture = embedding_map.write(
            embeddings, labels, out_dir, images=_image_loader(split), distance=distance, seed=seed,
            class_names=getattr(split, "class_names", None), title=_split_title(split))
        written.append(picture)

    info = {"num_examples": num, "embedding_dim": int(embeddings.shape[1]),
            "distance": distance, "metrics_requested": list(names), "ks": list(ks),
            **(extra_info or {})}
    from tfdml import files

    record = {"metrics": _jsonable(results), "info": info,
              "plots": [os.path.basename(p) for p in written]}
    if o.embedding_map:
        record["projector"] = "projector"
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
    per_class = details.get("per_class")
    if per_class is not None:  # the retrieval figures of each class's queries
        tm.per_class_csv(per_class, os.path.join(out_dir, "per_class.csv"),
                         getattr(split, "class_names", None))
        record["per_class"] = "per_class.csv"
    record.update(extra_record or {})
    files.write_json(os.path.join(out_dir, "metrics.json"), record)
    if verbose:
        if show_table:  # train.py prints its own summary of the same figures
            print(format_table(results, baseline_results, baseline))
        print(f"Wrote {os.path.join(out_dir, 'metrics.json')} and "
              f"{', '.join(os.path.basename(p) for p in written)}")
    paths = {"metrics": os.path.join(out_dir, "metrics.json"), "plots": list(written)}
    if per_class is not None:
        paths["per_class"] = os.path.join(out_dir, "per_class.csv")
    if calibrate is not None:
        paths["calibration"] = os.path.join(out_dir, "calibration.json")
    if save_index is not None:
        paths["index"] = record["index"]
    return Result(metrics=results, baseline=record.get("baseline"), calibration=record.get("calibration"),
                  record=record, paths=paths, embeddings=embeddings, labels=labels)


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
