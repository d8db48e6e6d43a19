"""The loss and its sampler of a config, as the library builds them.

:func:`build_loss` turns the ``loss`` section into a :mod:`tfdml.losses`
object with its :mod:`tfdml.samplers` sampler; :func:`check_loss` builds it
once while a config is validated (:func:`tfdml_app.config.validate`), so
whatever the library would refuse is refused before any work. The names of
losses and samplers, and which of them fit together, are read from the
library (the registries, each sampler's ``kind`` against each loss's
``sampler_kinds``), never copied here.
"""

from tfdml import cascade_spec
from tfdml_app import sampler_fit
from tfdml_app.parts import (  # noqa: F401 - read through this module too
    LEARNED_SAMPLERS, NO_SAMPLER, WEIGHTED_SUM, ConfigError, _check_names, _check_option_names, _dsn,
    _init_parameters, _losses, _option_names, _samplers, _takes_sampler, loss_sections, suggest)


# -- the loss and its sampler, as the library sees them ---------------------------

#: ``num_classes`` of a loss built while a config is validated, before the data
#: is read (the fewest a training split can have); a run passes the real count.
VALIDATION_NUM_CLASSES = 2


#: Loss arguments a run fills in itself (:func:`build_loss`), with where their value comes from;
#: ``loss.options`` may not set them.
RUN_ARGUMENTS = {"num_classes": "the number of classes of the training split",
                 "embedding_dim": "model.embedding_dim (with model.projection_head: its last width)",
                 "levels": "the number of levels of model.cascade"}
#: The run arguments that ``loss.options`` may set to null, and what null means.
NULLABLE_RUN_ARGUMENTS = {"num_classes": "no per-class parameters, e.g. MarginLoss without β_class"}


def loss_embedding_dim(cfg):
    """The size of what the loss scores: the last width of ``model.projection_head`` when the
    model has one (:meth:`tfdml.models.EmbeddingModel.loss_input_size`), else
    ``model.embedding_dim``."""
    head = cfg["model"]["projection_head"]
    return head[-1] if head else cfg["model"]["embedding_dim"]


def cascade_levels(cfg):
    """K, the number of level embeddings of ``model.cascade``, or None without a cascade."""
    spec = cfg["model"]["cascade"]
    return None if spec is None else cascade_spec.resolve(spec)["levels"]


def scores_cascade_levels(options):
    """True for a loss that scores the levels of a cascade encoder (``HDCLoss``): one that
    takes ``levels`` among ``options`` (its option names, or None: any), which a run sets to
    the number of levels of ``model.cascade``."""
    return options is not None and "levels" in options


def check_cascade_loss(cfg, section, options, where="loss"):
    """A loss that scores the levels of a cascade (:func:`scores_cascade_levels` of its option
    names ``options``) needs ``model.cascade`` and no projection head between them and the
    loss. Raises :class:`ConfigError`."""
    if not scores_cascade_levels(options):
        return
    name = section["name"]
    if cfg["model"]["cascade"] is None:
        raise ConfigError(f"{where}.name = {name!r} trains the levels of a cascade encoder, but model.cascade "
                          f"is null: set model.cascade, e.g. {{levels: {cascade_spec.DEFAULT_LEVELS}, layers: "
                          f"{cascade_spec.AUTO}}} (its levels are the loss's), or use another loss.")
    if cfg["model"]["projection_head"] is not None:
        raise ConfigError(f"{where}.name = {name!r} splits what it scores into the cascade's levels, but "
                          f"model.projection_head = {cfg['model']['projection_head']!r} would map the "
                          "concatenated levels to one projection first: remove model.projection_head.")


def valid_samplers(loss_name):
    """The loss.sampler names that fit ``loss_name``, from the library
    (:func:`tfdml_app.sampler_fit.valid_samplers` of the registered parts)."""
    return sampler_fit.valid_samplers(loss_name, sampler_fit.library_facts())


def _misfit(loss_name, sampler, reason, where="loss"):
    return sampler_fit.misfit(loss_name, sampler, reason, sampler_fit.library_facts(), where)


#: "pass no sampler argument" (the loss's default, or its fixed selection).
_DEFAULT = sampler_fit.DEFAULT


def _sampler_argument(section, where):
    """What to pass as ``sampler=`` to the loss class: a sampler object, None,
    or ``_DEFAULT`` (nothing: the loss's default, or its fixed selection)."""
    sampler = sampler_fit.check_sampler(section, sampler_fit.library_facts(), where)
    if sampler in (_DEFAULT, NO_SAMPLER):
        return None if sampler == NO_SAMPLER else _DEFAULT
    try:
        return _samplers().get({"name": sampler, **section["sampler_options"]})
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}.sampler_options for {sampler!r}: {err}") from None


def build_loss(cfg, num_classes):
    """The loss of a resolved config, built by the library.

    ``loss.name`` from :data:`tfdml.losses.LOSSES` with ``loss.options``; its
    sampler from ``loss.sampler`` / ``loss.sampler_options`` (with a ``learned``
    sampler the loss keeps its default one: the DSN selects the training
    tuples); ``seed``, ``num_classes`` (the number of classes of the training
    split) and ``embedding_dim`` (:func:`loss_embedding_dim`, e.g. the size of a
    proxy loss's proxies) where the loss's constructor takes them (``loss.options`` may not
    set these two, :data:`RUN_ARGUMENTS`; it may set ``seed``). With ``loss.name:
    weighted_sum``, a :class:`tfdml.losses.WeightedSumLoss` of the ``loss.terms``, each
    built so from its own section, with their weights. Raises :class:`ConfigError` naming
    the key for anything the library refuses.
    """
    terms = [_build_one(cfg, section, where, num_classes) for section, where in loss_sections(cfg)]
    if cfg["loss"]["name"] != WEIGHTED_SUM:
        return terms[0]
    try:
        return _losses().WeightedSumLoss(terms, weights=[t["weight"] for t in cfg["loss"]["terms"]])
    except (TypeError, ValueError) as err:
        raise ConfigError(f"loss.terms: {err}") from None


def _build_one(cfg, section, where, num_classes):
    """The loss of one loss ``section`` (the config's ``loss``, or a term of it at ``where``)."""
    name = section["name"]
    cls = _losses().LOSSES[name]
    params = _init_parameters(cls)
    check_loss_options(section, _option_names(cls), where)
    sampler = _sampler_argument(section, where)
    kwargs = dict(section["options"])
    if sampler is not _DEFAULT:
        kwargs["sampler"] = sampler
    if "seed" in params:
        kwargs.setdefault("seed", cfg["seed"])
    if "num_classes" in params:
        kwargs.setdefault("num_classes", num_classes)  # loss.options may hold null only
    if "embedding_dim" in params:
        kwargs["embedding_dim"] = loss_embedding_dim(cfg)
    check_cascade_loss(cfg, section, params, where)
    if scores_cascade_levels(params):
        kwargs["levels"] = cascade_levels(cfg)
    if section.get("memory") is not None:
        kwargs["memory"] = _memory_argument(cfg, cls)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as err:
        if "sampler" in kwargs and _refuses_sampler(cls, sampler, cfg["seed"], num_classes):
            raise _misfit(name, section["sampler"], str(err), where) from None
        raise ConfigError(f"{where}.options for {name!r}: {err}") from None


def check_loss_options(section, valid, where="loss"):
    """The names in ``loss.options`` of the config's ``loss`` ``section`` (or of a term of it,
    at ``where``): options of the loss (``valid``: their names, or None: any), and none that
    a run or ``loss.memory`` sets. Raises :class:`ConfigError`."""
    _check_names(f"{where}.options", section["options"], valid, section["name"])
    if "memory" in section["options"]:
        raise ConfigError(f"{where}.options has 'memory': set the cross-batch memory in loss.memory "
                          "({size: K, warmup_steps: S}), which sizes it for what the loss scores "
                          "(model.embedding_dim, or the last width of model.projection_head).")
    for key, source in RUN_ARGUMENTS.items():
        if key in section["options"] and not (key in NULLABLE_RUN_ARGUMENTS and section["options"][key] is None):
            raise ConfigError(f"{where}.options has {key!r}: a run sets it to {source}, and any other "
                              f"value would only fail at the first batch; remove {key}"
                              + (f" (or set it to null: {NULLABLE_RUN_ARGUMENTS[key]})"
                                 if key in NULLABLE_RUN_ARGUMENTS else "") + ".")


def _memory_argument(cfg, cls):
    """``loss.memory`` as the loss's ``memory`` argument (:mod:`tfdml.memory`), with the
    embedding size of the model (so a resumed run restores it before its first step), or a
    :class:`ConfigError` saying why the loss or the sampler cannot use one (the loss itself
    refuses the importance weights with a memory that are not derived for it, and
    :func:`check_loss` the designs whose memory gives no weights)."""
    section = cfg["loss"]
    name, memory = section["name"], dict(section["memory"])
    where = f"loss.memory = {section['memory']!r}"
    if cls.memory_refusal is not None:
        takers = [n for n, c in _losses().LOSSES.items() if c.memory_refusal is None]
        raise ConfigError(f"{where}: {name} cannot use a cross-batch memory: {cls.memory_refusal}. "
                          f"Remove loss.memory, or use one of {', '.join(takers)}.")
    if cfg["learned_sampler"] is not None:
        raise ConfigError(f"{where}: learned_sampler (tfdml.dsn) draws its tuples from a pool of the "
                          "batch with its own network, not from an anchors x candidates matrix; remove "
                          "loss.memory, or use an in-graph sampler.")
    if "embedding_dim" in memory:
        raise ConfigError(f"{where}: the memory's embedding size is model.embedding_dim (or the last "
                          "width of model.projection_head); remove loss.memory.embedding_dim.")
    try:
        _memory().get(memory)  # checks the options; without embedding_dim it holds no variables yet
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}: {err}") from None
    return {**memory, "embedding_dim": loss_embedding_dim(cfg)}


def _memory():
    from tfdml import memory

    return memory


def _refuses_sampler(cls, sampler, seed, num_classes):
    """True when ``cls`` with default options refuses ``sampler`` (so an error
    is the sampler's, not the options')."""
    params = _init_parameters(cls)
    kwargs = {"sampler": sampler}
    if "seed" in params:
        kwargs["seed"] = seed
    if "num_classes" in params:
        kwargs.setdefault("num_classes", num_classes)  # loss.options may hold null only
    if "embedding_dim" in params:
        kwargs["embedding_dim"] = 2
    try:
        cls(**kwargs)
    except (TypeError, ValueError):
        return True
    return False


def _check_examples_per_class(cfg, sampler, design_cls, section_of_loss, where):
    """Refuse a batch design whose classes hold another number of examples than the sampler
    needs (its ``examples_per_class``, e.g. the N-pair sampler's 2), for the designs grouped by
    class (their ``m``); other designs are left to the loss's input checks at run time."""
    needed = getattr(sampler, "examples_per_class", None)
    if needed is None or not design_cls.grouped_by_class:
        return
    section = cfg["design"]
    m = section["options"].get("m")
    if m is not None and m != needed:
        raise ConfigError(
            f"{where}.sampler = {section_of_loss['sampler']!r} ({type(sampler).__name__}) needs exactly "
            f"{needed} examples of each class in a batch, but design.name = {section['name']!r} "
            f"has design.options.m = {m}: set design.options.m: {needed}, or choose another sampler.")


def check_loss(cfg):
    """Build the loss (and its sampler) once, as the run will, and check that
    the batch design gives it what it scores."""
    import tensorflow as tf

    # In a throwaway graph: the loss's variables (learned margins, seed state)
    # become graph nodes and no op runs, so the eager context stays
    # uninitialised and a multi-worker strategy can still be created after
    # validation (it must exist before TensorFlow runs any op).
    with tf.Graph().as_default():
        loss = build_loss(cfg, VALIDATION_NUM_CLASSES)
    parts = getattr(loss, "terms", None) if cfg["loss"]["name"] == WEIGHTED_SUM else [loss]
    for part, (section, where) in zip(parts, loss_sections(cfg)):
        _check_part(cfg, part, section, where)


def _check_part(cfg, loss, section, where):
    """What one built loss (the config's, or a term of its weighted sum: its ``section`` at
    ``where``) and its sampler ask of the batch design and the model."""
    sampler = getattr(loss, "sampler", None)
    if getattr(sampler, "requires_unit_sphere", False) and not cfg["model"]["normalize"]:
        raise ConfigError(
            f"{where}.sampler = {section['sampler']!r} ({type(sampler).__name__}) assumes "
            "unit-norm embeddings (its weights are a density on the unit sphere), but "
            "model.normalize is false: set model.normalize: true, or choose another sampler."
        )
    from pipelines import designs

    design = cfg["design"]["name"]
    two_views = [n for n, c in designs.DESIGNS.items() if c.two_views]
    if getattr(loss, "needs_two_views", False) and not designs.DESIGNS[design].two_views:
        raise ConfigError(
            f"{where}.name = {section['name']!r} pairs the two views of each image (rows sharing an "
            f"example_id), but design.name = {design!r} shows each image once: the loss would have "
            f"nothing to score. Use design {' or '.join(map(repr, two_views))}.")
    if getattr(loss, "importance", False) and designs.DESIGNS[design].two_views:
        raise ConfigError(
            f"{where} importance weights with design.name = {design!r}: the two views of an image are "
            "not a pair of the training split, so the design writes no importance columns (Hong et "
            "al.'s weights are not defined for them); set importance: false in loss.options, or use "
            "another design.")
    _check_examples_per_class(cfg, sampler, designs.DESIGNS[design], section, where)
    if getattr(loss, "memory", None) is not None and designs.DESIGNS[design].pairs_only:
        raise ConfigError(
            f"loss.memory with design.name = {design!r}: the design gives isolated pairs (a pair_id "
            "per pair), and a memory would pair every anchor with past examples the design never "
            f"pairs it with; use design "
            f"{' or '.join(repr(n) for n, c in designs.DESIGNS.items() if c.grouped_by_class)}, or "
            "remove loss.memory.")
    if (getattr(loss, "memory", None) is not None and getattr(loss, "importance", False)
            and not designs.DESIGNS[design].independent_batches):
        takers = [n for n, c in designs.DESIGNS.items() if c.independent_batches]
        raise ConfigError(
            f"loss.memory with importance weights and design.name = {design!r}: the weights of "
            "memory pairs need batches drawn independently of each other, so that the memory's "
            "composition gives each pair's sampling probability (tfdml.importance."
            "memory_pair_weights); the design's batches are not (m-per-class draws classes "
            f"without replacement within an epoch). Use design {' or '.join(map(repr, takers))}, "
            "importance: false, or no loss.memory.")
    if getattr(loss, "memory", None) is not None and getattr(loss, "importance", False):
        section = cfg["design"]
        try:
            batch = designs.DESIGNS[design].from_config(section["options"]).batch_size
        except (TypeError, ValueError):
            batch = None  # the design's own validation reports it
        if batch and loss.memory.size % batch:
            raise ConfigError(
                f"loss.memory.size = {loss.memory.size} with importance weights: the memory must hold "
                f"whole batches (tfdml.importance.memory_pair_weights), a multiple of the batch size "
                f"{batch}; use size {max(1, loss.memory.size // batch) * batch}.")
    if not designs.DESIGNS[design].pairs_only:
        return
    name = section["name"]
    if getattr(loss, "needs_tuples", False):
        what = f"{where}.name = {name!r}"
        pair_losses = [n for n, c in _losses().LOSSES.items() if not c.needs_tuples]
        fix = f"or a loss that scores single pairs ({', '.join(pair_losses)})"
    elif sampler is not None and sampler.needs_tuples:
        shown = repr(section["sampler"]) if section["sampler"] else f"empty (the default of {name})"
        what = f"{where}.sampler = {shown}, a {type(sampler).__name__} that selects {sampler.kind},"
        samplers = _samplers()
        pair_samplers = [n for n in valid_samplers(name)
                         if n in samplers.SAMPLERS and not samplers.get(n).needs_tuples]
        if NO_SAMPLER in valid_samplers(name):
            pair_samplers.append(NO_SAMPLER)
        fix = f"or a sampler of single pairs ({', '.join(pair_samplers)})"
    else:
        return
    raise ConfigError(
        f"design.name = {design!r} gives isolated pairs, but {what} needs tuples (an anchor with "
        f"positives and negatives in one batch): it would score nothing. Use design "
        f"{' or '.join(repr(n) for n, c in designs.DESIGNS.items() if c.grouped_by_class)}, {fix}."
    )
