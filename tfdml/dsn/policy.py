"""Sampler networks of DE-DSP (Duan et al. 2019, §3.1–3.2, Fig. 2): softmax
policies over the candidates of a pool, and the chained selection of tuples.

A *pool* is one batch of the pipeline (e.g. an ``MPerClassDesign`` batch of
n classes × m images): inputs ``x`` [P, ...] and labels [P]. The sampler
network (DSN) scores candidates of the pool with the softmax policy of Eq. 4,

    p(x_s | X; η) = exp(H(x_s; η)) / Σ_{x ∈ {x_s}} exp(H(x; η)),

and builds a tuple by chaining conditionals (Eq. 5),

    p(x^(1), …, x^(L) | X; η) = Π_l p(x^(l) | x^(1), …, x^(l−1), X; η).

The first element is drawn by hand, uniformly over the classes (§3.1, "to
uniformly specify x^(1) ... from all the classes"); the others are *sampled*
from the policy (never the argmax), so easy examples keep a chance (§4.3).

Triplets (Fig. 2a, L = 2 networks sharing one trunk):

1. the anchor a: a class uniformly among the pool's classes that have a
   positive pair (≥ 2 examples) — classes cycle through a fresh random
   permutation, so a mini-batch repeats a class only when it has more
   anchors than the pool has classes — then an example of that class
   uniformly;
2. the first network, given a, has two softmax heads: over the positives
   p ≠ a of a's class, and over the *negative classes* c ≠ y_a of the pool;
3. the second network, given a and p, scores the examples n of the chosen
   class c (softmax over them only: choosing the class first keeps this
   softmax small, §3.2).

    log p(a, p, n) = log π_pos(p | a) + log π_cls(c | a) + log π_neg(n | a, p, c)

(the anchor draw does not depend on η and is left out).

N-pair (Fig. 2b): the N gallery examples x_i⁺ are drawn by hand (N distinct
classes uniformly among those with ≥ 2 examples, one example each); one
network selects each probe x_i independently among the other examples of
class i, given x_i⁺ and the rest of the gallery (the N-pair loss Eq. 9
decomposes over probes).

The networks' input, trunk and heads are :class:`~tfdml.dsn.network.SamplerNetwork`'s
(:mod:`tfdml.dsn.network`); the pool's class structure and the random draws are
:mod:`tfdml.dsn.pool`'s.

Everything is vectorised with fixed shapes ([M, P] logits) and compiles under
``tf.function(jit_compile=True)``. Random draws are Gumbel-max on stateless
philox bits (:func:`tfdml.samplers.base.uniform01`), keyed by a [2] int seed.
"""

import collections
import inspect

import keras
import tensorflow as tf

from tfdml.dsn.network import SamplerNetwork, pair_features
from tfdml.dsn.pool import (draw_noise, gumbel_sample, masked_log_softmax, pool_structure, uniform_classes,
                            uniform_draw, uniform_member)

TripletChoice = collections.namedtuple(
    "TripletChoice", ["anchor", "positive", "negative", "log_prob", "mask"]
)
TripletChoice.__doc__ = """[M] pool indices of anchor / positive / negative, the [M] log-probability
log p(p, c, n | a) of Eq. 5 (differentiable w.r.t. the DSN) and the [M] bool mask of valid tuples."""

NPairChoice = collections.namedtuple("NPairChoice", ["probe", "gallery", "log_prob", "mask"])
NPairChoice.__doc__ = """[N] pool indices of probe x_i and gallery x_i⁺, the [N] log-probability of each
probe (Eq. 4) and the [N] bool mask of valid pairs (distinct classes, each with ≥ 2 examples)."""

KINDS = ("triplet", "npair")


@keras.saving.register_keras_serializable(package="tfdml")
class TripletSamplerNetwork(SamplerNetwork):
    """DSN for triplet embedding (Duan et al. 2019, Fig. 2a, §3.2).

    One trunk, three heads: ``positive`` and ``negative_class`` (the two
    softmax layers of the first network, given the anchor), ``negative`` (the
    second network, given anchor and positive, over the chosen class). See
    the module docstring for the chain and :meth:`select`.
    """

    kind = "triplet"
    heads = ("positive", "negative_class", "negative")

    def head_input_units(self, head):
        return 4 * self.width if head == "negative" else 2 * self.width

    def first_logits(self, h, structure, anchor):
        """Logits [M, P] of the first network's two heads given the anchors (no masking):
        ``positive[m, j]`` for example j as positive, ``negative_class[m, j]`` for the
        class of example j (read at class representatives)."""
        ha = tf.gather(h, anchor)
        same = tf.cast(structure.same, h.dtype)
        class_mean = tf.matmul(same, h) / tf.cast(structure.count, h.dtype)[:, None]
        return (
            self.head("positive", pair_features(ha, h)),
            self.head("negative_class", pair_features(ha, class_mean)),
        )

    def negative_logits(self, h, anchor, positive):
        """Logits [M, P] of the second network given anchor and positive (no masking)."""
        ha, hp = tf.gather(h, anchor), tf.gather(h, positive)
        return self.head("negative", tf.concat([pair_features(ha, h), pair_features(hp, h)], axis=-1))

    @staticmethod
    def masks(structure, anchor, neg_class=None):
        """Candidate masks [M, P]: positives (same class, ≠ anchor), negative classes
        (representatives of the other classes) and, given ``neg_class``, its members."""
        size = tf.shape(structure.rep)[0]
        own = tf.gather(structure.same, anchor)
        not_self = tf.logical_not(tf.one_hot(anchor, size, on_value=True, off_value=False))
        out = {
            "positive": own & not_self,
            "negative_class": tf.logical_not(own) & structure.is_rep[None, :],
        }
        if neg_class is not None:
            out["negative"] = tf.gather(structure.same, neg_class)
        return out

    @staticmethod
    def noise_rows(num):
        return 4 * num + 1

    def anchors(self, structure, num, noise):
        """``num`` anchors uniformly over the classes with a positive pair (≥ 2 examples),
        in a pool with at least two classes, from [num + 1, P] uniform ``noise``.
        Returns ``(anchor [num], valid [num])``."""
        has_other = tf.reduce_any(tf.logical_not(structure.same[0]))
        eligible = structure.is_rep & (structure.count >= 2) & has_other
        rep, valid = uniform_classes(structure, eligible, num, noise[0])
        return uniform_member(structure, rep, noise[1 : num + 1]), valid

    def log_prob(self, features, labels, anchor, positive, negative):
        """log p(p, c, n | a) of given tuples (Eq. 5), differentiable w.r.t. η; c = class of n."""
        structure = pool_structure(labels)
        h = self.embed(features)
        return self._log_prob(h, structure, anchor, positive, tf.gather(structure.rep, negative), negative)

    def _log_prob(self, h, structure, anchor, positive, neg_class, negative, first=None, second=None):
        if first is None:
            first = self.first_logits(h, structure, anchor)
        if second is None:
            second = self.negative_logits(h, anchor, positive)
        logits = (*first, second)
        masks = self.masks(structure, anchor, neg_class)
        names = ("positive", "negative_class", "negative")
        total = 0.0
        for name, lg, index in zip(names, logits, (positive, neg_class, negative)):
            lsm = masked_log_softmax(lg, masks[name])
            total += tf.gather(lsm, index, batch_dims=1)
        return total

    def select(self, features, labels, num, seed=None, noise=None):
        """Sample ``num`` triplets from the pool by the chained policy (Eq. 4, 5).

        Args:
          features: the DSN input of the pool (:meth:`features`).
          labels: [P] integer labels.
          num: M, the number of triplets (a Python int).
          seed: [2] integer seed, or
          noise: [4M + 1, P] uniform floats (:func:`draw_noise`) instead.

        Returns a :class:`TripletChoice`. A tuple is valid when its anchor class
        has ≥ 2 examples and the pool has another class; invalid slots hold
        in-range but meaningless indices.
        """
        structure = pool_structure(labels)
        if noise is None:
            noise = draw_noise(seed, self.noise_rows(num), tf.shape(structure.rep)[0])
        anchor, valid = self.anchors(structure, num, noise[: num + 1])
        h = self.embed(features)
        first = self.first_logits(h, structure, anchor)
        masks = self.masks(structure, anchor)
        u_pos, u_cls, u_neg = (noise[1 + k * num : 1 + (k + 1) * num] for k in (1, 2, 3))
        positive = gumbel_sample(first[0], masks["positive"], uniform=tf.cast(u_pos, h.dtype))
        neg_class = gumbel_sample(first[1], masks["negative_class"], uniform=tf.cast(u_cls, h.dtype))
        neg_logits = self.negative_logits(h, anchor, positive)
        neg_mask = tf.gather(structure.same, neg_class)
        negative = gumbel_sample(neg_logits, neg_mask, uniform=tf.cast(u_neg, h.dtype))
        lp = self._log_prob(h, structure, anchor, positive, neg_class, negative, first, neg_logits)
        lp = tf.where(valid, lp, tf.zeros_like(lp))
        return TripletChoice(anchor, positive, negative, lp, valid)

    @staticmethod
    def uniform_noise_rows(num):
        return 3 * num

    def uniform_choice(self, labels, choice, noise):
        """The uniform policy's triplets for the anchors of ``choice``: the positive, the
        negative class and the negative each uniform over the candidates :meth:`select`
        samples them from, with their log-probability under that policy (what a policy
        that learned nothing picks; ``noise`` [3M, P] uniform floats)."""
        structure = pool_structure(labels)
        num = tf.shape(choice.anchor)[0]
        candidates = self.masks(structure, choice.anchor)
        positive, lp_pos = uniform_draw(candidates["positive"], noise[:num])
        neg_class, lp_cls = uniform_draw(candidates["negative_class"], noise[num : 2 * num])
        negative, lp_neg = uniform_draw(tf.gather(structure.same, neg_class), noise[2 * num : 3 * num])
        lp = tf.where(choice.mask, lp_pos + lp_cls + lp_neg, tf.zeros_like(lp_pos))
        return TripletChoice(choice.anchor, positive, negative, lp, choice.mask)


@keras.saving.register_keras_serializable(package="tfdml")
class NPairSamplerNetwork(SamplerNetwork):
    """DSN for N-pair embedding (Duan et al. 2019, Fig. 2b, §3.2).

    The gallery x_i⁺ (N distinct classes, one example each) is drawn by
    hand; one network scores each candidate probe j of class i from
    [pair(x_i⁺, x_j), pair(ḡ_i, x_j)], where ḡ_i is the mean trunk feature
    of the *other* gallery examples (the N−1 negatives of the probe).
    """

    kind = "npair"
    heads = ("probe",)

    def head_input_units(self, head):
        return 4 * self.width

    @staticmethod
    def noise_rows(num):
        return 2 * num + 1

    def gallery(self, structure, num, noise):
        """``num`` gallery examples of distinct classes with ≥ 2 examples, classes
        uniformly without replacement, from [num + 1, P] uniform ``noise``. Returns
        ``(gallery [num], valid [num])``: slots beyond the number of such classes are invalid."""
        eligible = structure.is_rep & (structure.count >= 2)
        keys = tf.where(eligible, noise[0], 2.0)
        order = tf.argsort(keys, stable=True)
        num_eligible = tf.reduce_sum(tf.cast(eligible, tf.int32))
        slot = tf.minimum(tf.range(num), tf.maximum(num_eligible, 1) - 1)
        rep = tf.gather(order, slot)
        valid = tf.range(num) < num_eligible
        return uniform_member(structure, rep, noise[1 : num + 1]), valid

    def logits(self, h, structure, gallery, valid):
        hg = tf.gather(h, gallery)
        weights = tf.cast(valid, h.dtype)[:, None]
        total = tf.reduce_sum(hg * weights, axis=0, keepdims=True)
        others = tf.maximum(tf.reduce_sum(weights) - weights, 1.0)
        context = (total - hg * weights) / others
        return self.head("probe", tf.concat([pair_features(hg, h), pair_features(context, h)], axis=-1))

    @staticmethod
    def mask(structure, gallery):
        size = tf.shape(structure.rep)[0]
        not_self = tf.logical_not(tf.one_hot(gallery, size, on_value=True, off_value=False))
        return tf.gather(structure.same, gallery) & not_self

    def log_prob(self, features, labels, gallery, valid, probe):
        """log p(x_i | gallery) of given probes (Eq. 4), differentiable w.r.t. η."""
        structure = pool_structure(labels)
        h = self.embed(features)
        lsm = masked_log_softmax(self.logits(h, structure, gallery, valid), self.mask(structure, gallery))
        return tf.gather(lsm, probe, batch_dims=1)

    def select(self, features, labels, num, seed=None, noise=None):
        """Draw the gallery and sample one probe per gallery example (Fig. 2b).

        ``num`` is N; ``seed`` a [2] integer seed or ``noise`` [2N + 1, P] uniform
        floats (:func:`draw_noise`). Returns an :class:`NPairChoice`.
        """
        structure = pool_structure(labels)
        if noise is None:
            noise = draw_noise(seed, self.noise_rows(num), tf.shape(structure.rep)[0])
        gallery, valid = self.gallery(structure, num, noise[: num + 1])
        h = self.embed(features)
        logits = self.logits(h, structure, gallery, valid)
        mask = self.mask(structure, gallery)
        probe = gumbel_sample(logits, mask, uniform=tf.cast(noise[num + 1 :], h.dtype))
        lsm = masked_log_softmax(logits, mask)
        lp = tf.where(valid, tf.gather(lsm, probe, batch_dims=1), tf.zeros([num], lsm.dtype))
        return NPairChoice(probe, gallery, lp, valid)

    @staticmethod
    def uniform_noise_rows(num):
        return num

    def uniform_choice(self, labels, choice, noise):
        """The uniform policy's probes for the gallery of ``choice``: each uniform over the
        other examples of its class, with its log-probability under that policy
        (``noise`` [N, P] uniform floats)."""
        structure = pool_structure(labels)
        probe, lp = uniform_draw(self.mask(structure, choice.gallery), noise)
        return NPairChoice(probe, choice.gallery, tf.where(choice.mask, lp, tf.zeros_like(lp)), choice.mask)


NETWORKS = {"triplet": TripletSamplerNetwork, "npair": NPairSamplerNetwork}


def network_options():
    """The keyword arguments that configure a sampler network (``width``, ``depth``, ...), read
    from :class:`SamplerNetwork`'s signature (the seed comes from the model)."""
    params = inspect.signature(SamplerNetwork.__init__).parameters
    return tuple(name for name, p in params.items()
                 if name not in ("self", "seed") and p.kind is p.POSITIONAL_OR_KEYWORD)


def get(identifier, **kwargs):
    """A sampler network from a kind (``"triplet"``, ``"npair"``) with ``kwargs``,
    a serialised config, or a network (returned as is)."""
    if isinstance(identifier, SamplerNetwork):
        return identifier
    if isinstance(identifier, dict):
        obj = keras.saving.deserialize_keras_object(identifier)
        if not isinstance(obj, SamplerNetwork):
            raise ValueError(f"The config {identifier!r} does not describe a tfdml sampler network.")
        return obj
    if identifier not in NETWORKS:
        raise ValueError(
            f"Unknown sampler network {identifier!r}; choose one of {', '.join(KINDS)} "
            "(or pass a TripletSamplerNetwork / NPairSamplerNetwork)."
        )
    return NETWORKS[identifier](**kwargs)
