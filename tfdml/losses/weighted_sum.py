"""A weighted sum of tfdml losses (pytorch-metric-learning's ``MultipleLosses``)."""

import contextlib
import math

import keras

from tfdml.losses.base import check_scalar_reduction, refuse_sample_weight


def _resolve(loss):
    if isinstance(loss, dict):
        return keras.saving.deserialize_keras_object(loss)
    if isinstance(loss, keras.losses.Loss):
        return loss
    raise ValueError(f"WeightedSumLoss terms are loss objects or their serialised configs (a name: "
                     f"tfdml.losses.get(name, **options)); got {loss!r}.")


class _Memories:
    """The terms' cross-batch memories seen as one: ``paused()`` pauses them all (what
    :class:`tfdml.models.EmbeddingModel` does for evaluation)."""

    def __init__(self, memories):
        self.memories = list(memories)

    @contextlib.contextmanager
    def paused(self):
        with contextlib.ExitStack() as stack:
            for memory in self.memories:
                stack.enter_context(memory.paused())
            yield self

    @property
    def is_paused(self):
        return all(memory.is_paused for memory in self.memories)


@keras.saving.register_keras_serializable(package="tfdml")
class WeightedSumLoss(keras.losses.Loss):
    """``L = Σ_t w_t L_t(y, f)``: several losses on the same batch of embeddings, e.g.
    Proxy-Anchor plus multi-similarity, each with its own sampler, seed, memory and learned
    parameters (pytorch-metric-learning's ``MultipleLosses`` with ``weights``).

    Each term is a whole tfdml loss and runs exactly as it would alone (its input checks,
    its sampler's seed stream, its memory's update); the sum only adds the values. The
    terms' learned parameters (proxies, β), their learning-rate multipliers and their
    input checks are the union of the terms', so :class:`tfdml.models.EmbeddingModel`
    trains, checkpoints and checks them as for one loss.

    Args:
      losses: the terms: tfdml loss objects or their serialised configs. Their ``name`` s must differ (their state is saved under them):
        pass ``name=`` to a loss used twice.
      weights: w_t ≥ 0, one per term (default 1 each).
      name, reduction, dtype: as for ``keras.losses.Loss`` (the sum is a scalar: a scalar
        reduction leaves it as it is).
    """

    def __init__(self, losses, weights=None, name="weighted_sum", reduction="sum_over_batch_size", dtype=None):
        check_scalar_reduction(type(self).__name__, reduction)
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        if isinstance(losses, (str, dict, keras.losses.Loss)) or not losses:
            raise ValueError("WeightedSumLoss(losses=...) takes a list of at least one loss, e.g. "
                             "[ProxyAnchorLoss(num_classes=100), MultiSimilarityLoss()].")
        self.terms = [_resolve(loss) for loss in losses]
        weights = [1.0] * len(self.terms) if weights is None else list(weights)
        if len(weights) != len(self.terms):
            raise ValueError(f"WeightedSumLoss has {len(self.terms)} losses but {len(weights)} weights; "
                             "give one weight per loss.")
        for w in weights:
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
                raise ValueError(f"WeightedSumLoss weights are finite numbers >= 0, got {weights!r}.")
        self.weights = [float(w) for w in weights]
        names = [term.name for term in self.terms]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"WeightedSumLoss: two terms are named {repeated[0]!r}, and a loss's state is saved "
                             "under its name; build each with its own name=..., e.g. "
                             f"{type(self.terms[names.index(repeated[0])]).__name__}(name='{repeated[0]}_2').")
        multipliers = {}
        for term in self.terms:
            for key, value in (getattr(term, "lr_multipliers", None) or {}).items():
                if multipliers.setdefault(key, value) != value:
                    raise ValueError(f"WeightedSumLoss: two terms scale the learning rate of {key!r} differently "
                                     f"({multipliers[key]} and {value}).")
        self._lr_multipliers = multipliers

    @property
    def parameter_layers(self):
        """Every term's state layers (proxies, learned margins, sampler seeds, memories)."""
        return [layer for term in self.terms for layer in getattr(term, "parameter_layers", [])]

    @property
    def lr_multipliers(self):
        return dict(self._lr_multipliers)

    @property
    def needs_positive_pairs(self):
        return any(getattr(term, "needs_positive_pairs", False) for term in self.terms)

    @property
    def memory(self):
        memories = [term.memory for term in self.terms if getattr(term, "memory", None) is not None]
        return _Memories(memories) if memories else None

    def input_checks(self):
        """The terms' checks, each once."""
        checks = []
        for term in self.terms:
            for check in (term.input_checks() if callable(getattr(term, "input_checks", None)) else []):
                if check not in checks:
                    checks.append(check)
        return checks

    def xla_is_slower(self, y_true):
        return any(callable(getattr(t, "xla_is_slower", None)) and t.xla_is_slower(y_true) for t in self.terms)

    def __call__(self, y_true, y_pred, sample_weight=None):
        """Σ_t w_t L_t(y_true, y_pred); a per-example ``sample_weight`` is refused as by every
        tfdml loss (each term is the scalar loss of the whole batch)."""
        if sample_weight is not None:
            refuse_sample_weight(type(self).__name__)
        return self.call(y_true, y_pred)

    def call(self, y_true, y_pred):
        total = None
        for weight, term in zip(self.weights, self.terms):
            value = term(y_true, y_pred)
            value = value * keras.ops.cast(weight, value.dtype)
            total = value if total is None else total + keras.ops.cast(value, total.dtype)
        return total

    def get_config(self):
        config = super().get_config()
        config.update(losses=[keras.saving.serialize_keras_object(t) for t in self.terms], weights=list(self.weights))
        return config
