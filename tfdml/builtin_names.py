"""The names of tfdml's built-in parts, without TensorFlow.

The registries (:data:`tfdml.losses.LOSSES`, :data:`tfdml.samplers.SAMPLERS`,
:data:`tfdml.backbones.BACKBONES`, :data:`pipelines.designs.DESIGNS`,
:data:`pipelines.sources.SOURCES`) and a few fixed choices of :mod:`tfdml.models`,
:mod:`tfdml.metrics.knn` and :mod:`pipelines.sources` live in modules that import
TensorFlow, as do the loss classes whose signatures give each loss's option
names (:data:`LOSS_OPTIONS`). The config reader (:mod:`tfdml_app.config`) checks a config against
the names listed here before it pays for that import (``train.py`` without
``--import``: with it, a module may register more names, and the registries are
read after the import). ``tests/tfdml/test_builtin_names.py`` checks that each
list equals, in order, what its registry (or the signatures) hold in a fresh
interpreter.

No imports (not even tfdml's other modules). Metric names are in
:mod:`tfdml.metric_names` and distance names in :mod:`tfdml.distance_names`.
"""

#: :data:`tfdml.losses.LOSSES`.
LOSSES = ("contrastive", "triplet", "margin", "weighted_contrastive", "balanced_contrastive", "npair",
          "precision_at_k", "stable_contrast", "robust_hard_contrastive", "histogram", "angular",
          "lifted_structured", "binomial_deviance", "multi_similarity", "circle", "facility_location",
          "ddml", "daml", "proxy_nca", "proxy_anchor", "nt_xent", "supcon", "vicreg", "barlow_twins",
          "normalized_softmax", "cosface", "arcface", "sub_center_arcface", "soft_triple", "fast_ap", "pddm",
          "hdc", "global")

#: The ``name`` default of :class:`tfdml.losses.WeightedSumLoss`: a config's ``loss.name`` for
#: a weighted sum of losses (its terms in ``loss.terms``). Not a :data:`LOSSES` name: the sum
#: is a loss of losses, not a ``MetricLoss``.
WEIGHTED_SUM_LOSS = "weighted_sum"

#: :data:`tfdml.samplers.SAMPLERS`.
SAMPLERS = ("all", "random", "random_triplets", "semi_hard", "hard", "distance_weighted", "top_k",
            "multi_similarity", "easy_hard", "pair_margin", "npair", "hdc")

#: :data:`tfdml.backbones.BACKBONES`: the from-scratch networks, EfficientNet-Lite0 and
#: the ``keras.applications`` networks (:data:`tfdml.backbones.applications.APPLICATIONS`,
#: sorted).
BACKBONES = ("small_cnn", "mlp", "efficientnet_lite0", "convnext_tiny", "efficientnet_b0", "efficientnet_b1",
             "efficientnet_b2", "efficientnet_b3", "efficientnetv2_b0", "efficientnetv2_s", "mobilenet_v2",
             "mobilenet_v3_large", "mobilenet_v3_small", "resnet101v2", "resnet50v2")

#: :data:`pipelines.designs.DESIGNS`.
DESIGNS = ("group", "p_random", "m_per_class", "two_views", "smart_mining")

#: Each design of :data:`DESIGNS` → its own parameters in a config (``design.options``):
#: ``Design.config_options`` (name → default, range, doc) of its class.
_EXAMPLES_PER_CLASS = {"default": 8, "min": 2, "doc": "examples per class",
                       "why": "a class needs two examples in a batch to give a positive pair"}
DESIGN_OPTIONS = {
    "group": {
        "m": _EXAMPLES_PER_CLASS,
        "n": {"default": 5, "min": 2, "doc": "classes per batch",
              "why": "a batch needs two classes to give negative pairs, Eq. 25 divides by n-1"},
    },
    "p_random": {
        "p": {"default": 0.5, "between": (0.0, 1.0), "doc": "probability of a positive pair",
              "why": "Eq. 24 divides by p and 1-p"},
        "pairs": {"default": 32, "min": 1, "doc": "pairs per batch", "why": "a batch holds pairs"},
    },
    "m_per_class": {
        "m": _EXAMPLES_PER_CLASS,
        "n": {"default": 5, "min": 2, "doc": "classes per batch (classes_per_batch)",
              "why": "a batch needs two classes to give negative pairs"},
    },
    "two_views": {
        "n": {"default": 5, "min": 2, "doc": "distinct images per batch (images), each shown twice",
              "why": "one image has no other image to contrast with"},
    },
    "smart_mining": {
        "n": {"default": 16, "min": 2, "doc": "triplets per batch (anchors), each anchor, positive "
              "and negative a row", "why": "a batch needs two anchors to mix mined and random negatives"},
        "k": {"default": 10, "min": 1, "doc": "mined neighbours of another class kept per example",
              "why": "the table holds at least one neighbour"},
        "hard_fraction": {"default": 0.5, "between": (0.0, 1.0),
                          "doc": "initial probability that a negative is a mined one (the controller "
                                 "changes it)", "why": "a probability; 0 or 1 leave nothing to control"},
        "refresh_every": {"default": 1, "min": 1, "doc": "epochs between refreshes of the table",
                          "why": "a count of epochs"},
        "step": {"default": 0.05, "between": (0.0, 1.0),
                 "doc": "the controller's change of hard_fraction after an epoch",
                 "why": "a change of a probability"},
    },
}

#: Each design of :data:`DESIGNS` → every name its ``design.options`` may hold
#: (``Design.option_names``: its own parameters, its constructor's arguments, their aliases).
DESIGN_OPTION_NAMES = {
    "group": ("m", "n", "batch_size"),
    "p_random": ("p", "pairs", "batch_size"),
    "m_per_class": ("m", "n", "classes_per_batch", "batch_size"),
    "two_views": ("n", "images", "batch_size"),
    "smart_mining": ("n", "k", "hard_fraction", "refresh_every", "step", "anchors", "approximate",
                     "batch_size"),
}

#: The designs of :data:`DESIGNS` whose batches hold whole groups of classes
#: (``Design.grouped_by_class``).
GROUPED_DESIGNS = ("group", "m_per_class")

#: :data:`pipelines.sources.SOURCES`.
SOURCES = ("mnist5k", "digits", "folder", "tfds", "arrays", "npz")

#: ``pipelines.sources.VALIDATION_MODES``: how a validation split is held out.
VALIDATION_MODES = ("classes", "examples")

#: ``tfdml.models.LOSS_ONLY``: the ``jit_compile`` value that compiles the loss only.
LOSS_ONLY = "loss"

#: ``tfdml.models.JIT_COMPILE_CHOICES``.
JIT_COMPILE_CHOICES = (False, True, LOSS_ONLY)

#: ``tfdml.models.DTYPE_POLICY_CHOICES``.
DTYPE_POLICY_CHOICES = ("auto", "float32", "mixed_bfloat16")

#: ``tfdml.losses.daml_forms.FORMS``: the metric objectives of DAML (``DAMLLoss(form=...)``).
DAML_FORMS = ("triplet", "contrastive", "npair", "lifted")

#: Each loss of :data:`LOSSES` → the names of its options (its constructor's keyword
#: arguments, as ``tfdml_app.loss_config`` reads them from the signature), or None when it
#: takes any: what ``loss.options`` may set.
LOSS_OPTIONS = {
    "contrastive": ("margin", "squared", "distance", "sampler", "seed", "tuple_reduction", "name", "reduction",
                    "dtype", "importance", "memory"),
    "triplet": ("margin", "squared", "sampler", "distance", "seed", "tuple_reduction", "name", "reduction",
                "dtype", "importance", "memory"),
    "margin": ("alpha", "beta0", "nu", "num_classes", "num_examples", "learn_beta0", "sampler", "distance",
               "seed", "tuple_reduction", "name", "reduction", "dtype", "importance", "memory"),
    "weighted_contrastive": ("margin", "eta", "importance", "importance_power", "squared", "distance", "seed",
                             "tuple_reduction", "name", "reduction", "dtype", "memory"),
    "balanced_contrastive": ("margin", "lam", "num_classes", "importance", "eta", "importance_power", "squared",
                             "distance", "seed", "tuple_reduction", "name", "reduction", "dtype", "memory"),
    "npair": ("l2_reg", "seed", "tuple_reduction", "name", "reduction", "dtype", "memory"),
    "precision_at_k": ("k", "gamma", "seed", "tuple_reduction", "name", "reduction", "dtype", "memory"),
    "stable_contrast": ("alpha", "beta", "sampler", "distance", "seed", "tuple_reduction", "name", "reduction",
                        "dtype", "importance", "memory"),
    "robust_hard_contrastive": ("alpha", "beta", "distance", "seed", "tuple_reduction", "name", "reduction",
                                "dtype", "importance", "memory"),
    "histogram": ("num_bins", "distance", "sampler", "seed", "tuple_reduction", "name", "reduction", "dtype",
                  "importance", "memory"),
    "angular": ("alpha", "combine_npair", "lam", "distance", "seed", "tuple_reduction", "name", "reduction",
                "dtype", "memory"),
    "lifted_structured": ("margin", "generalized", "distance", "sampler", "seed", "tuple_reduction", "name",
                          "reduction", "dtype", "memory"),
    "binomial_deviance": ("alpha", "beta", "cost", "balanced", "distance", "sampler", "seed", "tuple_reduction",
                          "name", "reduction", "dtype", "importance", "memory"),
    "multi_similarity": ("alpha", "beta", "lam", "sampler", "distance", "seed", "tuple_reduction", "name",
                         "reduction", "dtype", "memory"),
    "circle": ("m", "gamma", "sampler", "distance", "seed", "tuple_reduction", "name", "reduction", "dtype",
               "memory"),
    "facility_location": ("gamma", "refinement_steps", "nmi_average", "distance", "seed", "tuple_reduction",
                          "name", "reduction", "dtype", "memory"),
    "ddml": ("tau", "beta", "distance", "sampler", "seed", "tuple_reduction", "name", "reduction", "dtype",
             "importance", "memory"),
    "daml": ("embedding_dim", "margin", "metric_weight", "reg_weight", "adv_weight", "real_weight", "form",
             "hidden_units", "sampler", "seed", "distance", "tuple_reduction", "name", "reduction", "dtype", "memory"),
    "proxy_nca": ("num_classes", "embedding_dim", "embedding_scale", "proxy_scale", "proxy_lr_multiplier",
                  "seed", "centers_per_class", "distance", "tuple_reduction", "name", "reduction", "dtype",
                  "memory"),
    "proxy_anchor": ("num_classes", "embedding_dim", "alpha", "delta", "proxy_lr_multiplier", "seed",
                     "centers_per_class", "distance", "tuple_reduction", "name", "reduction", "dtype", "memory"),
    "nt_xent": ("temperature", "seed", "tuple_reduction", "name", "reduction", "dtype", "memory"),
    "supcon": ("temperature", "seed", "tuple_reduction", "name", "reduction", "dtype", "memory"),
    "vicreg": ("lam", "mu", "nu", "gamma", "epsilon", "seed", "tuple_reduction", "name", "reduction", "dtype",
               "memory"),
    "barlow_twins": ("lam", "seed", "tuple_reduction", "name", "reduction", "dtype", "memory"),
    "normalized_softmax": ("num_classes", "embedding_dim", "temperature", "proxy_lr_multiplier", "seed",
                           "centers_per_class", "distance", "tuple_reduction", "name", "reduction", "dtype",
                           "memory"),
    "cosface": ("num_classes", "embedding_dim", "scale", "margin", "proxy_lr_multiplier", "seed",
                "centers_per_class", "distance", "tuple_reduction", "name", "reduction", "dtype", "memory"),
    "arcface": ("num_classes", "embedding_dim", "scale", "margin", "proxy_lr_multiplier", "seed",
                "centers_per_class", "distance", "tuple_reduction", "name", "reduction", "dtype", "memory"),
    "sub_center_arcface": ("num_classes", "embedding_dim", "centers_per_class", "scale", "margin",
                           "proxy_lr_multiplier", "seed", "distance", "tuple_reduction", "name", "reduction",
                           "dtype", "memory"),
    "soft_triple": ("num_classes", "embedding_dim", "centers_per_class", "la", "gamma", "margin", "tau",
                    "proxy_lr_multiplier", "seed", "distance", "tuple_reduction", "name", "reduction", "dtype",
                    "memory"),
    "fast_ap": ("num_bins", "distance", "seed", "tuple_reduction", "name", "reduction", "dtype", "memory"),
    "pddm": ("embedding_dim", "variant", "positives", "alpha", "beta", "lam", "units", "hidden_units", "seed",
             "distance", "tuple_reduction", "name", "reduction", "dtype", "memory"),
    "hdc": ("levels", "loss", "filter_percentage", "level_weights", "seed", "tuple_reduction", "name", "reduction",
            "dtype", "memory"),
    "global": ("lam", "margin", "distance", "sampler", "seed", "tuple_reduction", "name", "reduction", "dtype",
               "memory"),
}

#: Each loss of :data:`LOSSES` → what a config's sampler checks read of its class
#: (``tfdml_app.sampler_fit.loss_facts``): the selection kinds it accepts
#: (``sampler_kinds``), whether it takes a ``sampler`` argument and needs one
#: (``sampler_required``), its default sampler's name, whether the learned sampler
#: (``tfdml.dsn``) trains it, the one distance its equation is written for
#: (``fixed_distance``) and whether it takes a ``distance``.
LOSS_SAMPLING = {
    "contrastive": {"kinds": ("pairs", "triplets"), "takes_sampler": True, "required": False, "default": None,
                    "learned": False, "distance": None, "takes_distance": True},
    "triplet": {"kinds": ("triplets",), "takes_sampler": True, "required": True, "default": "semi_hard",
                "learned": True, "distance": None, "takes_distance": True},
    "margin": {"kinds": ("pairs", "triplets"), "takes_sampler": True, "required": False,
               "default": "distance_weighted", "learned": False, "distance": None, "takes_distance": True},
    "weighted_contrastive": {"kinds": (), "takes_sampler": False, "required": False, "default": None,
                             "learned": False, "distance": None, "takes_distance": True},
    "balanced_contrastive": {"kinds": (), "takes_sampler": False, "required": False, "default": None,
                             "learned": False, "distance": None, "takes_distance": True},
    "npair": {"kinds": (), "takes_sampler": False, "required": False, "default": None, "learned": True,
              "distance": None, "takes_distance": False},
    "precision_at_k": {"kinds": ("sets",), "takes_sampler": False, "required": False, "default": None,
                       "learned": False, "distance": None, "takes_distance": False},
    "stable_contrast": {"kinds": ("triplets",), "takes_sampler": True, "required": True,
                        "default": "distance_weighted", "learned": False, "distance": None, "takes_distance": True},
    "robust_hard_contrastive": {"kinds": (), "takes_sampler": False, "required": False, "default": None,
                                "learned": False, "distance": None, "takes_distance": True},
    "histogram": {"kinds": ("pairs",), "takes_sampler": True, "required": False, "default": None,
                  "learned": False, "distance": None, "takes_distance": False},
    "angular": {"kinds": (), "takes_sampler": False, "required": False, "default": None, "learned": False,
                "distance": None, "takes_distance": False},
    "lifted_structured": {"kinds": ("pairs", "triplets"), "takes_sampler": True, "required": False,
                          "default": None, "learned": False, "distance": None, "takes_distance": True},
    "binomial_deviance": {"kinds": ("pairs", "triplets"), "takes_sampler": True, "required": False,
                          "default": None, "learned": False, "distance": "cosine", "takes_distance": True},
    "multi_similarity": {"kinds": ("pairs", "triplets"), "takes_sampler": True, "required": False,
                         "default": "multi_similarity", "learned": False, "distance": "cosine",
                         "takes_distance": True},
    "circle": {"kinds": ("pairs", "triplets"), "takes_sampler": True, "required": False, "default": None,
               "learned": False, "distance": "cosine", "takes_distance": True},
    "facility_location": {"kinds": (), "takes_sampler": False, "required": False, "default": None, "learned": False,
                        "distance": None, "takes_distance": True},
    "ddml": {"kinds": ("pairs", "triplets"), "takes_sampler": True, "required": False, "default": None,
             "learned": False, "distance": None, "takes_distance": True},
    "daml": {"kinds": ("triplets",), "takes_sampler": True, "required": True, "default": "random_triplets",
             "learned": False, "distance": "euclidean", "takes_distance": True},
    "proxy_nca": {"kinds": (), "takes_sampler": False, "required": False, "default": None, "learned": False,
                  "distance": None, "takes_distance": False},
    "proxy_anchor": {"kinds": (), "takes_sampler": False, "required": False, "default": None, "learned": False,
                     "distance": None, "takes_distance": False},
    "nt_xent": {"kinds": (), "takes_sampler": False, "required": False, "default": None, "learned": False,
              "distance": None, "takes_distance": False},
    "supcon": {"kinds": (), "takes_sampler": False, "required": False, "default": None, "learned": False,
             "distance": None, "takes_distance": False},
    "vicreg": {"kinds": (), "takes_sampler": False, "required": False, "default": None, "learned": False,
             "distance": None, "takes_distance": False},
    "barlow_twins": {"kinds": (), "takes_sampler": False, "required": False, "default": None, "learned": False,
                   "distance": None, "takes_distance": False},
    "normalized_softmax": {"kinds": (), "takes_sampler": False, "required": False, "default": None,
                          "learned": False, "distance": None, "takes_distance": False},
    "cosface": {"kinds": (), "takes_sampler": False, "required": False, "default": None,
               "learned": False, "distance": None, "takes_distance": False},
    "arcface": {"kinds": (), "takes_sampler": False, "required": False, "default": None,
               "learned": False, "distance": None, "takes_distance": False},
    "sub_center_arcface": {"kinds": (), "takes_sampler": False, "required": False, "default": None,
                          "learned": False, "distance": None, "takes_distance": False},
    "soft_triple": {"kinds": (), "takes_sampler": False, "required": False, "default": None,
                   "learned": False, "distance": None, "takes_distance": False},
    "fast_ap": {"kinds": (), "takes_sampler": False, "required": False, "default": None,
               "learned": False, "distance": None, "takes_distance": False},
    "pddm": {"kinds": (), "takes_sampler": False, "required": False, "default": None,
             "learned": False, "distance": None, "takes_distance": False},
    "hdc": {"kinds": (), "takes_sampler": False, "required": False, "default": None,
            "learned": False, "distance": None, "takes_distance": False},
    "global": {"kinds": ("pairs",), "takes_sampler": True, "required": False, "default": None,
               "learned": False, "distance": None, "takes_distance": True},
}

#: Each sampler of :data:`SAMPLERS` → what a config's sampler checks read of its class
#: (``tfdml_app.sampler_fit.sampler_facts``): its ``kind``, the names of its options
#: (None: any) and the distance it assumes (``requires_distance``).
SAMPLER_FACTS = {
    "all": {"kind": "pairs", "options": None, "distance": None},
    "random": {"kind": "pairs", "options": ("num_pairs",), "distance": None},
    "random_triplets": {"kind": "triplets", "options": ("num_triplets",), "distance": None},
    "semi_hard": {"kind": "triplets", "options": ("fallback",), "distance": None},
    "hard": {"kind": "triplets", "options": None, "distance": None},
    "distance_weighted": {"kind": "triplets", "options": ("cutoff", "nonzero_loss_cutoff", "lam", "embedding_dim"),
                          "distance": "euclidean"},
    "top_k": {"kind": "sets", "options": ("k",), "distance": None},
    "multi_similarity": {"kind": "pairs", "options": ("epsilon",), "distance": None},
    "easy_hard": {"kind": "triplets", "options": ("negative",), "distance": None},
    "pair_margin": {"kind": "pairs", "options": ("pos_margin", "neg_margin"), "distance": None},
    "npair": {"kind": "triplets", "options": None, "distance": None},
    "hdc": {"kind": "pairs", "options": ("filter_percentage",), "distance": None},
}

#: The options of a config's ``learned_sampler`` section (``tfdml_app.sampler_fit.dsn_options``):
#: the model's and the run's, then the sampler network's own (``tfdml.dsn.policy.network_options``).
LEARNED_SAMPLER_OPTIONS = ("tuples_per_minibatch", "minibatches", "baseline", "diagnostics", "learning_rate",
                           "pretrain_steps", "width", "depth", "input_size", "trunk", "channels")
