"""Wiring of a whole experiment from a validated config (used by train.py).

This module is where the data side (:mod:`pipelines`) meets the model side
(:mod:`tfdml`); neither package imports the other. Each ``build_*`` function
turns one config section into objects, so tests can build parts alone.
"""

import inspect
import json
import math
import os
import sys
import time

import keras
import numpy as np
import tensorflow as tf

from tfdml import config as config_lib
from tfdml import files, models, runs
from tfdml import losses as losses_lib


class ExperimentError(RuntimeError):
    """A problem with the run (data, resume, NaN) with a message naming the fix."""


# -- data -------------------------------------------------------------------------


def check_source_options(cfg):
    """Refuse ``data.options`` that the source does not take, or lacks, naming
    the source's options (before any work: the options are the source
    function's keyword arguments)."""
    from pipelines import sources

    name, options = cfg["data"]["source"], cfg["data"]["options"]
    parameters = inspect.signature(sources.SOURCES[name]).parameters
    unknown = sorted(set(options) - set(parameters))
    missing = [p for p, spec in parameters.items() if spec.default is spec.empty and p not in options]
    if unknown:
        hint = "".join(config_lib.suggest(k, list(parameters)) for k in unknown[:1])
        raise ExperimentError(
            f"data.options {unknown} are not options of the {name!r} source{hint}; "
            f"its options: {', '.join(parameters)}."
        )
    if name == "folder" and "root" not in options and not {"train_root", "test_root"} <= set(options):
        raise ExperimentError(
            "data.options of the 'folder' source needs root (root/<class>/<image>, or root/train/<class> "
            "and root/test/<class>), or both train_root and test_root."
        )
    if missing:
        raise ExperimentError(
            f"data.options lacks {missing} for the {name!r} source (e.g. data.options.{missing[0]}: ...); "
            f"its options: {', '.join(parameters)}."
        )


#: Sources that decode image files, and their options that image.size /
#: image.channels give when data.options does not.
IMAGE_FILE_OPTIONS = {"size": "image_size", "channels": "channels"}


def source_options(cfg):
    """``data.options``, completed from ``image.size`` / ``image.channels`` for
    the sources that decode image files (folder, tfds): one place for the image
    settings. An option given in ``data.options`` wins (e.g. tfds benchmarks
    load at 256 px, and image.size 224 is the model's input, cropped from it)."""
    return image_source_options(cfg["data"]["source"], cfg["data"]["options"], cfg["image"])


def image_source_options(source, options, image):
    """``options`` of ``source`` completed from the ``image`` section (also
    used by evaluate.py --config, so both load the files alike)."""
    from pipelines import sources

    options = dict(options or {})
    if source not in sources.SOURCES:
        return options
    parameters = inspect.signature(sources.SOURCES[source]).parameters
    for key, option in IMAGE_FILE_OPTIONS.items():
        if option in parameters and option not in options and image.get(key) is not None:
            options[option] = image[key]
    return options


def build_source(cfg):
    from pipelines import sources

    try:
        return sources.get_source(cfg["data"]["source"], **source_options(cfg))
    except (ValueError, FileNotFoundError, ImportError) as err:
        raise ExperimentError(f"data: {err}") from None


def build_design(cfg):
    from pipelines import designs

    d = cfg["design"]
    try:
        if d["name"] == "m_per_class":
            return designs.MPerClassDesign(m=d["m"], classes_per_batch=d["n"])
        if d["name"] == "group":
            return designs.GroupDesign(m=d["m"], n=d["n"])
        return designs.PRandomDesign(p=d["p"], pairs=d["pairs"])
    except ValueError as err:
        raise ExperimentError(f"design: {err}") from None


def input_shape_for(cfg, split_shape):
    """The model's input shape: the split's images after ``image.size`` / ``image.channels``."""
    shape = tuple(split_shape)
    if len(shape) != 3:  # feature vectors (the arrays source): nothing to resize
        return shape
    h, w, c = shape
    size, channels = cfg["image"]["size"], cfg["image"]["channels"]
    return (size or h, size or w, channels or c)


def model_input(cfg):
    """Per-batch map to the model's channels and size (pipelines.augment.to_model_input)."""
    from pipelines import augment

    size, channels = cfg["image"]["size"], cfg["image"]["channels"]

    def transform(x):
        if (channels is None and size is None) or x.shape.rank != 4:
            return x
        return augment.to_model_input(x, channels=channels or x.shape[-1], size=size)

    return transform


def train_dataset(cfg, design, split, skip_batches=0):
    """Infinite training batches ``(x, columns)`` from the design, seeded.

    With ``image.augment`` each batch gets the papers' random crop and
    horizontal flip (Wu §5, Hong §6), seeded by (seed, step).
    """
    from pipelines import augment

    augmentation = None
    if cfg["image"]["augment"]:
        size = input_shape_for(cfg, split.image_shape)[:2]
        augmentation = augment.TrainTransform(
            size=size, scale=tuple(cfg["image"]["crop_scale"]), flip=cfg["image"]["flip"]
        )
    try:
        ds = design.batches(split, seed=cfg["seed"], transform=augmentation, prefetch=False)
    except ValueError as err:
        raise ExperimentError(f"design: {err}") from None
    if skip_batches:
        ds = ds.skip(skip_batches)
    to_input = model_input(cfg)
    ds = ds.map(lambda x, y: (to_input(x), y), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


def eval_dataset(cfg, split):
    """Batched ``(x, label)`` of a split, in order, for embedding."""
    to_input = model_input(cfg)
    batch = cfg["evaluation"]["batch_size"]
    ds = split.dataset().batch(batch)
    # A known length lets Keras' predict stop without an "input ran out" warning.
    ds = ds.apply(tf.data.experimental.assert_cardinality(-(-int(split.num_examples) // batch)))
    return ds.map(lambda x, y: (to_input(x), y)).prefetch(tf.data.AUTOTUNE)


# -- model ------------------------------------------------------------------------


def build_strategy(cfg):
    name = cfg["strategy"]
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        strategy = tf.distribute.MirroredStrategy()
        devices = strategy.extended.worker_devices
        if cfg["training"]["jit_compile"] and strategy.num_replicas_in_sync > 1 and all(
            "CPU" in d.upper() for d in devices
        ):
            raise ExperimentError(
                f"training.jit_compile={cfg['training']['jit_compile']!r} with strategy=mirrored on "
                "split CPU devices is not supported (XLA cannot place the mirrored variables of the "
                "other logical devices); set training.jit_compile=false or use GPUs."
            )
        return strategy
    if "TF_CONFIG" not in os.environ:
        raise ExperimentError(
            "strategy=multi_worker needs the TF_CONFIG environment variable describing the "
            "cluster and this worker's index (see README, 'Multi-worker training')."
        )
    if cfg["training"]["jit_compile"]:
        raise ExperimentError(
            f"training.jit_compile={cfg['training']['jit_compile']!r} is not supported with "
            "strategy=multi_worker; set it to false."
        )
    return tf.distribute.MultiWorkerMirroredStrategy()


def build_loss(cfg, num_classes, num_examples):
    """The configured loss (see :func:`tfdml.config.build_loss`, which validation
    already ran): ``num_classes`` is the number of classes of the training split."""
    try:
        return config_lib.build_loss(cfg, num_classes)
    except config_lib.ConfigError as err:
        raise ExperimentError(str(err)) from None


def build_optimizer(cfg, loss=None):
    """Adam / AdamW / SGD (momentum 0.9) with the configured schedule. Learning-rate
    multipliers (:mod:`tfdml.optimizers`, one mechanism for all of them): the embedding
    head's ``optimizer.head_lr_multiplier`` (Duan et al. §4: 10×) and the loss's own
    ``lr_multipliers`` (a proxy loss's ``proxy_lr_multiplier``); with any of them != 1
    the tfdml.optimizers variants scale those variables' learning rate."""
    from tfdml import optimizers as optimizers_lib

    o = cfg["optimizer"]
    lr = o["learning_rate"]
    if o["schedule"] == "exponential_decay":
        lr = keras.optimizers.schedules.ExponentialDecay(
            lr, decay_steps=o["decay_steps"], decay_rate=o["decay_rate"], staircase=True
        )
    multipliers = {"embedding": o["head_lr_multiplier"]}
    multipliers.update(getattr(loss, "lr_multipliers", None) or {})
    multipliers = {key: value for key, value in multipliers.items() if value != 1.0}
    library, extra = keras.optimizers, {}
    if multipliers:
        library, extra = optimizers_lib, {"lr_multipliers": multipliers}
    if o["name"] == "adam":
        return library.Adam(lr, weight_decay=o["weight_decay"] or None, **extra)
    if o["name"] == "adamw":
        return library.AdamW(lr, weight_decay=o["weight_decay"], **extra)
    return library.SGD(lr, momentum=0.9, weight_decay=o["weight_decay"] or None, **extra)


def build_model(cfg, input_shape, num_classes, num_examples):
    m = cfg["model"]
    options = dict(m["backbone_options"])
    if m["backbone"] in models.BACKBONES:
        if m["weights"] is not None:
            raise ExperimentError(
                f"model.weights={m['weights']!r} applies to pretrained backbones only; "
                f"{m['backbone']!r} is always trained from scratch (set model.weights: null)."
            )
    else:
        # Pretrained image backbones (tfdml.backbones): weights as configured
        # (None = from scratch, never an implicit download), pipeline images in [0, 1].
        options.setdefault("weights", m["weights"])
        options.setdefault("input_range", (0.0, 1.0))
    try:
        backbone = models.get_backbone(m["backbone"], input_shape, **options)
    except (TypeError, ValueError, ImportError, FileNotFoundError) as err:
        raise ExperimentError(f"model: {err}") from None
    encoder = models.build_encoder(backbone, m["embedding_dim"], normalize=m["normalize"])
    loss = build_loss(cfg, num_classes, num_examples)
    if cfg["loss"]["sampler"] in config_lib.LEARNED_SAMPLERS:
        model = build_dsn_model(cfg, encoder, loss)
    else:
        model = models.EmbeddingModel(encoder, name="embedding_model")
        model.compile(
            optimizer=build_optimizer(cfg, loss),
            loss=loss,
            jit_compile=cfg["training"]["jit_compile"],
        )
    model.build((None,) + tuple(input_shape))
    return model


#: loss.sampler_options of the learned sampler (tfdml.dsn.DSNEmbeddingModel).
DSN_OPTIONS = ("tuples_per_minibatch", "minibatches", "baseline", "learning_rate", "pretrain_steps",
               "width", "depth", "input_size")


def build_dsn_model(cfg, encoder, loss):
    """Duan et al. 2019 (DE-DSP): a sampler network picks the tuples (Algorithm 1)."""
    from tfdml import dsn

    options = dict(cfg["loss"]["sampler_options"])
    unknown = sorted(set(options) - set(DSN_OPTIONS))
    if unknown:
        raise ExperimentError(
            f"loss.sampler_options {unknown} are not options of the learned sampler; "
            f"valid: {', '.join(DSN_OPTIONS)}."
        )
    learning_rate = options.pop("learning_rate", 1e-3)
    options.pop("pretrain_steps", None)
    kind = dsn.kind_for_loss(loss)  # the config checked that there is one
    npair = kind == "npair"
    try:
        model = dsn.DSNEmbeddingModel(
            encoder,
            sampler=kind,
            tuples_per_minibatch=options.pop("tuples_per_minibatch", cfg["design"]["n"] if npair else 16),
            minibatches=options.pop("minibatches", 4),
            baseline=options.pop("baseline", "mean"),
            seed=cfg["seed"],
            sampler_options=options,
            name="embedding_model",
        )
        model.compile(
            optimizer=build_optimizer(cfg),
            loss=loss,
            dsn_optimizer=keras.optimizers.Adam(learning_rate),
            jit_compile=cfg["training"]["jit_compile"],
        )
    except (TypeError, ValueError) as err:
        raise ExperimentError(f"learned sampler: {err}") from None
    return model


# -- callbacks --------------------------------------------------------------------


class NaNGuard(keras.callbacks.Callback):
    """Stops training at the first non-finite loss or embedding with a message
    naming the step and the last good checkpoint (Keras' TerminateOnNaN stops
    silently). Embeddings are checked in the train step
    (``tfdml.models.NONFINITE_METRIC``): a loss can hide a NaN embedding
    behind a mask or a max, depending on the CPU's kernels.

    It raises :class:`ExperimentError` at once, before end-of-epoch callbacks
    could evaluate or checkpoint a broken model; the backup of the last
    completed epoch stays in place for a resume.
    """

    def __init__(self, backup):
        super().__init__()
        self.backup = backup
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        loss = logs.get("loss")
        bad_rows = logs.get(models.NONFINITE_METRIC)
        if bad_rows is not None and float(bad_rows) > 0:
            what = f"the embeddings became non-finite (NaN or Inf in {int(float(bad_rows))} row(s))"
        elif loss is not None and not math.isfinite(float(loss)):
            what = f"the loss became {float(loss)}"
        else:
            return
        raise ExperimentError(
            f"{what} at epoch {self.epoch + 1}, step {batch + 1}. "
            f"Last good checkpoint: {self.backup.describe()}. Lower optimizer.learning_rate or check the data, "
            f"then rerun the same command to resume from that checkpoint."
        )


class EarlyStop(keras.callbacks.Callback):
    """Stops ``fit`` after ``patience`` evaluations in a row without a better
    best checkpoint (``checkpoint``: the AtomicCheckpoint before it in the
    list). ``wait`` is restored from the backup, so a resumed run stops where
    an uninterrupted one would. Epochs without evaluation do not count."""

    def __init__(self, checkpoint, patience, wait=0):
        super().__init__()
        self.checkpoint, self.patience, self.wait = checkpoint, int(patience), int(wait)
        self.last_best = checkpoint.best
        self.stopped_epoch = None

    def on_epoch_end(self, epoch, logs=None):
        if (logs or {}).get(self.checkpoint.monitor) is None:
            return
        if self.checkpoint.best != self.last_best:
            self.wait, self.last_best = 0, self.checkpoint.best
            return
        self.wait += 1
        if self.wait >= self.patience:
            self.stopped_epoch = epoch
            self.model.stop_training = True


def completed_epochs(backup_dir):
    """The number of epochs the backup in ``backup_dir`` has completed (0: none)."""
    return runs.Backup(backup_dir).epoch


# -- the run ----------------------------------------------------------------------


def is_chief(strategy):
    """True on the worker that writes checkpoints, metrics and exports."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "cluster_spec", None):
        return True
    spec = resolver.cluster_spec().as_dict()
    if not spec:
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if "chief" in spec:
        return task_type == "chief"
    return task_type == "worker" and task_id == 0


def run(cfg, fresh=False, verbose=1, callbacks=(), overwrite=False):
    """Train, evaluate, export. Returns a dict of results for :func:`summary`.

    The output dir is locked for the run (a second run into it fails at
    once); a finished run in it is not overwritten unless ``overwrite`` (or
    ``fresh``); a backup in it is resumed only when the config still matches
    (:func:`tfdml.config.resume_differences`), and ``fresh`` discards it.

    ``callbacks``: extra Keras callbacks for ``model.fit`` (run after the
    built-in ones; not used by the multi-worker loop).
    """
    started = time.time()
    check_source_options(cfg)
    if cfg["export"]["lookup"] and cfg["export"]["lookup_folder"]:  # before any work
        from pipelines import sources

        try:
            sources.image_files(cfg["export"]["lookup_folder"])
        except ValueError as err:
            raise ExperimentError(f"export.lookup_folder: {err}") from None
    # A multi-worker strategy must exist before TensorFlow runs any op.
    strategy = build_strategy(cfg)
    chief = is_chief(strategy)
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
    except runs.RunError as err:
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


def _check_resume(cfg, backup):
    """Refuse to resume a backup made with another config (different model or data)."""
    state = backup.state()
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
    _check_resume(cfg, backup)
    config_lib.dump(cfg, os.path.join(out, "config.yaml"))
    keras.utils.set_random_seed(cfg["seed"])

    source = build_source(cfg)
    try:
        train_split = source.split(cfg["data"]["train_split"])
        test_split = source.split(cfg["data"]["test_split"])
    except ValueError as err:
        raise ExperimentError(f"data: {err}") from None
    train_split, val_split = split_validation(cfg, train_split)
    data = describe_data(cfg, train_split, val_split, test_split)
    if verbose:
        print(data_summary(data))
    design = build_design(cfg)
    try:
        design.validate(train_split)
    except ValueError as err:
        raise ExperimentError(f"design: {err}") from None
    input_shape = input_shape_for(cfg, train_split.image_shape)
    # L of the losses (Hong's η, Wu's β_class): the classes the training split
    # holds, not its highest label + 1 (train_classes [5..9] are 5 classes).
    num_classes = int(train_split.num_classes)
    num_examples = int(train_split.num_examples)

    with strategy.scope():
        model = build_model(cfg, input_shape, num_classes, num_examples)

    state, notes = backup.restore(model)
    for note in notes:
        print(f"Note: {note}", file=sys.stderr)
    done = int(state["epoch"]) if state else 0
    if done:  # also with verbose=0 (train.py --quiet)
        print(f"Resuming from the backup after epoch {done} of {cfg['training']['epochs']} in "
              f"{backup.directory} (--fresh starts over).", file=sys.stderr)
    steps = cfg["training"]["steps_per_epoch"]
    train_ds = train_dataset(cfg, design, train_split, skip_batches=done * steps)
    pretrain = cfg["loss"]["sampler_options"].get("pretrain_steps", 0)
    if cfg["loss"]["sampler"] in config_lib.LEARNED_SAMPLERS and pretrain and not done:
        # Algorithm 1, line 2: pre-train the sampler network on its own stream of pools.
        model.pretrain_sampler(train_dataset(cfg, design, train_split, skip_batches=10**6), pretrain)
    # The per-epoch evaluation: the validation split when there is one (the
    # test split is then scored once, at the end), else the test split, for
    # the history only: no checkpoint is selected on it.
    monitored_ds = eval_dataset(cfg, val_split if val_split is not None else test_split)

    if cfg["strategy"] == "multi_worker":
        history = _fit_custom_loop(cfg, model, strategy, design, train_ds, out, backup, state, verbose)
        best = None
    else:
        history, best = _fit_keras(cfg, model, train_ds, monitored_ds, out, backup, state, verbose,
                                   callbacks, validation=val_split is not None,
                                   objective=objective_on_sample(cfg, train_split, num_classes))

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
        result["best_checkpoint"] = best_checkpoint_note(cfg, val_split, kept)
        result["data"] = data
        result.update(final_evaluation(cfg, model, test_split, out, verbose, kept=kept, data=data,
                                       last_epoch=last_figures and {"epoch": last_epoch,
                                                                    "metrics": last_figures}))
        if last_figures:
            result["last_epoch"] = {"epoch": last_epoch, "metrics": last_figures}
        export(model, out, input_shape)
        if cfg["export"]["lookup"]:
            result["lookup"] = export_lookup(cfg, model, test_split, out, input_shape)
    runs.mark_finished(out, {"finished_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                             "epochs": cfg["training"]["epochs"],
                             "model": result.get("model"), "data": data,
                             "metrics": result.get("metrics", {})})
    # As keras.callbacks.BackupAndRestore does: a finished run leaves no backup behind,
    # and model.keras is the selected model: its checkpoint is not kept twice.
    backup.remove()
    if best is not None:
        remove_checkpoints(best.path)
    return result


def remove_checkpoints(path):
    """Remove the best checkpoint ``path`` and its folder when that is left empty."""
    if os.path.exists(path):
        os.remove(path)
    folder = os.path.dirname(path)
    if os.path.isdir(folder) and not os.listdir(folder):
        os.rmdir(folder)


def score_test_split(cfg, model, test_split):
    """The figures of ``model`` on the test split (metrics only: no files)."""
    import evaluate
    from tfdml import metrics as metrics_lib

    ev = cfg["evaluation"]
    to_input = model_input(cfg)
    embeddings, labels = evaluate.embed(lambda x: model(to_input(x), training=False),
                                        test_split.dataset(), int(len(test_split.labels)),
                                        ev["batch_size"], verbose=0)
    values = metrics_lib.evaluate_embeddings(embeddings, labels, ev["metrics"], ev["ks"],
                                             distance=ev["distance"])
    return {k: float(v) for k, v in values.items() if np.isscalar(v)}


def split_validation(cfg, train_split):
    """``(train, validation)``: the training split without the held-out part
    of ``data.validation``, and that part (None when no fraction is set)."""
    from pipelines import sources

    v = cfg["data"]["validation"]
    if v["fraction"] is None:
        return train_split, None
    try:
        return sources.hold_out(train_split, v["fraction"], mode=v["mode"], seed=v["seed"])
    except ValueError as err:
        raise ExperimentError(f"data.validation: {err}") from None


def describe_data(cfg, train_split, val_split, test_split):
    """What the run trains and evaluates on, as a JSON-able dict (metrics.json's
    ``info.data``, finished.json, the summary before training): classes and
    images of each split, the validation split's classes by name, and the
    images' shape as read and as the model takes them."""
    def split(s):
        return {"classes": int(s.num_classes), "images": int(s.num_examples)}

    out = {"source": cfg["data"]["source"], "image_shape": list(train_split.image_shape),
           "model_input": list(input_shape_for(cfg, train_split.image_shape)),
           "train": split(train_split), "validation": None, "test": split(test_split)}
    if val_split is not None:
        v = cfg["data"]["validation"]
        out["validation"] = {**split(val_split),
                             "class_names": [str(n) for n in val_split.class_names.values()],
                             "mode": v["mode"], "fraction": v["fraction"], "seed": v["seed"]}
    return out


def data_summary(data):
    """Two lines for the terminal before training (:func:`describe_data`)."""
    def shape(dims):
        return "×".join(str(d) for d in dims)

    images = f"images {shape(data['image_shape'])}"
    if data["model_input"] != data["image_shape"]:
        images += f" (model input {shape(data['model_input'])})"
    parts = [f"train {data['train']['classes']} classes, {data['train']['images']} images"]
    v = data["validation"]
    if v is not None:
        names = v["class_names"]
        shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        what = "held out of" if v["mode"] == "classes" else "examples of each class held out of"
        parts.append(f"validation {v['classes']} classes ({shown}), {v['images']} images "
                     f"({what} the training split: fraction {v['fraction']}, seed {v['seed']})")
    parts.append(f"test {data['test']['classes']} classes, {data['test']['images']} images")
    return f"data: {data['source']}, {images}\n  " + "; ".join(parts)


#: Prefix of the per-epoch evaluation's keys in the logs and history.csv.
VALIDATION_PREFIX, TEST_PREFIX = "val_", "test_"


def best_checkpoint_note(cfg, val_split, kept=None):
    """One line for the summary: which model model.keras / saved_model/ are
    (``kept``: the ``model`` record of the run) and on what it was selected."""
    epoch = "" if kept is None else f"epoch {kept['epoch']} of {kept['epochs']}, "
    if cfg["strategy"] == "multi_worker":
        return (f"{epoch}the last epoch's: multi-worker training evaluates nothing per epoch, "
                "so no checkpoint is selected")
    if val_split is None:
        return (f"{epoch}the last epoch's: there is no validation split, and no checkpoint is "
                "selected on test data (set data.validation.fraction to select the best epoch)")
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
    from tfdml import callbacks as callbacks_lib

    ev = cfg["evaluation"]
    if not ev["objective_sample"]:
        return None
    plain = json.loads(json.dumps(cfg))
    if "importance" in inspect.signature(losses_lib.LOSSES[plain["loss"]["name"]].__init__).parameters:
        plain["loss"]["options"]["importance"] = False
    loss = build_loss(plain, num_classes, int(split.num_examples))
    size = min(ev["objective_sample"], int(split.num_examples))
    rng = np.random.default_rng(OBJECTIVE_SAMPLE_SEED)
    index = np.sort(rng.choice(int(split.num_examples), size, replace=False))
    x = model_input(cfg)(split.load(index))
    labels = split.labels[index]
    y = {"label": labels,
         "class_size": np.array([split.class_sizes[int(c)] for c in labels], np.float32)}
    return callbacks_lib.LossOnSample((x, y), loss, every_n_epochs=ev["every_n_epochs"],
                                      batch_size=ev["batch_size"])


def _fit_keras(cfg, model, train_ds, monitored_ds, out, backup, state, verbose, extra_callbacks=(),
               validation=False, objective=None):
    """``model.fit`` with the per-epoch evaluation of ``monitored_ds``: the
    validation split (``validation``; keys ``val_*``, and the best checkpoint
    follows them) or the test split (keys ``test_*``, history only); with
    ``objective`` (a :class:`tfdml.callbacks.LossOnSample`), its value too.

    Returns ``(history, best)``: the per-epoch logs of this session and the
    :class:`tfdml.runs.AtomicCheckpoint` of the best checkpoint (None without
    a validation split), which knows its epoch also after a resume."""
    from tfdml import callbacks as callbacks_lib

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
        stopper = EarlyStop(best, cfg["training"]["early_stopping_patience"],
                            wait=state.get("early_stopping_wait", 0))
    history_csv = runs.HistoryCSV(os.path.join(out, "history.csv"), rows=state.get("history"))
    resolved = config_lib.plain(cfg)
    callbacks = [
        callbacks_lib.RetrievalEvaluation(
            monitored_ds, every_n_epochs=ev["every_n_epochs"], metrics=ev["metrics"], ks=ev["ks"],
            distance=ev["distance"], prefix=prefix,
        ),
        *([objective] if objective is not None else []),
        NaNGuard(backup),
        *([best] if best is not None else []),
        *([stopper] if stopper is not None else []),
        history_csv,
        callbacks_lib.HeldOutTensorBoard(os.path.join(out, "logs"), write_graph=False),
        # Last of the built-in ones: the epoch is complete once its backup is.
        runs.BackupCallback(backup, extra=lambda epoch: {
            "best": best.best if best is not None else None,
            "best_epoch": best.best_epoch if best is not None else None, "history": history_csv.rows,
            "early_stopping_wait": stopper.wait if stopper is not None else 0, "config": resolved}),
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
    return {k: [float(v) for v in vals] for k, vals in history.history.items()}, best


def _fit_custom_loop(cfg, model, strategy, design, train_ds, out, backup, state, verbose):
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


def final_evaluation(cfg, model, test_split, out, verbose=1, kept=None, last_epoch=None, data=None):
    """Held-out metrics, metrics.json and the plots: the same code as evaluate.py.

    ``kept``: which model this is (``{"epoch", "epochs", "selected_by"}``),
    written to metrics.json as ``info.model``; ``last_epoch``: the last
    epoch's figures (``{"epoch", "metrics"}``) when another epoch was kept,
    written as ``last_epoch``; ``data``: :func:`describe_data`, written as
    ``info.data``."""
    import evaluate

    ev = cfg["evaluation"]
    to_input = model_input(cfg)

    def embedder(x):
        return model(to_input(x), training=False)

    try:
        values = evaluate.run(
            embedder,
            test_split,
            out,
            metrics=ev["metrics"],
            ks=ev["ks"],
            distance=ev["distance"],
            batch_size=ev["batch_size"],
            verbose=verbose,
            extra_info={"config": os.path.join(out, "config.yaml"),
                        **({"model": kept} if kept is not None else {}),
                        **({"data": data} if data is not None else {})},
            baseline=ev["baseline"],
            show_table=False,
        )
    except ValueError as err:
        raise ExperimentError(f"final evaluation on the '{test_split.name}' split: {err}") from None
    result = {"metrics": {k: float(v) for k, v in values.items() if np.isscalar(v)}}
    path = os.path.join(out, "metrics.json")
    with open(path) as f:
        record = json.load(f)
    if ev["baseline"]:
        baseline = record["baseline"]
        result["baseline"] = {"name": baseline["name"], "metrics": {
            k: v for k, v in baseline["metrics"].items() if isinstance(v, float)}}
    if last_epoch is not None:
        files.write_json(path, {**record, "last_epoch": last_epoch})
    return result


def export(model, out, input_shape):
    """``model.keras`` and ``saved_model/``, each replaced atomically. ``saved_model/``
    holds the encoder (the same embedding function as ``model``), not the loss's state
    (proxies, learned margins, seeds): serving needs none of it."""
    import shutil

    files.save_model(model, os.path.join(out, "model.keras"))
    target = os.path.join(out, "saved_model")
    staging, old = f"{target}.partial", f"{target}.old"
    for leftover in (staging, old):
        shutil.rmtree(leftover, ignore_errors=True)
    served = getattr(model, "encoder", None)
    (served if isinstance(served, keras.Model) else model).export(staging, verbose=False)
    if os.path.exists(target):
        os.replace(target, old)
    os.replace(staging, target)
    shutil.rmtree(old, ignore_errors=True)


def export_lookup(cfg, model, test_split, out, input_shape):
    """``lookup/`` (:func:`tfdml.search.export_lookup`) over the test split, and ``lookup.json``.

    The index holds every test example under its position in the split (int64
    ids) with its label; the threshold is calibrated to
    ``export.lookup_precision`` on a seeded half/half split of the same
    embeddings (:func:`evaluate.calibration_report`). Without a threshold (the
    target is unreachable, or ``lookup_precision`` is null) ``is_match`` is
    False for every neighbour, never True; ``lookup.json``'s ``is_match`` says
    which rule holds, and :func:`summary` prints it. Like ``saved_model/``, the
    lookup takes model inputs (after the run's image transform).
    """
    import evaluate
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
        embeddings, labels = evaluate.embed(embedder, test_split.dataset(), int(len(test_split.labels)),
                                            ev["batch_size"], verbose=0)
        ids, what = np.arange(len(embeddings), dtype=np.int64), f"positions in the '{test_split.name}' split"
    distance = "cosine" if ev["distance"] == "cosine" else "euclidean"
    index = search.Index(distance).add(embeddings, ids, labels=labels)
    calibration = None
    if ex["lookup_precision"] is not None:
        calibration = evaluate.calibration_report(embeddings, labels, distance,
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


def summary(cfg, result):
    if "metrics" not in result:  # a non-chief worker of a multi-worker run
        return (
            f"worker finished: {len(result['history'].get('loss', []))} epoch(s), "
            f"weights in {os.path.join(result['output_dir'], 'final.weights.h5')}; "
            "the chief writes the metrics and the export."
        )
    lines = [
        "",
        "=" * 60,
        f"tfdml run: {cfg['loss']['name']} loss, {cfg['design']['name']} design, "
        f"{cfg['data']['source']} data",
        f"output: {result['output_dir']}   time: {result['seconds']:.0f}s"
        + (f"   (resumed after epoch {result['resumed_from_epoch']})" if result["resumed_from_epoch"] else ""),
        f"model.keras and saved_model/: {result.get('best_checkpoint', 'the last epoch')}",
        "held-out metrics (the test split, scored once after training, with that model):",
    ]
    baseline, last = result.get("baseline"), result.get("last_epoch")
    width = max([16] + [len(k) for k in result["metrics"]])
    columns = [("model", None, 7)]
    if last:
        columns.append((f"epoch {last['epoch']}", last["metrics"], 8))
    if baseline:
        columns.append((baseline["name"], baseline["metrics"], max(10, len(baseline["name"]))))
    if len(columns) > 1:
        lines.append(f"  {'':<{width}} " + "  ".join(f"{name:>{w}}" for name, _, w in columns))
    for key, value in result["metrics"].items():
        if key.startswith("num_"):  # counts (num_queries, ...), not figures
            lines.append(f"  {key:<{width}} {int(value):>7d}")
        elif isinstance(value, float):
            cells = [f"{value:>7.4f}"] + [
                f"{figures[key]:>{w}.4f}" if key in figures else f"{'-':>{w}}"
                for _, figures, w in columns[1:]]
            lines.append(f"  {key:<{width}} " + "  ".join(cells))
    if last:
        lines.append(f"  (epoch {last['epoch']}: the last epoch's model, not kept)")
    if baseline:
        lines += baseline_warnings(result["metrics"], baseline)
    if "lookup" in result:
        lines.append(f"lookup: {os.path.join(result['output_dir'], 'lookup')}; "
                     f"is_match: {result['lookup']['is_match']}")
    lines.append("=" * 60)
    return "\n".join(lines)


def baseline_warnings(metrics, baseline):
    """One line per figure on which the model-free baseline beats the model."""
    from tfdml.metrics import LOWER_IS_BETTER

    out = []
    for key, value in metrics.items():
        other = baseline["metrics"].get(key)
        if (key.startswith("num_") or key.endswith("_std") or not isinstance(value, float)
                or not isinstance(other, float)):
            continue
        lower = key in LOWER_IS_BETTER
        if (other < value) if lower else (other > value):
            out.append(f"warning: {baseline['name']} beat the model on {key} ({other:.4f} against "
                       f"{value:.4f}{'; lower is better' if lower else ''})")
    return out
