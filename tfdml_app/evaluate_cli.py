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

Only two sections of a ``--config`` YAML are read (see :func:`tfdml_app.evaluation.read_config`);
command-line flags override them.
"""

import argparse
import os

from tfdml_app.commands import name
from tfdml_app.embedding import check_model_path, load_embedder, load_split, model_input_transform
from tfdml_app.errors import EvaluationError
from tfdml_app.evaluation import BASELINES, DEFAULT_KS, DEFAULT_METRICS, Options, read_config, run
from tfdml.startup import quiet_tensorflow_import


def build_parser():
    p = argparse.ArgumentParser(
        prog=name("evaluate"),
        description="Evaluate an embedding model: retrieval, clustering and verification "
                    "metrics, metrics.json and PNG plots.",
        epilog="Ranking and ties: every distance ranks on one score (cosine first puts the "
               "embeddings on the unit sphere, where cos = 1 - d^2/2), so unit-norm "
               "embeddings get the same neighbours and the same metrics by cosine and by "
               "euclidean. Retrieval metrics rank a negative tied with a positive before it "
               "(ties never raise a metric, and the metrics do not depend on the order of "
               f"the data); neighbour lists (the retrieval grid, {name('search')}) put equal "
               "distances lower index first. See tfdml.metrics.retrieval and "
               "tfdml.metrics.knn.")
    p.add_argument("--model", required=True, help="a .keras file or a SavedModel directory")
    p.add_argument("--config", help=f"a {name('train')} YAML; its data: and evaluation: sections are used")
    p.add_argument("--data", help="data source name (overrides the config), e.g. mnist5k, digits")
    p.add_argument("--split", default=None, help="split to evaluate (default: test)")
    p.add_argument("--out", default=None,
                   help="output directory (default: 'evaluation' next to the model)")
    p.add_argument("--metrics", nargs="+", default=None,
                   help=f"metric names (default: {' '.join(DEFAULT_METRICS)})")
    p.add_argument("--ks", nargs="+", type=int, default=None,
                   help=f"k of Recall@k / Precision@k (default: {' '.join(map(str, DEFAULT_KS))})")
    p.add_argument("--distance", default=None,
                   help="euclidean (default), squared_euclidean, cosine")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--chunk-size", type=int, default=None, help="queries per kNN chunk")
    p.add_argument("--num-pairs", type=int, default=6000, help="verification pairs (LFW: 6000)")
    p.add_argument("--grid", type=int, nargs=2, default=(8, 8), metavar=("QUERIES", "K"),
                   help="retrieval grid size (default 8 8; 0 0 for none)")
    p.add_argument("--no-plots", action="store_true", help="write metrics.json only")
    p.add_argument("--embedding-map", action="store_true",
                   help="also write projector/ (TensorBoard's projector) and embedding_map.png")
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
        options = Options(metrics=tuple(metrics), ks=tuple(ks), distance=distance,
                          batch_size=args.batch_size, chunk_size=args.chunk_size, seed=args.seed,
                          num_pairs=args.num_pairs, grid=tuple(args.grid), plots=not args.no_plots,
                          embedding_map=args.embedding_map,
                          baseline=args.baseline or config.get("baseline"), calibrate=args.calibrate,
                          save_index=args.save_index)
        run(embedder, split, out, options, verbose=0 if args.quiet else 1,
            transform=model_input_transform(config.get("image_size"), config.get("image_channels")),
            extra_info={"model": os.path.abspath(args.model), "data": source,
                        "source_kwargs": kwargs, "split": split_name})
    except (EvaluationError, *errors.USER_ERROR_TYPES) as err:
        return errors.report(err, f"{name('evaluate')}: error: ")
    return 0
