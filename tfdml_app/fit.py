"""A whole run from a validated config: build, train (resuming from a backup),
evaluate on the test split, export (used by ``train.py``).

This is where the data side (:mod:`pipelines`) meets the model side
(:mod:`tfdml`); neither package imports the other."""

import os
import sys
import time

import keras
import numpy as np

from tfdml import callbacks as callbacks_lib
from tfdml import files, models, runs
from tfdml_app import advice, build, evaluation, export, fit_loops, mining, summary
from tfdml_app import data as data_lib
from tfdml_app import config as config_lib
from tfdml_app.embedding import embed
from tfdml_app.errors import ExperimentError


def completed_epochs(backup_dir):
    """The number of epochs the backup in ``backup_dir`` has completed (0: none)."""
    return runs.Backup(backup_dir).epoch


def run(cfg, fresh=False, verbose=1, callbacks=(), overwrite=False):
    """Train, evaluate, export. Returns a dict of results for :func:`tfdml_app.summary.summary`.

    The output dir is locked for the run (a second run into it fails at
    once); a finished run in it is not overwritten unless ``overwrite`` (or
    ``fresh``); a backup in it is resumed only when the config still matches
    (:func:`tfdml_app.config.resume_differences`), and ``fresh`` discards it.

    ``callbacks``: extra Keras callbacks for ``model.fit`` (run after the
    built-in ones; not used by the multi-worker loop).
    """
    started = time.time()
    data_lib.check_source_options(cfg)
    if cfg["export"]["lookup"] and cfg["export"]["lookup_folder"]:  # before any work
        from pipelines import sources

        try:
            sources.image_files(cfg["export"]["lookup_folder"])
        except ValueError as err:
            raise ExperimentError(f"export.lookup_folder: {err}") from None
    # A multi-worker strategy must exist before TensorFlow runs any op.
    strategy = build.build_strategy(cfg)
    chief = build.is_chief(strategy)
    out = cfg["output_dir"]
    if not chief:
        out = os.path.join(out, "workers", str(strategy.cluster_resolver.task_id))
    try:
        os.makedirs(out, exist_ok=True)
    except (FileExistsError, NotADirectoryError, PermissionError) as err:
        raise ExperimentError(
            f"output_dir {out!r} cannot be used as a directory ({err.strerror}); set output_dir to a "
            "writable directory path."
        ) from None
    try:
        with runs.RunLock(out):
            runs.check_not_finished(out, overwrite=fresh or overwrite)
            remove_stale_temporaries(out)
            result = _run(cfg, strategy, chief, out, fresh, verbose, callbacks)
            remove_stale_temporaries(out)
    except (runs.RunError, callbacks_lib.NonFiniteError) as err:
        raise ExperimentError(str(err)) from None
    result["seconds"] = time.time() - started
    return result


def remove_stale_temporaries(out):
    """Remove the temporary files that writes of a killed run left in ``out``
    (:func:`tfdml.files.remove_stale_temporaries`; the caller holds the run lock)."""
    removed = files.remove_stale_temporaries(out)
    if removed:
        print(f"Note: removed {len(removed)} temporary file(s) left by a write that was cut short "
              f"(e.g. {os.path.relpath(removed[0], out)}).", file=sys.stderr)


def resolve_dtype_policy(cfg, saved_state):
    """``cfg`` with ``model.dtype_policy`` "auto" resolved (a copy; other values unchanged):
    a resumed run keeps the policy its backup recorded (``saved_state``: the backup's
    state, :meth:`tfdml.runs.Backup.state`, None without one), also on another CPU, so one run
    never mixes precisions; a new run takes what :func:`tfdml.models.resolve_dtype_policy`
    picks on this machine for its ``training.jit_compile``. The run's config.yaml and
    backup record the resolved policy."""
    if cfg["model"]["dtype_policy"] != models.AUTO_DTYPE_POLICY:
        return cfg
    saved = (saved_state or {}).get("config")
    if saved:  # a backup older than the key ran under the key's `absent` value
        policy = saved.get("model", {}).get("dtype_policy", config_lib.SCHEMA["model"]["dtype_policy"].absent)
    else:
        policy = models.resolve_dtype_policy(models.AUTO_DTYPE_POLICY, cfg["training"]["jit_compile"])
    return {**cfg, "model": {**cfg["model"], "dtype_policy": policy}}


def _check_resume(cfg, state, backup):
    """Refuse to resume a backup (``state``, its saved state) made with another config
    (different model or data)."""
    if state is None or "config" not in state:
        return
    differing = config_lib.resume_differences(state["config"], cfg)
    if differing:
        shown = ", ".join(differing[:8]) + (", ..." if len(differing) > 8 else "")
        raise ExperimentError(
            f"{backup.directory} holds the backup of a run with another config (differing: {shown}); "
            f"resuming would mix the two runs. Rerun with --fresh to start this config over, or set "
            f"another output_dir. (Only {', '.join(config_lib.RESUMABLE_KEYS)} may change on a resume.)"
        )


def _run(cfg, strategy, chief, out, fresh, verbose, callbacks):
    backup = runs.Backup(os.path.join(out, "backup"))
    if fresh:
        backup.remove()
        runs.clear_finished(out)
    saved_state = backup.state()
    cfg = resolve_dtype_policy(cfg, saved_state)
    _check_resume(cfg, saved_state, backup)
    config_lib.dump(cfg, os.path.join(out, "config.yaml"))
    keras.utils.set_random_seed(cfg["seed"])

    source = data_lib.build_source(cfg)
    try:
        train_split = source.split(cfg["data"]["train_split"])
        test_split = source.split(cfg["data"]["test_split"])
    except ValueError as err:
        raise ExperimentError(f"data: {err}") from None
    whole_train = train_split
    train_split, val_split = data_lib.split_validation(cfg, train_split)
    described = data_lib.describe_data(cfg, train_split, val_split, test_split)
    if verbose:
        print(summary.data_summary(described))
    design = data_lib.build_design(cfg)
    try:
        design.validate(train_split)
    except ValueError as err:
        raise ExperimentError(f"design: {err}{validation_hint(cfg, whole_train, val_split)}") from None
    input_shape = data_lib.input_shape_for(cfg, train_split.image_shape)
    # L of the losses (Hong's η, Wu's β_class): the classes the training split
    # holds, not its highest label + 1 (train_classes [5..9] are 5 classes).
    num_classes = int(train_split.num_classes)
    num_examples = int(train_split.num_examples)

    with strategy.scope():
        model = build.build_model(cfg, input_shape, num_classes, num_examples)

    state, notes = backup.restore(model)
    for note in notes:
        print(f"Note: {note}", file=sys.stderr)
    done = int(state["epoch"]) if state else 0
    if done:  # also with verbose=0 (train.py --quiet)
        print(f"Resuming from the backup after epoch {done} of {cfg['training']['epochs']} in "
              f"{backup.directory} (--fresh starts over).", file=sys.stderr)
    steps = cfg["training"]["steps_per_epoch"]
    train_ds = data_lib.train_dataset(cfg, design, train_split, skip_batches=done * steps)
    pretrain = (cfg["learned_sampler"] or {}).get("pretrain_steps", 0)
    if pretrain and not done:
        # Algorithm 1, line 2: pre-train the sampler network on its own stream of pools.
        model.pretrain_sampler(data_lib.train_dataset(cfg, design, train_split, skip_batches=10**6), pretrain)
    # The per-epoch evaluation: the validation split when there is one (the
    # test split is then scored once, at the end), else the test split, for
    # the history only: no checkpoint is selected on it.
    monitored_ds = data_lib.eval_dataset(cfg, val_split if val_split is not None else test_split)

    if cfg["strategy"] == "multi_worker":
        mining.refresh_callback(cfg, design, train_split, state)  # refused for a mined table
        history = fit_loops.fit_custom_loop(cfg, model, strategy, design, train_ds, out, backup, state, verbose)
        best = monitored = None
    else:
        history, best, monitored = fit_loops.fit_keras(cfg, model, train_ds, monitored_ds, out, backup, state, verbose,
                                   callbacks, validation=val_split is not None,
                                   objective=fit_loops.objective_on_sample(cfg, train_split, num_classes),
                                   mining=mining.refresh_callback(cfg, design, train_split, state))

    if not chief:
        # The chief's final model is model.keras; a worker keeps its weights to compare.
        files.save_weights(model, os.path.join(out, "final.weights.h5"))
    last_epoch = done + len(history.get("loss", []))
    result = {"resumed_from_epoch": done, "history": history, "output_dir": out}
    if chief:
        last_figures = None
        kept = {"epoch": last_epoch, "epochs": cfg["training"]["epochs"],
                "selected_by": "the last epoch's model"}
        if best is not None and best.best_epoch is not None and os.path.exists(best.path):
            if best.best_epoch != last_epoch:
                # The last epoch's figures too, before the selected weights replace it.
                last_figures = score_test_split(cfg, model, test_split)
                runs.load_training_state(model, best.path)
            kept.update(epoch=int(best.best_epoch), selected_by=(
                f"best {best.monitor} on the validation split ({best.monitor} {best.best:.4f})"))
        result["model"] = kept
        settings = None
        if val_split is None and cfg["strategy"] != "multi_worker":
            settings = advice.validation_split(cfg, whole_train)
        result["best_checkpoint"] = fit_loops.best_checkpoint_note(cfg, val_split, kept, settings)
        result["data"] = described
        # Without a validation split the last epoch's evaluation scored this model on the
        # test split: its embeddings serve the final evaluation.
        reuse = None
        if monitored is not None and monitored["epoch"] == last_epoch == kept["epoch"]:
            reuse = (monitored["embeddings"], monitored["labels"])
        figures, embedded = final_evaluation(cfg, model, test_split, out, verbose, kept=kept, data=described,
                                             embedded=reuse,
                                             last_epoch=last_figures and {"epoch": last_epoch,
                                                                          "metrics": last_figures})
        result.update(figures)
        if last_figures:
            result["last_epoch"] = {"epoch": last_epoch, "metrics": last_figures}
        export.export(model, out, input_shape, saved_model=cfg["export"]["saved_model"])
        if cfg["export"]["lookup"]:
            result["lookup"] = export.export_lookup(cfg, model, test_split, out, input_shape, embedded)
    runs.mark_finished(out, {"finished_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                             "epochs": cfg["training"]["epochs"],
                             "model": result.get("model"), "data": described,
                             "metrics": result.get("metrics", {})})
    # As keras.callbacks.BackupAndRestore does: a finished run leaves no backup behind,
    # and model.keras is the selected model: its checkpoint is not kept twice.
    backup.remove()
    if best is not None:
        remove_checkpoints(best.path)
    return result


def validation_hint(cfg, whole_train, val_split):
    """For a design that does not fit the training split left by
    ``data.validation`` (``val_split``): the settings that keep a validation
    split the design fits (:func:`tfdml_app.advice.validation_split`), as the end
    of the error message; "" without a validation split, or when none is found."""
    if val_split is None:
        return ""
    settings = advice.validation_split(cfg, whole_train)
    if not settings:
        return ""
    return (f" The validation split (data.validation) holds out {val_split.num_classes} of the "
            f"{whole_train.num_classes} training classes; for one that leaves the design enough, "
            f"rerun with {advice.as_options(settings)}")


def remove_checkpoints(path):
    """Remove the best checkpoint ``path`` and its folder when that is left empty."""
    if os.path.exists(path):
        os.remove(path)
    folder = os.path.dirname(path)
    if os.path.isdir(folder) and not os.listdir(folder):
        os.rmdir(folder)


def score_test_split(cfg, model, test_split):
    """The figures of ``model`` on the test split (metrics only: no files)."""
    from tfdml import metrics as metrics_lib

    ev = cfg["evaluation"]
    to_input = data_lib.model_input(cfg)
    embeddings, labels = embed(lambda x: model(to_input(x), training=False),
                                        test_split.dataset(), int(len(test_split.labels)),
                                        ev["batch_size"], verbose=0)
    values = metrics_lib.evaluate_embeddings(embeddings, labels, ev["metrics"], ev["ks"],
                                             distance=ev["distance"])
    return {k: float(v) for k, v in values.items() if np.isscalar(v)}


def final_evaluation(cfg, model, test_split, out, verbose=1, kept=None, last_epoch=None, data=None,
                     embedded=None):
    """Held-out metrics, metrics.json and the plots: the same code as evaluate.py
    (:func:`tfdml_app.evaluation.run`), which embeds the split and writes metrics.json
    once. Returns the figures (``{"metrics", "baseline"}``) and the split's
    ``(embeddings, labels)``.

    ``kept``: which model this is (``{"epoch", "epochs", "selected_by"}``),
    written to metrics.json as ``info.model``; ``last_epoch``: the last
    epoch's figures (``{"epoch", "metrics"}``) when another epoch was kept,
    written as ``last_epoch``; ``data``: :func:`tfdml_app.data.describe_data`,
    written as ``info.data``; ``embedded``: the split's ``(embeddings, labels)`` from
    ``model`` when they are at hand (not embedded again)."""

    ev = cfg["evaluation"]
    to_input = data_lib.model_input(cfg)

    def embedder(x):
        return model(to_input(x), training=False)

    try:
        evaluated = evaluation.run(
            embedder,
            test_split,
            out,
            evaluation.Options(metrics=tuple(ev["metrics"]), ks=tuple(ev["ks"]), distance=ev["distance"],
                               batch_size=ev["batch_size"], baseline=ev["baseline"], plots=ev["plots"],
                               embedding_map=ev["embedding_map"]),
            verbose=verbose,
            extra_info={"config": os.path.join(out, "config.yaml"),
                        **({"model": kept} if kept is not None else {}),
                        **({"data": data} if data is not None else {})},
            extra_record={"last_epoch": last_epoch} if last_epoch is not None else None,
            show_table=False,
            embedded=embedded,
        )
    except ValueError as err:
        raise ExperimentError(f"final evaluation on the '{test_split.name}' split: {err}") from None
    result = {"metrics": {k: float(v) for k, v in evaluated.metrics.items() if np.isscalar(v)}}
    if evaluated.baseline is not None:
        result["baseline"] = {"name": evaluated.baseline["name"], "metrics": {
            k: v for k, v in evaluated.baseline["metrics"].items() if isinstance(v, float)}}
    return result, (evaluated.embeddings, evaluated.labels)
