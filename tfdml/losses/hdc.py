"""The loss of a hard-aware deeply cascaded embedding (Yuan, Yang & Zhang, ICCV 2017, HDC):
one pair loss per level of the cascade, level k on the pairs the levels before it found hard."""

import keras
import tensorflow as tf

from tfdml import candidates as candidates_lib
from tfdml.cascade_spec import DEFAULT_LEVELS
from tfdml.losses import arguments, base
from tfdml.losses.contrastive import ContrastiveLoss
from tfdml.samplers.hdc import HDCSampler


def _resolve_level_loss(loss):
    if loss is None:
        made = ContrastiveLoss()
    elif isinstance(loss, dict):
        made = keras.saving.deserialize_keras_object(loss)
    else:
        made = loss
    if not isinstance(made, base.MetricLoss) or "pairs" not in made.sampler_kinds:
        raise ValueError(f"HDCLoss(loss=...) takes a tfdml pair loss for every level (an object or its "
                         f"serialised config; a name: tfdml.losses.get(name, **options)); None: the contrastive "
                         f"loss, the paper's; got {loss!r}.")
    if made.sampler is not None:
        raise ValueError(f"HDCLoss: the level loss {type(made).__name__} has sampler={made.sampler!r}, but each "
                         "level scores every pair the cascade hands it; build it with sampler=None.")
    if made.memory is not None:
        raise ValueError("HDCLoss: the level loss has a cross-batch memory, whose pairs the cascade does not "
                         "rank; build it without memory.")
    return made


def _check_levels(levels):
    if isinstance(levels, bool) or not hasattr(levels, "__index__") or int(levels) < 1:
        raise ValueError(f"HDCLoss: levels must be a positive integer (the number of level embeddings "
                         f"concatenated in y_pred), got {levels!r}.")
    return int(levels)


@keras.saving.register_keras_serializable(package="tfdml")
class HDCLoss(base.MetricLoss):
    """Σ_k L(level k) over the K levels of an HDC cascade (Yuan, Yang & Zhang 2017, §3 and
    Figure 2: "the first model with all the pairs, the second with the hard samples selected
    by the first, the third with the hard samples the second selects among those").

    ``y_pred`` is the concatenation [e_1, …, e_K] of the K level embeddings, each of d / K
    columns (what :func:`tfdml.cascade.build_cascade_encoder` outputs, and what retrieval
    and export use). With S_1 the batch's candidate pairs (:func:`tfdml.masks.candidate_mask`)
    and D^k the level loss's distances between the e_k:

        L = Σ_k L_pair(e_k; S_k),   S_{k+1} = HDC(D^k, S_k)

    where L_pair is the level loss on every pair of S_k (its own reduction: the mean over
    S_k's pairs for the contrastive loss) and HDC keeps, of S_k's positive pairs, the
    ceil(f·n₊) farthest under D^k and of its negative pairs the ceil(f·n₋) closest
    (:class:`tfdml.samplers.HDCSampler`). The selection carries no gradient; each level's
    gradient reaches its own head and, through the shared layers, the backbone below it.
    The paper trains with the contrastive loss; its equation numbers were not read, and
    its ranking by the pair's loss is, for the contrastive loss, the ranking by D used here
    (pytorch-metric-learning's ``HDCMiner`` rule). A level with no pair left contributes 0.

    Args:
      levels: K, the number of level embeddings in ``y_pred`` (its width must divide by K); in a
        config, the levels of ``model.cascade`` (a run passes them).
      loss: the level loss: a pair loss object (or its serialised config) without a sampler;
        None: :class:`~tfdml.losses.ContrastiveLoss` with its defaults.
      filter_percentage: f in (0, 1], the share of each level's positive and negative pairs
        passed on to the next level.
      level_weights: a weight ≥ 0 per level (default 1 each).
    """

    sampler_kinds = ()
    takes_distance = False
    memory_refusal = "the cascade ranks the batch's own pairs, level after level"
    fixed_arguments = {"distance": "ranks and scores each level with its level loss's distance (set it "
                                   "there: loss=ContrastiveLoss(distance=...))"}

    def __init__(self, levels=DEFAULT_LEVELS, loss=None, filter_percentage=0.5, level_weights=None, **kwargs):
        arguments.refuse_fixed(type(self).__name__, kwargs, **self.fixed_arguments)
        super().__init__(**kwargs)
        self.levels = _check_levels(levels)
        self.level_loss = _resolve_level_loss(loss)
        self.hdc_sampler = HDCSampler(filter_percentage)
        weights = [1.0] * self.levels if level_weights is None else list(level_weights)
        if len(weights) != self.levels or any(isinstance(w, bool) or not float(w) >= 0 for w in weights):
            raise ValueError(f"HDCLoss: level_weights must be {self.levels} numbers >= 0 (one per level), "
                             f"got {level_weights!r}.")
        self.level_weights = [float(w) for w in weights]

    @property
    def filter_percentage(self):
        return self.hdc_sampler.filter_percentage

    @property
    def parameter_layers(self):
        return self.level_loss.parameter_layers

    def input_checks(self):
        return self.level_loss.input_checks()

    def split_levels(self, embeddings):
        """The K level embeddings of ``embeddings`` ([B, d], d divisible by K)."""
        width = embeddings.shape[-1]
        if width is not None and width % self.levels:
            raise ValueError(f"HDCLoss(levels={self.levels}) needs embeddings whose width divides by "
                             f"{self.levels} (one block per level), got width {width}; build the encoder "
                             "with one embedding head per level of equal size.")
        return tf.split(embeddings, self.levels, axis=1)

    def level_candidates(self, targets, embeddings):
        """``[S_1, …, S_K]``: the [B, B] bool pair masks each level is trained on."""
        labels = self.level_loss.candidate_labels(targets)
        mask = self.level_loss.candidate_mask(targets)
        out = []
        for k, part in enumerate(self.split_levels(embeddings)):
            out.append(mask)
            if k + 1 < self.levels:
                selection = self.hdc_sampler(self.level_loss.distances(part), labels, mask)
                mask = tf.logical_or(selection.pos_weight > 0, selection.neg_weight > 0)
        return out

    def compute(self, targets, embeddings, candidates=None):
        labels = self.level_loss.candidate_labels(targets)
        parts = self.split_levels(embeddings)
        total = None
        for part, mask, weight in zip(parts, self.level_candidates(targets, embeddings), self.level_weights):
            value = self.level_loss.compute(targets, part, candidates_lib.Candidates(None, labels, mask))
            value = value * tf.constant(weight, value.dtype)
            total = value if total is None else total + value
        return total

    def get_config(self):
        config = super().get_config()
        config.update(levels=self.levels, loss=keras.saving.serialize_keras_object(self.level_loss),
                      filter_percentage=self.filter_percentage, level_weights=list(self.level_weights))
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("loss"), dict) and "class_name" in config["loss"]:
            config["loss"] = keras.saving.deserialize_keras_object(config["loss"])
        return cls(**config)
