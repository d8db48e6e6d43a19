# Over 400 lines: the two sampler networks of Duan et al. share SamplerNetwork and the pool helpers they use.
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

DSN input: the paper feeds the images to a network "much shallower" than the
embedding network, whose two sampler networks "share the parameters of the
convolutional and fully connected layers" (§3.2, §4.2). Two trunks compute the
per-example features h of the pool (``trunk``):

- ``"conv"`` (the paper's input): the raw images through ``depth`` blocks of a
  3 × 3 convolution (``channels`` filters, ReLU) and 2 × 2 max pooling, then a
  fully connected ReLU layer of ``width`` units;
- ``"mlp"`` (the cheaper default): the pool downsampled by area averaging (an
  integer factor ``floor(H / input_size)`` per side; non-image inputs are
  flattened) through ``depth`` fully connected ReLU layers.

Either costs one small network over the pool and one pairwise head over
[M, P] candidate pairs, and never runs the embedding network: only the
selected examples are embedded. A pair (i, j) of trunk features h is described
by [h_i ⊙ h_j, |h_i − h_j|]; a class by the mean of its members' trunk features
in the pool.

Everything is vectorised with fixed shapes ([M, P] logits) and compiles under
``tf.function(jit_compile=True)``. Random draws are Gumbel-max on stateless
philox bits (:func:`tfdml.samplers.base.uniform01`), keyed by a [2] int seed.
"""

import collections
import inspect

import keras
import tensorflow as tf

from tfdml import masks
from tfdml.samplers import base as samplers_base

TripletChoice = collections.namedtuple(
    "TripletChoice", ["anchor", "positive", "negative", "log_prob", "mask"]
)
TripletChoice.__doc__ = """[M] pool indices of anchor / positive / negative, the [M] log-probability
log p(p, c, n | a) of Eq. 5 (differentiable w.r.t. the DSN) and the [M] bool mask of valid tuples."""

NPairChoice = collections.namedtuple("NPairChoice", ["probe", "gallery", "log_prob", "mask"])
NPairChoice.__doc__ = """[N] pool indices of probe x_i and gallery x_i⁺, the [N] log-probability of each
probe (Eq. 4) and the [N] bool mask of valid pairs (distinct classes, each with ≥ 2 examples)."""

PoolStructure = collections.namedtuple("PoolStructure", ["same", "count", "is_rep", "rep"])
PoolStructure.__doc__ = """Class structure of a pool: ``same`` [P, P] bool (equal labels), ``count``
[P] (members of each example's class), ``is_rep`` [P] (first member of its class: the class's
slot), ``rep`` [P] (index of the class's first member)."""

KINDS = ("triplet", "npair")
_NEG = -1e9  # logit of masked candidates: finite, so gradients stay finite


def pool_structure(labels):
    """The :class:`PoolStructure` of a pool's labels [P]."""
    labels = tf.reshape(labels, [-1])
    size = tf.shape(labels)[0]
    same = masks.same_label(labels)
    index = tf.range(size)
    rep = tf.reduce_min(tf.where(same, index[None, :], size), axis=1)
    return PoolStructure(
        same=same,
        count=tf.reduce_sum(tf.cast(same, tf.int32), axis=1),
        is_rep=tf.equal(rep, index),
        rep=rep,
    )


def masked_log_softmax(logits, mask):
    """Row-wise log-softmax over the ``mask``ed entries (Eq. 4); masked entries get ≈ −1e9."""
    logits = tf.where(mask, logits, tf.cast(_NEG, logits.dtype))
    return tf.nn.log_softmax(logits, axis=-1)


def gumbel_sample(logits, mask, seed=None, uniform=None):
    """One index per row drawn from softmax(logits) restricted to ``mask`` (Gumbel-max).

    The randomness is ``uniform`` (floats in [0, 1) of the logits' shape) or
    drawn from ``seed``. Rows without a valid entry return an arbitrary index
    (mask them out).
    """
    u = samplers_base.uniform01(tf.shape(logits), seed) if uniform is None else uniform
    gumbel = -tf.math.log(-tf.math.log(tf.cast(u, logits.dtype) + tf.cast(1e-12, logits.dtype)))
    scores = tf.where(mask, logits + gumbel, tf.cast(-float("inf"), logits.dtype))
    return tf.argmax(scores, axis=-1, output_type=tf.int32)


def uniform_classes(structure, eligible, num, uniform):
    """``num`` class slots (pool indices of class representatives), uniformly over the
    ``eligible`` classes: slot t takes the (t mod L)-th class of a random permutation
    of the L eligible classes (the permutation sorts the [P] ``uniform`` keys).
    Returns ``(rep [num], valid [num])``; without an eligible class every slot is invalid."""
    keys = tf.where(eligible, uniform, 2.0)
    order = tf.argsort(keys, stable=True)
    num_eligible = tf.reduce_sum(tf.cast(eligible, tf.int32))
    slot = tf.math.floormod(tf.range(num), tf.maximum(num_eligible, 1))
    valid = tf.broadcast_to(num_eligible > 0, [num])
    return tf.gather(order, slot), valid


def uniform_member(structure, rep, uniform):
    """One example uniformly among the members of each class ``rep`` [M] ([M, P] ``uniform``)."""
    return uniform_draw(tf.gather(structure.same, rep), uniform)[0]


def uniform_draw(mask, uniform):
    """One index per row uniformly among the ``mask``ed entries of [M, P] ``mask``, from
    [M, P] ``uniform`` noise, and the log of its probability, −log |mask row| (0 for an
    empty row): the policy of Eq. 4 with all logits equal."""
    index = gumbel_sample(tf.zeros(tf.shape(mask), tf.float32), mask, uniform=uniform)
    count = tf.reduce_sum(tf.cast(mask, tf.float32), axis=1)
    return index, -tf.math.log(tf.maximum(count, 1.0))


def draw_noise(seed, rows, pool_size, batch_shape=()):
    """Uniform [*batch_shape, rows, P] floats in [0, 1) for :meth:`SamplerNetwork.select`:
    one philox draw (each stateless draw is a costly XLA kernel to compile)."""
    return samplers_base.uniform01(list(batch_shape) + [rows, pool_size], seed)


def cheap_features(x, input_size=7):
    """The DSN's input: ``x`` [P, H, W, C] averaged over ``f × f`` blocks with
    f = max(1, floor(max(H, W) / input_size)), then flattened; other ranks are flattened."""
    x = tf.convert_to_tensor(x)
    if not x.dtype.is_floating:
        x = tf.cast(x, tf.float32)
    if x.shape.rank == 4 and input_size:
        factor = max(1, int(max(x.shape[1], x.shape[2])) // int(input_size))
        if factor > 1:
            x = tf.nn.avg_pool2d(x, ksize=factor, strides=factor, padding="SAME")
    return tf.reshape(x, [tf.shape(x)[0], -1])


def feature_dim(input_shape, input_size=7):
    """Length of :func:`cheap_features` for one example of shape ``input_shape`` (no batch axis)."""
    shape = [int(d) for d in input_shape]
    if len(shape) == 3 and input_size:
        factor = max(1, max(shape[0], shape[1]) // int(input_size))
        shape = [-(-shape[0] // factor), -(-shape[1] // factor), shape[2]]
    size = 1
    for d in shape:
        size *= d
    return size


def _pair(u, v):
    """[h_i ⊙ h_j, |h_i − h_j|] for u [M, w] and v [P, w] -> [M, P, 2w]."""
    u, v = u[:, None, :], v[None, :, :]
    return tf.concat([u * v, tf.abs(u - v)], axis=-1)


def _check_int(value, name, owner, minimum=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{owner}: {name} must be an integer >= {minimum}, got {value!r}.")
    return value


#: The DSN trunks (module docstring): the paper's convolutional one on the raw images, and
#: an MLP on area-averaged pixels.
TRUNKS = ("mlp", "conv")


class SamplerNetwork(keras.layers.Layer):
    """Shared parts of the DSN: the input, the trunk and pairwise heads.

    Args:
      width: units of the trunk's output and of the heads' hidden layer.
      depth: layers of the trunk (≥ 1): Dense-ReLU layers (``"mlp"``) or
        convolution + pooling blocks (``"conv"``).
      input_size: downsampling target of :func:`cheap_features` (0: no
        downsampling); the ``"mlp"`` trunk's input only (the ``"conv"`` trunk
        reads the raw images).
      trunk: ``"mlp"`` or ``"conv"`` (Duan §3.2; see the module docstring).
      channels: filters of each convolution of the ``"conv"`` trunk.
      seed: seed of the weight initialisers (``None``: Keras' global seed).
    """

    kind = None
    heads = ()

    @staticmethod
    def noise_rows(num):
        """Rows of uniform noise :meth:`select` needs for ``num`` tuples."""
        raise NotImplementedError

    def __init__(self, width=64, depth=2, input_size=7, trunk="mlp", channels=32, seed=None, **kwargs):
        super().__init__(**kwargs)
        owner = type(self).__name__
        self.width = _check_int(width, "width", owner)
        self.depth = _check_int(depth, "depth", owner)
        self.input_size = _check_int(input_size, "input_size", owner, minimum=0)
        self.channels = _check_int(channels, "channels", owner)
        if trunk not in TRUNKS:
            raise ValueError(f"{owner}: unknown trunk {trunk!r}; choose one of {', '.join(TRUNKS)}.")
        self.trunk_kind = trunk
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"{owner}: seed must be an int or None, got {seed!r}.")
        self.seed = seed
        counter = iter(range(1000))

        def init():
            return keras.initializers.GlorotUniform(
                seed=None if seed is None else seed * 1000 + next(counter)
            )

        dtype = self.dtype_policy
        if trunk == "conv":
            self.trunk = []
            for i in range(depth):
                self.trunk.append(keras.layers.Conv2D(
                    channels, 3, padding="same", activation="relu", kernel_initializer=init(),
                    dtype=dtype, name=f"trunk_conv{i}"))
                self.trunk.append(keras.layers.MaxPooling2D(2, padding="same", dtype=dtype,
                                                            name=f"trunk_pool{i}"))
            self.trunk.append(keras.layers.Flatten(dtype=dtype, name="trunk_flatten"))
            self.trunk.append(keras.layers.Dense(
                width, activation="relu", kernel_initializer=init(), dtype=dtype, name="trunk_dense"))
        else:
            self.trunk = [
                keras.layers.Dense(
                    width, activation="relu", kernel_initializer=init(), dtype=dtype, name=f"trunk{i}"
                )
                for i in range(depth)
            ]
        # Flat list (hidden, logit, hidden, logit, ...) in the order of ``heads``.
        self.head_layers = []
        for head in self.heads:
            self.head_layers.append(
                keras.layers.Dense(width, activation="relu", kernel_initializer=init(), dtype=dtype,
                                   name=f"{head}_hidden")
            )
            self.head_layers.append(
                keras.layers.Dense(1, kernel_initializer=init(), dtype=dtype, name=f"{head}_logit")
            )

    # -- building ------------------------------------------------------------
    def build(self, input_shape):
        """``input_shape``: shape of the pool's *inputs* x, [P, ...]."""
        example = tuple(input_shape)[1:]
        if self.trunk_kind == "conv":
            if len(example) != 3 or any(d is None for d in example):
                raise ValueError(
                    f"{type(self).__name__}: trunk='conv' reads images of a known shape [P, H, W, C]; "
                    f"the pool's inputs have shape {tuple(input_shape)}. Use trunk='mlp' for other inputs."
                )
            shape = (None,) + tuple(int(d) for d in example)
        else:
            shape = (None, feature_dim(example, self.input_size))
        for layer in self.trunk:
            layer.build(shape)
            shape = layer.compute_output_shape(shape)
        for head in self.heads:
            hidden, logit = self._head(head)
            hidden.build((None, self.head_input_units(head)))
            logit.build((None, self.width))
        self.built = True

    def head_input_units(self, head):
        return 2 * self.width

    # -- pieces --------------------------------------------------------------
    def features(self, x):
        """The DSN input of the pool, in the layer's dtype: the images (``"conv"``) or
        :func:`cheap_features` (``"mlp"``)."""
        if self.trunk_kind == "conv":
            return tf.cast(x, self.compute_dtype)
        return tf.cast(cheap_features(x, self.input_size), self.compute_dtype)

    def embed(self, features):
        """Trunk features h [P, width] of the pool (shared by all heads, Fig. 2a)."""
        h = features
        for layer in self.trunk:
            h = layer(h)
        return h

    def _head(self, name):
        i = self.heads.index(name)
        return self.head_layers[2 * i], self.head_layers[2 * i + 1]

    def head(self, name, pair_features):
        """Logits H of Eq. 4 from [M, P, units] pair descriptions -> [M, P]."""
        hidden, logit = self._head(name)
        return tf.squeeze(logit(hidden(pair_features)), axis=-1)

    def call(self, x):
        """Trunk features of the pool inputs ``x`` (for building / inspection)."""
        return self.embed(self.features(x))

    def get_config(self):
        config = super().get_config()
        config.update(width=self.width, depth=self.depth, input_size=self.input_size,
                      trunk=self.trunk_kind, channels=self.channels, seed=self.seed)
        return config


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
            self.head("positive", _pair(ha, h)),
            self.head("negative_class", _pair(ha, class_mean)),
        )

    def negative_logits(self, h, anchor, positive):
        """Logits [M, P] of the second network given anchor and positive (no masking)."""
        ha, hp = tf.gather(h, anchor), tf.gather(h, positive)
        return self.head("negative", tf.concat([_pair(ha, h), _pair(hp, h)], axis=-1))

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
        return self.head("probe", tf.concat([_pair(hg, h), _pair(context, h)], axis=-1))

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
