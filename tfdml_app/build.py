"""The model side of a run: each ``build_*`` function turns one config section
into :mod:`tfdml` objects (strategy, loss, optimizer, model), so tests can
build parts alone."""

import os

import keras
import tensorflow as tf

from tfdml import cascade, cascade_spec, models
from tfdml_app import config as config_lib
from tfdml_app.errors import ExperimentError


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
            "cluster and this worker's index (see docs/guide.md, 'Multi-worker training')."
        )
    if cfg["training"]["jit_compile"]:
        raise ExperimentError(
            f"training.jit_compile={cfg['training']['jit_compile']!r} is not supported with "
            "strategy=multi_worker; set it to false."
        )
    return tf.distribute.MultiWorkerMirroredStrategy()


def build_loss(cfg, num_classes, num_examples):
    """The configured loss (see :func:`tfdml_app.loss_config.build_loss`, which validation
    already ran): ``num_classes`` is the number of classes of the training split."""
    try:
        return config_lib.build_loss(cfg, num_classes)
    except config_lib.ConfigError as err:
        raise ExperimentError(str(err)) from None


def build_optimizer(cfg, loss=None):
    """Adam / AdamW / SGD (momentum 0.9) with the configured schedule. Learning-rate
    multipliers (:mod:`tfdml.optimizers`, one mechanism for all of them): the embedding
    head's ``optimizer.head_lr_multiplier`` (Duan et al. §4: 10×; with ``model.cascade``, of
    every level's head) and the loss's own
    ``lr_multipliers`` (a proxy loss's ``proxy_lr_multiplier``); with any of them != 1
    the tfdml.optimizers variants scale those variables' learning rate."""
    from tfdml import optimizers as optimizers_lib

    o = cfg["optimizer"]
    lr = o["learning_rate"]
    if o["schedule"] == "exponential_decay":
        lr = keras.optimizers.schedules.ExponentialDecay(
            lr, decay_steps=o["decay_steps"], decay_rate=o["decay_rate"], staircase=True
        )
    levels = config_lib.cascade_levels(cfg)
    heads = ["embedding"] if levels is None else cascade.head_names(levels)
    multipliers = {head: o["head_lr_multiplier"] for head in heads}
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
    # The dtype policy applies to the encoder's layers only (the loss's state and the
    # learned sampler's network stay float32) and is not left set after the build; a
    # run resolves "auto" when it starts (tfdml_app.fit.resolve_dtype_policy).
    with models.dtype_policy_scope(m["dtype_policy"], cfg["training"]["jit_compile"]):
        try:
            backbone = models.get_backbone(m["backbone"], input_shape, **options)
        except (TypeError, ValueError, ImportError, FileNotFoundError) as err:
            raise ExperimentError(f"model: {err}") from None
        encoder = build_encoder(cfg, backbone)
    loss = build_loss(cfg, num_classes, num_examples)
    if cfg["learned_sampler"] is not None:
        model = build_dsn_model(cfg, encoder, loss)
    else:
        model = models.EmbeddingModel(encoder, projection_head=m["projection_head"], name="embedding_model")
        model.compile(
            optimizer=build_optimizer(cfg, loss),
            loss=loss,
            jit_compile=cfg["training"]["jit_compile"],
        )
    model.build((None,) + tuple(input_shape))
    return model


def build_encoder(cfg, backbone):
    """The encoder on ``backbone``: one embedding head (:func:`tfdml.models.build_encoder`),
    or with ``model.cascade`` one per level (:func:`tfdml.cascade.build_cascade_encoder`)."""
    m = cfg["model"]
    if m["cascade"] is None:
        return models.build_encoder(backbone, m["embedding_dim"], normalize=m["normalize"])
    spec = cascade_spec.resolve(m["cascade"])
    try:
        return cascade.build_cascade_encoder(backbone, layers=spec["layers"], levels=spec["levels"],
                                             embedding_dim=m["embedding_dim"])
    except ValueError as err:
        raise ExperimentError(f"model.cascade: {err}") from None


def build_dsn_model(cfg, encoder, loss):
    """Duan et al. 2019 (DE-DSP): a sampler network picks the tuples (Algorithm 1), with
    the options of the config's ``learned_sampler`` section (names checked by the
    config, :func:`tfdml_app.sampler_fit.check_learned_sampler`)."""
    from tfdml import dsn

    options = dict(cfg["learned_sampler"])
    learning_rate = options.pop("learning_rate", 1e-3)
    options.pop("pretrain_steps", None)
    kind = dsn.kind_for_loss(loss)  # the config checked that there is one
    npair = kind == "npair"
    try:
        model = dsn.DSNEmbeddingModel(
            encoder,
            sampler=kind,
            tuples_per_minibatch=options.pop("tuples_per_minibatch", cfg["design"]["options"]["n"] if npair else 16),
            minibatches=options.pop("minibatches", 4),
            baseline=options.pop("baseline", "mean"),
            diagnostics=options.pop("diagnostics", False),
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
