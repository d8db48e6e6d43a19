"""The training loops of a run and their callbacks: ``model.fit`` with the
per-epoch evaluation, the best checkpoint, early stopping and the backup, or
the multi-worker loop of :func:`tfdml.distributed.train_loop`."""

import json
import os

import numpy as np

from tfdml import callbacks as callbacks_lib
from tfdml import losses as losses_lib
from tfdml import runs
from tfdml_app import advice, build
from tfdml_app import mining as mining_lib
from tfdml_app import config as config_lib
from tfdml_app.data import model_input
from tfdml_app.errors import ExperimentError
from tfdml_app.parts import loss_sections


#: Prefix of the per-epoch evaluation's keys in the logs and history.csv.
VALIDATION_PREFIX, TEST_PREFIX = "val_", "test_"


def best_checkpoint_note(cfg, val_split, kept=None, validation_settings=None):
    """One line for the summary: which model model.keras / saved_model/ are
    (``kept``: the ``model`` record of the run) and on what it was selected.
    ``validation_settings``: without a validation split, the settings that give
    this run one (:func:`tfdml_app.advice.validation_split`), suggested to
    select the best epoch; None: nothing is suggested."""
    epoch = "" if kept is None else f"epoch {kept['epoch']} of {kept['epochs']}, "
    if cfg["strategy"] == "multi_worker":
        return (f"{epoch}the last epoch's: multi-worker training evaluates nothing per epoch, "
                "so no checkpoint is selected")
    if val_split is None:
        hint = (f" (to select the best epoch on a validation split, rerun with "
                f"{advice.as_options(validation_settings)})" if validation_settings else "")
        return (f"{epoch}the last epoch's: there is no validation split, and no checkpoint is "
                f"selected on test data{hint}")
    where = (f"on the validation split ({val_split.num_classes} classes, {val_split.num_examples} "
             f"examples, mode {cfg['data']['validation']['mode']})")
    if kept is not None and not kept["selected_by"].startswith("best"):
        return f"{epoch}the last epoch's: no epoch was evaluated {where}"
    ev = cfg["evaluation"]
    monitor = best_checkpoint_monitor(ev["metrics"], ev["ks"], prefix=VALIDATION_PREFIX)["monitor"]
    return f"{epoch}best {monitor} {where}"


def best_checkpoint_monitor(metrics, ks, prefix=""):
    """What "best" means for the best checkpoint: MAP@R when it is evaluated
    (the most telling retrieval figure), else the first evaluated metric, else
    the training loss."""
    from tfdml import metrics as metrics_lib

    # Figures where higher is better (not a spread such as verification_accuracy_std).
    keys = [k for k in metrics_lib.metric_keys(metrics, ks)
            if k not in metrics_lib.LOWER_IS_BETTER and not k.endswith("_std")]
    if "map@r" in keys:
        return {"monitor": prefix + "map@r", "mode": "max"}
    if keys:
        return {"monitor": prefix + keys[0], "mode": "max"}
    return {"monitor": "loss", "mode": "min"}


#: Seed of the training sample of ``evaluation.objective_sample``: one sample for
#: every run on a split, so that runs are compared on the same pairs.
OBJECTIVE_SAMPLE_SEED = 0


def objective_on_sample(cfg, split, num_classes):
    """The :class:`tfdml.callbacks.LossOnSample` of ``evaluation.objective_sample``
    (``None`` when it is 0): the configured loss without importance weights over
    all pairs of a fixed uniform sample of the training split, logged as
    ``train_objective`` (Hong et al. Fig. 2 records the loss of Eq. 10)."""
    ev = cfg["evaluation"]
    if not ev["objective_sample"]:
        return None
    plain = json.loads(json.dumps(cfg))
    for section, _ in loss_sections(plain):
        if losses_lib.LOSSES[section["name"]].supports_importance:
            section["options"]["importance"] = False
    loss = build.build_loss(plain, num_classes, int(split.num_examples))
    size = min(ev["objective_sample"], int(split.num_examples))
    rng = np.random.default_rng(OBJECTIVE_SAMPLE_SEED)
    index = np.sort(rng.choice(int(split.num_examples), size, replace=False))
    x = model_input(cfg)(split.load(index))
    labels = split.labels[index]
    y = {"label": labels,
         "class_size": np.array([split.class_sizes[int(c)] for c in labels], np.float32)}
    return callbacks_lib.LossOnSample((x, y), loss, every_n_epochs=ev["every_n_epochs"],
                                      batch_size=ev["batch_size"])


def fit_keras(cfg, model, train_ds, monitored_ds, out, backup, state, verbose, extra_callbacks=(),
               validation=False, objective=None, mining=None):
    """``model.fit`` with the per-epoch evaluation of ``monitored_ds``: the
    validation split (``validation``; keys ``val_*``, and the best checkpoint
    follows them) or the test split (keys ``test_*``, history only); with
    ``objective`` (a :class:`tfdml.callbacks.LossOnSample`), its value too; ``mining``
    (a :class:`tfdml.mining.SmartMiningRefresh`, or None) refreshes a mined table, its
    controller's state kept in the backup.

    Returns ``(history, best, embedded)``: the per-epoch logs of this session, the
    :class:`tfdml.runs.AtomicCheckpoint` of the best checkpoint (None without
    a validation split), which knows its epoch also after a resume, and, without a
    validation split, the test split's embeddings of the last epoch evaluated
    (``{"epoch", "embeddings", "labels"}``, or None)."""
    ev = cfg["evaluation"]
    state = state or {}
    prefix = VALIDATION_PREFIX if validation else TEST_PREFIX
    best = None
    if validation:
        best = runs.AtomicCheckpoint(
            os.path.join(out, "checkpoints", "best.weights.h5"),
            **best_checkpoint_monitor(ev["metrics"], ev["ks"], prefix=prefix),
            best=state.get("best"), best_epoch=state.get("best_epoch"),
        )
    stopper = None
    if best is not None and cfg["training"]["early_stopping_patience"] is not None:
        stopper = callbacks_lib.EarlyStop(best, cfg["training"]["early_stopping_patience"],
                            wait=state.get("early_stopping_wait", 0))
    history_csv = runs.HistoryCSV(os.path.join(out, "history.csv"), rows=state.get("history"))
    resolved = config_lib.plain(cfg)
    evaluator = callbacks_lib.RetrievalEvaluation(
        monitored_ds, every_n_epochs=ev["every_n_epochs"], metrics=ev["metrics"], ks=ev["ks"],
        distance=ev["distance"], prefix=prefix, keep_embeddings=not validation,
    )
    callbacks = [
        evaluator,
        *([objective] if objective is not None else []),
        callbacks_lib.NaNGuard(backup),
        # Before the backup: the epoch's controller step is part of the epoch's state.
        *([mining] if mining is not None else []),
        *([best] if best is not None else []),
        *([stopper] if stopper is not None else []),
        history_csv,
        callbacks_lib.HeldOutTensorBoard(os.path.join(out, "logs"), write_graph=False),
        # Last of the built-in ones: the epoch is complete once its backup is.
        runs.BackupCallback(backup, extra=lambda epoch: {
            "best": best.best if best is not None else None,
            "best_epoch": best.best_epoch if best is not None else None, "history": history_csv.rows,
            "early_stopping_wait": stopper.wait if stopper is not None else 0, "config": resolved,
            **mining_lib.backup_state(mining)}),
        *extra_callbacks,
    ]
    done = int(state.get("epoch", 0))
    history = model.fit(
        train_ds,
        epochs=cfg["training"]["epochs"],
        initial_epoch=done,
        steps_per_epoch=cfg["training"]["steps_per_epoch"],
        callbacks=callbacks,
        shuffle=False,  # the design already draws the batches at random
        verbose=verbose,
    )
    return ({k: [float(v) for v in vals] for k, vals in history.history.items()}, best,
            evaluator.last_embedded)


def fit_custom_loop(cfg, model, strategy, design, train_ds, out, backup, state, verbose):
    """Multi-worker training through :func:`tfdml.distributed.train_loop`
    (Keras' fit under MultiWorkerMirroredStrategy: keras-team/keras#20585)."""
    from tfdml import distributed

    state = state or {}
    done = int(state.get("epoch", 0))
    history_csv = runs.HistoryCSV(os.path.join(out, "history.csv"), rows=state.get("history"))
    resolved = config_lib.plain(cfg)

    def on_epoch_end(epoch, logs):
        history_csv.on_epoch_end(epoch, {"loss": logs["loss"]})
        backup.save(model, epoch + 1, {"history": history_csv.rows, "config": resolved})

    try:
        losses = distributed.train_loop(
            model,
            strategy,
            train_ds,
            design.batch_size,
            epochs=cfg["training"]["epochs"],
            steps_per_epoch=cfg["training"]["steps_per_epoch"],
            initial_epoch=done,
            on_epoch_end=on_epoch_end,
            verbose=verbose,
        )
    except FloatingPointError as err:
        raise ExperimentError(
            f"{err}. Last good checkpoint: {backup.describe()}; "
            "lower optimizer.learning_rate, then rerun the same command to resume."
        ) from None
    return {"loss": losses}
