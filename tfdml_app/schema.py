"""The config schema: every key of a ``train.py`` config, its type, default,
valid choices and doc (:data:`SCHEMA`, the single source of truth that
:mod:`tfdml_app.config` reads configs against and ``docs/gen_config_reference.py``
renders as docs/config.md).

A field whose choices are names the library registers (losses, samplers,
backbones, designs, sources, distances) reads them from the library when a
config is validated, and holds the built-in ones (:mod:`tfdml.builtin_names`)
for the checks made before TensorFlow is imported. Importing this module
imports no TensorFlow.
"""

import copy
import math

from tfdml import builtin_names, cascade_spec, distance_names, metric_names, projection_widths
from tfdml_app.parts import NO_SAMPLER, RENAMED_SAMPLERS, WEIGHTED_SUM, _losses, _samplers

def _at_least(bound):
    """A field check: the value must be >= ``bound`` (counts and sizes)."""
    def check(value):
        return None if value >= bound else f"must be >= {bound}"
    return check


def _requiring(problem, requirement):
    """A field check by ``problem`` (value -> what is wrong, or None), which the config
    reference states as ``requirement``."""
    def check(value):
        return problem(value)
    check.requirement = requirement
    return check


class _Field:
    """One config key. ``choices``: a tuple, or a function returning one (names
    that the library registers, read when a config is validated); ``builtin``: with
    such a function, the tuple it returns when nothing but tfdml registered names
    (from :mod:`tfdml.builtin_names`: checked before TensorFlow is imported).
    ``absent``: what a saved config that does not have the key ran with, when that
    is not ``default`` (the key's default changed since it was added). ``renamed``:
    {old spelling: value} of values that have a new name: an old spelling is read
    as its new name with a ``FutureWarning`` naming it (so saved configs and
    backups keep working), and is not among the choices shown."""

    _DEFAULT = object()

    def __init__(self, types, default, choices=None, doc="", check=None, absent=_DEFAULT, builtin=None,
                 renamed=None):
        self.types = types if isinstance(types, tuple) else (types,)
        self.default = default
        self.absent = default if absent is _Field._DEFAULT else absent
        self._choices = choices
        self.builtin = builtin
        self.doc = doc
        self.check = check
        self.renamed = renamed or {}

    @property
    def choices(self):
        return self._choices() if callable(self._choices) else self._choices


_NUM = (int, float)


# The names the library registers, read from it when a config is validated
# (these modules import TensorFlow); before that, the fields' builtin names.
def _design_names():
    from pipelines import designs

    return tuple(designs.DESIGNS)


def _source_names():
    from pipelines import sources

    return tuple(sources.SOURCES)


def _validation_modes():
    from pipelines import sources

    return tuple(sources.VALIDATION_MODES)


#: The design parameters that a config's design section held beside its name before they
#: moved to design.options (read there, with a warning).
OLD_DESIGN_KEYS = ("m", "n", "p", "pairs")


def _range(spec):
    if "min" in spec:
        return f">= {spec['min']}"
    return f"in ({spec['between'][0]:g}, {spec['between'][1]:g})"


def _design_options_doc():
    """design.options' doc: each built-in design's own parameters with their defaults and
    ranges (:data:`tfdml.builtin_names.DESIGN_OPTIONS`, the classes' ``config_options``)."""
    designs = "; ".join(
        f"{name}: " + ", ".join(f"{key} ({spec['doc']}; default {spec['default']}, {_range(spec)})"
                                for key, spec in options.items())
        for name, options in builtin_names.DESIGN_OPTIONS.items())
    return ("the design's own parameters (Design.config_options; defaults filled in) and any other "
            f"keyword argument of its constructor: {designs}")


# What tfdml_app.build builds.
STRATEGIES = ("default", "mirrored", "multi_worker")
OPTIMIZERS = ("adam", "sgd", "adamw")
SCHEDULES = ("constant", "exponential_decay")


def _jit_compile_choices():
    from tfdml import models

    return models.JIT_COMPILE_CHOICES


def _dtype_policies():
    from tfdml import models

    return models.DTYPE_POLICY_CHOICES


def _distance_names():
    from tfdml.metrics import knn

    return knn.RETRIEVAL_DISTANCES


def _backbone_names():
    from tfdml import backbones

    return tuple(backbones.BACKBONES)


def _term_loss_names():
    return tuple(_losses().LOSSES)


def _loss_names():
    return _term_loss_names() + (WEIGHTED_SUM,)


#: loss.sampler values besides the registered samplers' names.
_CONFIG_SAMPLERS = (NO_SAMPLER, None)


def _sampler_names():
    return tuple(_samplers().SAMPLERS) + _CONFIG_SAMPLERS


SCHEMA = {
    "seed": _Field(int, 0, doc="global seed (weights, batches, samplers)"),
    "output_dir": _Field(str, "runs/default", doc="where the run writes everything"),
    "strategy": _Field(str, "default", STRATEGIES, doc="tf.distribute strategy"),
    "data": {
        "source": _Field(str, "mnist5k", _source_names, builtin=builtin_names.SOURCES, doc="data source"),
        "options": _Field(dict, {}, doc="keyword arguments of the source (root, dataset, ...)"),
        "train_split": _Field(str, "train"),
        "test_split": _Field(str, "test"),
        "validation": {
            "fraction": _Field((float, type(None)), None, check=lambda v: None if 0.0 < v < 1.0 else
                               "must lie strictly between 0 and 1",
                               doc="hold out this fraction of the training split for validation: the "
                                   "per-epoch evaluation, the best checkpoint; the test split is then "
                                   "scored once, at the end (None: no validation split, no best "
                                   "checkpoint)"),
            "mode": _Field(str, "classes", _validation_modes, builtin=builtin_names.VALIDATION_MODES,
                           doc="'classes': whole training classes held out (open set, as the test "
                               "split); 'examples': that fraction of each training class"),
            "seed": _Field(int, 0, doc="seed of the held-out choice (fixed, independent of the run's seed)"),
        },
    },
    "design": {
        "name": _Field(str, "m_per_class", _design_names, builtin=builtin_names.DESIGNS, doc="batch design"),
        "options": _Field(dict, {}, doc=_design_options_doc()),
    },
    "image": {
        "size": _Field((int, type(None)), None,
                       doc="the model's input, size×size (None: the data's own size); also the "
                           "folder / tfds sources' image_size when data.options does not set it, so "
                           "set it here, once"),
        "channels": _Field((int, type(None)), None,
                           doc="force 1 or 3 channels (None: the data's own); also the folder / tfds "
                               "sources' channels when data.options does not set them"),
        "augment": _Field(bool, False, doc="random resized crop (+ flip) for training"),
        "crop_scale": _Field(list, [0.5, 1.0], doc="area fraction range of the random resized crop"),
        "flip": _Field(bool, True, doc="random horizontal mirroring (with augment); assumes a mirrored "
                                        "image is the same class: set false for text, characters, glyphs"),
    },
    "model": {
        "backbone": _Field(str, "small_cnn", _backbone_names, builtin=builtin_names.BACKBONES,
                           doc="a tfdml.backbones.BACKBONES name (small_cnn and mlp: always "
                               "trained from scratch)"),
        "backbone_options": _Field(dict, {}, doc="keyword arguments of the backbone"),
        "weights": _Field((str, type(None)), None, doc="pretrained weights: None, 'imagenet', 'bundled' or a path"),
        "embedding_dim": _Field(int, 64, check=_at_least(1)),
        "normalize": _Field(bool, True, doc="L2-normalise embeddings"),
        "projection_head": _Field((list, type(None)), None,
                                  check=_requiring(projection_widths.widths_problem, projection_widths.WIDTHS_FORM),
                                  doc="SimCLR's projection head (Chen et al. 2020 §2.1, "
                                      "tfdml.projection_head): the widths of an MLP (Dense, batch "
                                      "normalisation and ReLU per hidden width, then a linear Dense "
                                      "to the last width) that maps the embeddings to what the loss "
                                      "scores, e.g. [128, 64]; trained with the model and kept in its "
                                      "checkpoints and backups, never in predictions, evaluation or "
                                      "exports, which use the embeddings; the loss's embedding size "
                                      "(proxies, memory) is then the last width; null: the loss scores "
                                      "the embeddings"),
        "cascade": _Field((dict, type(None)), None,
                          check=_requiring(cascade_spec.cascade_problem, cascade_spec.CASCADE_FORM),
                          doc="Yuan et al.'s hard-aware deeply cascaded embedding (HDC; tfdml.cascade."
                              "build_cascade_encoder): instead of one head on the backbone's output, K "
                              "Dense heads on the backbone's features at K depths, each of "
                              "model.embedding_dim / K dimensions and L2-normalised, concatenated into "
                              "the embedding that evaluation and exports use; "
                              "optimizer.head_lr_multiplier applies to "
                              "every level's head; loss.name: hdc takes its levels from here"),
        "dtype_policy": _Field(str, "auto", _dtype_policies, absent="float32",
                               builtin=builtin_names.DTYPE_POLICY_CHOICES,
                               doc="Keras dtype policy of the backbone: 'mixed_bfloat16' computes it "
                                   "in bfloat16 (variables, embedding head, embeddings and loss stay "
                                   "float32); 'auto' picks it where the CPU has bfloat16 instructions "
                                   "and the whole step is not XLA-compiled, else float32 "
                                   "(tfdml.models.resolve_dtype_policy); the run records its choice"),
    },
    "loss": {
        "name": _Field(str, "margin", _loss_names, builtin=builtin_names.LOSSES + (WEIGHTED_SUM,),
                       doc=f"a tfdml.losses.LOSSES name; '{WEIGHTED_SUM}': the weighted sum of the losses "
                           "of loss.terms (tfdml.losses.WeightedSumLoss)"),
        "options": _Field(dict, {}, doc="keyword arguments of the loss class"),
        "sampler": _Field((str, type(None)), None, _sampler_names,
                          builtin=builtin_names.SAMPLERS + _CONFIG_SAMPLERS,
                          renamed=RENAMED_SAMPLERS,
                          doc="a tfdml.samplers name; "
                              f"'{NO_SAMPLER}': no sampler, the loss forms its own tuples from the batch "
                              "(every pair or tuple its formula scores); null: the loss's default "
                              "sampler (its constructor's)"),
        "sampler_options": _Field(dict, {}, doc="keyword arguments of the sampler (None: of the loss's default)"),
        "memory": _Field((dict, type(None)), None,
                         doc="cross-batch memory (tfdml.memory; Wang et al. 2020, XBM): {size: K, "
                             "warmup_steps: S}, the anchors of each batch mined against the batch and "
                             "the last K training embeddings after S steps; None: the batch alone"),
        "terms": _Field((list, type(None)), None,
                        doc=f"with loss.name: {WEIGHTED_SUM}, the losses summed, Σ_t w_t L_t "
                            "(tfdml.losses.WeightedSumLoss; e.g. Proxy-Anchor plus multi-similarity): "
                            "a list of loss sections, each with its own name, weight (w_t), options, "
                            "sampler and sampler_options (the keys of loss.terms[i] below), checked "
                            "as a single loss is; the terms' learned parameters (proxies, β) are "
                            "trained, saved and resumed as one loss's; null: no terms"),
    },
    "learned_sampler": _Field(
        (dict, type(None)), None,
        doc="the learned sampler of Duan et al. 2019 (tfdml.dsn, DE-DSP): a sampler network that picks "
            "the training tuples from each batch's pool, trained by REINFORCE with the loss as reward "
            "(triplet and npair losses; loss.sampler empty: the loss's default sampler then serves "
            "evaluation only). Its options: tuples_per_minibatch, minibatches, baseline, diagnostics "
            "(tfdml.dsn.DSNEmbeddingModel), learning_rate (of the network's Adam), pretrain_steps (of "
            "the network alone, before training) and the network's own (tfdml.dsn.policy); {} takes "
            "the defaults; null: no learned sampler"),
    "optimizer": {
        "name": _Field(str, "adam", OPTIMIZERS),
        "learning_rate": _Field(_NUM, 1e-3),
        "weight_decay": _Field(_NUM, 0.0),
        "schedule": _Field(str, "constant", SCHEDULES),
        "decay_rate": _Field(_NUM, 0.9, doc="Hong: ×0.9 every 100 iterations"),
        "decay_steps": _Field(int, 100, check=_at_least(1)),
        "head_lr_multiplier": _Field(_NUM, 1.0, doc="learning rate × this for the embedding head (Duan §4: 10)"),
    },
    "training": {
        "epochs": _Field(int, 4),
        "steps_per_epoch": _Field(int, 60),
        "jit_compile": _Field((bool, str), False, _jit_compile_choices,
                              builtin=builtin_names.JIT_COMPILE_CHOICES,
                              doc="XLA: true compiles the whole train step (encoder included), "
                                  "'loss' only the loss and its sampler (the encoder keeps "
                                  "TensorFlow's kernels), false nothing"),
        "early_stopping_patience": _Field((int, type(None)), None, check=_at_least(1),
                                          doc="stop after this many evaluations without a better best "
                                              "checkpoint (needs data.validation; None: never stop early)"),
    },
    "evaluation": {
        "metrics": _Field(list, list(metric_names.DEFAULT_METRICS),
                          doc="tfdml.metrics.METRICS names (or recall@k / precision@k)"),
        "ks": _Field(list, list(metric_names.DEFAULT_KS), doc="the k of recall@k and precision@k"),
        "distance": _Field(str, "euclidean", _distance_names, builtin=distance_names.DISTANCES,
                           doc="distance of the retrieval metrics and plots (also read by evaluate.py)"),
        "every_n_epochs": _Field(int, 1, check=_at_least(1)),
        "batch_size": _Field(int, 256, check=_at_least(1)),
        "plots": _Field(bool, True,
                        doc="write the plots of the final evaluation (retrieval grid, distance "
                            "histogram, PR curve, ROC); false: metrics.json only"),
        "baseline": _Field((str, type(None)), None, ("raw_pixels", None),
                           doc="also score a model-free baseline on the test split (raw_pixels)"),
        "embedding_map": _Field(bool, False,
                                doc="also write a map of the test split's embeddings: projector/ "
                                    "(TensorBoard's projector: tensors, labels, image sprite) and "
                                    "embedding_map.png (t-SNE, or UMAP when installed, coloured by class)"),
        "objective_sample": _Field(int, 0, check=_at_least(0),
                                   doc="also log train_objective at each evaluation: the loss without "
                                       "importance weights over all pairs of a fixed uniform sample of "
                                       "this many training images (Hong Fig. 2); 0: off"),
    },
    "export": {
        "saved_model": _Field(bool, True,
                              doc="also write saved_model/, the encoder as a SavedModel for "
                                  "serving (model.keras is always written)"),
        "lookup": _Field(bool, False,
                         doc="also write lookup/: a SavedModel that embeds, searches the test "
                             "split and thresholds (tfdml.search.export_lookup)"),
        "lookup_folder": _Field((str, type(None)), None,
                                doc="index the images of this folder (FOLDER/<class>/<image> gives "
                                    "labels; ids: paths relative to it) instead of the test split"),
        "lookup_k": _Field(int, 10, doc="neighbours the lookup returns", check=_at_least(1)),
        "lookup_precision": _Field((float, int, type(None)), 0.99,
                                   doc="calibrate the lookup's threshold to this nearest-"
                                       "neighbour precision (None: no threshold, so is_match is "
                                       "False for every neighbour; an unreachable target "
                                       "gives the same, with a warning)",
                                   check=lambda v: None if v is None or 0 < v <= 1
                                   else "must be a precision in (0, 1] or null"),
    },
}


#: The keys of one term of ``loss.terms`` (``loss.name: weighted_sum``): a loss section of
#: its own (the fields of :data:`SCHEMA`'s ``loss``) with its weight; a term is any
#: registered loss, not a sum again.
TERM_SCHEMA = {
    "name": _Field(str, None, _term_loss_names, builtin=builtin_names.LOSSES,
                   doc="a tfdml.losses.LOSSES name (required)"),
    "weight": _Field(_NUM, 1.0, doc="the term's weight w_t",
                     check=lambda v: None if math.isfinite(v) and v >= 0 else "must be a finite number >= 0"),
    **{key: SCHEMA["loss"][key] for key in ("options", "sampler", "sampler_options")},
}


def defaults(schema=SCHEMA):
    """The full default config, as a nested dict."""
    out = {}
    for key, field in schema.items():
        out[key] = defaults(field) if isinstance(field, dict) else copy.deepcopy(field.default)
    return out
