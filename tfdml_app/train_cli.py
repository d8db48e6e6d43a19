"""Train and evaluate a deep metric learning model from one YAML config.

    python train.py --config configs/default.yaml [--set key=value ...]

The config (see :mod:`tfdml_app.config` for every key) is validated before any
work starts: all of it but what needs the loss built (the values of its options,
its sampler's and its memory's, and what they ask of the batch design) before
TensorFlow is imported (the names of parts a ``--import`` module registers after
that import). The run writes into ``output_dir``:

    config.yaml          the resolved config
    history.csv          per-epoch loss and the validation split's metrics (val_*), or,
                         without data.validation, the test split's (test_*, shown only);
                         epochs counted from 1, as the progress bar and the summary
    logs/                TensorBoard logs (step: the epoch, counted from 1 too)
    backup/              the last completed epoch (a rerun resumes from it); removed
                         when the run finishes
    checkpoints/         while training with a data.validation split only:
                         best.weights.h5 (best validation MAP@R); removed when the run
                         finishes, as model.keras is then that model
    metrics.json         final held-out metrics (the test split, scored once at the end
                         with the kept model; info.model says which epoch, info.data
                         the splits and validation classes; last_epoch the last
                         epoch's figures when another epoch was kept)
    retrieval_grid.png, distance_histogram.png, pr_curve.png, roc.png
                         plots of the test split (the raw-pixel baseline drawn with
                         evaluation.baseline; none with evaluation.plots false)
    model.keras          the kept model: the best validation epoch's with a validation
                         split, else the last epoch's (the only copy of its weights)
    saved_model/         the same model as a SavedModel (serving signature images ->
                         embeddings; not with export.saved_model false)
    finished.json        written last: the run is complete

Every file is written atomically (a kill never leaves half a file). The
output dir is locked while a run uses it; a finished run is not overwritten
without ``--overwrite`` (or ``--fresh``); a backup is resumed only if the
config still matches (more epochs or other evaluation settings may change).
Without ``--config``, configs/default.yaml (the main job) is trained; an
install (``tfdml-train``) ships that file, so no checkout is needed for it.

Exit status: 0 when the run finished; 2 for a problem of the config, the
data or the model (a NaN, an unreadable file, a full disk), printed as one
line (``TFDML_DEBUG=1`` shows the traceback instead).

Training that stops (killed, Ctrl-C, crashed, NaN) can be resumed by running the same
command again: it restarts from the last completed epoch, with the optimizer
state, the loss's learned parameters and the sampler's random stream.
"""

import argparse
import os
import sys

from tfdml_app.commands import name

#: The repository root (configs/ lives there).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: What ``train.py`` trains without ``--config``: the README's main job, at this
#: path of the repository, and of this package in an install (setup.py copies
#: the repository's file there when it builds the package).
DEFAULT_CONFIG = os.path.join("configs", "default.yaml")


def default_config():
    """The path of the main job's config: the copy installed with this package
    (an install without the repository), else the repository's
    ``configs/default.yaml`` (a checkout, an editable install)."""
    packaged = os.path.join(os.path.dirname(os.path.abspath(__file__)), DEFAULT_CONFIG)
    return packaged if os.path.exists(packaged) else os.path.join(ROOT, DEFAULT_CONFIG)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog=name("train"), description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help=f"YAML config (see configs/); the main job, {DEFAULT_CONFIG}, "
                                         "if omitted (an install ships it)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set training.epochs=2 (repeatable)",
    )
    parser.add_argument("--fresh", action="store_true",
                        help="discard a backup (or a finished run) in output_dir and start over")
    parser.add_argument("--overwrite", action="store_true",
                        help="train again into an output_dir that holds a finished run")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bars: one line per epoch (loss and held-out figures)")
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help="import a Python module before reading the config, e.g. one that "
                             "registers a loss with @tfdml.losses.register (repeatable)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import importlib

    # The config's keys, types, ranges and combinations, the names of the built-in
    # parts and the sampler's fit to the loss are checked before TensorFlow is imported (which can take
    # minutes on a busy machine); with --import, which may register more names,
    # the names after the import. The loss is built with its sampler after it.
    from tfdml_app import config as config_lib

    if args.config is None:
        args.config = default_config()
        print(f"No --config given: training the main job ({args.config}).", file=sys.stderr)
    try:
        config_lib.check_structure(config_lib.read(args.config, args.set), names=not args.imports)
    except config_lib.ConfigError as err:
        print(f"Config error: {err}", file=sys.stderr)
        return 2
    from tfdml.startup import quiet_tensorflow_import

    quiet_tensorflow_import()

    if args.imports and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # modules in the working directory, as `python -m` finds them
    for module in args.imports:
        try:
            importlib.import_module(module)
        except ImportError as err:
            print(f"Error: --import {module}: {err}; put the module on PYTHONPATH or in the "
                  "working directory.", file=sys.stderr)
            return 2
    try:
        cfg = config_lib.load(args.config, args.set)
    except config_lib.ConfigError as err:
        print(f"Config error: {err}", file=sys.stderr)
        return 2

    from tfdml import errors
    from tfdml_app import fit, summary
    from tfdml_app.errors import ExperimentError

    try:
        from tfdml.callbacks import EpochSummary

        # --quiet: no progress bars, but one line per epoch with the held-out figures.
        result = fit.run(cfg, fresh=args.fresh, overwrite=args.overwrite,
                                verbose=0 if args.quiet else 1,
                                callbacks=[EpochSummary()] if args.quiet else ())
    except KeyboardInterrupt:
        backup = fit.completed_epochs(os.path.join(cfg["output_dir"], "backup"))
        kept = f"the backup after epoch {backup} is intact" if backup else "no epoch was completed yet"
        print(f"\nInterrupted: {kept}; rerun the same command to resume.", file=sys.stderr)
        return 130
    except (ExperimentError, *errors.USER_ERROR_TYPES) as err:
        return errors.report(err, "Error: ")
    print(summary.summary(cfg, result))
    return 0

