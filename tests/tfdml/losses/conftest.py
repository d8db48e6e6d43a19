"""Shared brute-force helpers for the loss tests (exposed through the ``ref`` fixture).

Everything here is plain NumPy with Python loops, written from the papers'
definitions, independent of the TensorFlow code under test.
"""

import types

import numpy as np
import pytest

# Label layouts used across the tests: unequal class sizes with a class of one
# example (class 2), a batch of one class, a batch without any positive pair.
LABELS = {
    "mixed": np.array([0, 0, 0, 1, 1, 2, 3, 3, 3, 3, 1, 0], np.int32),
    "one_class": np.array([5, 5, 5, 5, 5], np.int32),
    "no_positive": np.array([0, 1, 2, 3, 4], np.int32),
}
# Training-split class sizes N_c for the importance columns (classes 0..5).
CLASS_SIZES = np.array([10.0, 4.0, 1.0, 7.0, 3.0, 6.0], np.float32)


def embeddings(num, dim=6, seed=0, normalize=True):
    e = np.random.default_rng(seed).normal(size=(num, dim))
    if normalize:
        e /= np.linalg.norm(e, axis=1, keepdims=True)
    return e.astype(np.float32)


def pairwise(e):
    """D_ij = ||e_i − e_j|| (Wu et al. 2017 §3), by a double loop in float64."""
    e = np.asarray(e, np.float64)
    n = len(e)
    d = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            d[i, j] = np.sqrt(np.sum((e[i] - e[j]) ** 2))
    return d


def cosine(e):
    e = np.asarray(e, np.float64)
    n = len(e)
    s = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            s[i, j] = e[i] @ e[j] / (np.linalg.norm(e[i]) * np.linalg.norm(e[j]))
    return s


def candidates(labels, pair_id=None):
    n = len(labels)
    c = np.zeros((n, n), bool)
    for i in range(n):
        for j in range(n):
            c[i, j] = i != j and (pair_id is None or pair_id[i] == pair_id[j])
    return c


def pos_neg(labels, cand):
    n = len(labels)
    pos = np.zeros((n, n))
    neg = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if cand[i, j]:
                if labels[i] == labels[j]:
                    pos[i, j] = 1
                else:
                    neg[i, j] = 1
    return pos, neg


def triplet_list(selection):
    """Selected (a, p, n) of a TripletSelection as a Python list."""
    a, p, n, m = (np.asarray(x) for x in selection)
    return [(int(a[t]), int(p[t]), int(n[t])) for t in range(len(m)) if m[t]]


def pairs_from_triplets(triplets, n):
    """Wu et al. §5: each (a, p, n) gives the positive pair (a, p) and the negative (a, n)."""
    pos = np.zeros((n, n))
    neg = np.zeros((n, n))
    for a, p, q in triplets:
        pos[a, p] += 1
        neg[a, q] += 1
    return pos, neg


def semi_hard_triplets(d, labels, cand):
    """FaceNet / Wu §3: n* = argmin_{n: D_an > D_ap} D_an for every positive pair (a, p);
    if there is none, the farthest negative (the samplers' "hardest_inside" fallback)."""
    out = []
    n = len(labels)
    for a in range(n):
        negs = [q for q in range(n) if cand[a, q] and labels[q] != labels[a]]
        for p in range(n):
            if not (cand[a, p] and labels[p] == labels[a]) or not negs:
                continue
            farther = [q for q in negs if d[a, q] > d[a, p]]
            if farther:
                q = min(farther, key=lambda q: (d[a, q], q))
            else:
                q = max(negs, key=lambda q: (d[a, q], -q))
            out.append((a, p, q))
    return out


def hard_triplets(d, labels, cand):
    """Batch hard: per anchor the farthest positive and the closest negative."""
    out = []
    n = len(labels)
    for a in range(n):
        poss = [p for p in range(n) if cand[a, p] and labels[p] == labels[a]]
        negs = [q for q in range(n) if cand[a, q] and labels[q] != labels[a]]
        if poss and negs:
            p = max(poss, key=lambda p: (d[a, p], -p))
            q = min(negs, key=lambda q: (d[a, q], q))
            out.append((a, p, q))
    return out


def importance_targets(labels, w_pos=0.02, w_neg=0.005, pair_id=None, example_id=None):
    """A batch-contract dict with the importance columns (Hong et al. Eq. 24 / 25)."""
    labels = np.asarray(labels, np.int32)
    y = {
        "label": labels,
        "class_size": CLASS_SIZES[labels],
        "w_pos": np.full(len(labels), w_pos, np.float32),
        "w_neg": np.full(len(labels), w_neg, np.float32),
    }
    if pair_id is not None:
        y["pair_id"] = np.asarray(pair_id, np.int32)
    if example_id is not None:
        y["example_id"] = np.asarray(example_id, np.int32)
    return y


def hong_weights(labels, sizes, w_pos, w_neg):
    """W_ij of Hong et al. Eq. 24 / 25 in the factorised form of tfdml.importance."""
    n = len(labels)
    w = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            ni, nj = sizes[labels[i]], sizes[labels[j]]
            w[i, j] = w_pos * ni * (ni - 1) if labels[i] == labels[j] else w_neg * ni * nj
    return w


def central_gradient(f, x, eps=1e-6):
    """Central finite differences of a scalar function of a float64 array."""
    x = np.array(x, np.float64)
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[idx] += eps
        down[idx] -= eps
        g[idx] = (f(up) - f(down)) / (2 * eps)
    return g


def check_xla_equals_eager_with_unknown_batch(loss, dim=6, cases=("mixed", "one_class")):
    """``loss`` and its gradient compiled with XLA for an unknown batch size equal them eagerly,
    on the label ``cases`` (names of :data:`LABELS`, or label arrays)."""
    import tensorflow as tf

    spec = [tf.TensorSpec([None], tf.int64), tf.TensorSpec([None, dim], tf.float32)]

    def value_grad(y, e):
        with tf.GradientTape() as tape:
            tape.watch(e)
            value = loss(y, e)
        return value, tape.gradient(value, e)

    jitted = tf.function(value_grad, input_signature=spec, jit_compile=True)
    for case in cases:
        labels = (LABELS[case] if isinstance(case, str) else np.asarray(case)).astype(np.int64)
        e = tf.constant(embeddings(len(labels), dim=dim, seed=3))
        want_v, want_g = value_grad(tf.constant(labels), e)
        got_v, got_g = jitted(tf.constant(labels), e)
        np.testing.assert_allclose(got_v.numpy(), want_v.numpy(), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(got_g.numpy(), want_g.numpy(), rtol=1e-4, atol=1e-6)


def keras_file_round_trip(loss, path):
    """An EmbeddingModel compiled with ``loss``, fitted one step, saved to ``path`` and
    loaded again: ``(model, loaded)``."""
    import keras

    import tfdml
    from tfdml import models

    keras.utils.set_random_seed(0)
    encoder = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.UnitNormalization()])
    model = models.EmbeddingModel(encoder)
    model.compile(optimizer="sgd", loss=loss)
    x = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    model.fit(x, np.repeat(np.arange(4), 2), batch_size=8, epochs=1, verbose=0)
    model.save(str(path))
    return model, tfdml.load_model(str(path))


def constant_daml_generator(loss, value):
    """A DAMLLoss whose generator gives x̃⁻ = ``value`` for every triplet (zero kernels, the
    last bias ``value``): hand cases with a known synthetic negative."""
    import tensorflow as tf

    for kernel, bias in zip(loss.generator.kernels, loss.generator.biases):
        kernel.assign(tf.zeros_like(kernel))
        bias.assign(tf.zeros_like(bias))
    loss.generator.biases[-1].assign(np.asarray(value, np.float32))
    return loss


def shifted_daml_generator(loss, shift=1.0):
    """``loss`` with its generator's output moved by ``shift`` along the diagonal: from a fresh
    generator the synthetic negatives all sit well inside the margin (J_adv = 0); moved, the
    adversarial hinge is active for some triplets and not for others."""
    import tensorflow as tf

    bias = loss.generator.biases[-1]
    bias.assign_add(tf.fill(bias.shape, tf.cast(shift / np.sqrt(bias.shape[0]), bias.dtype)))
    return loss
def fixed_pairs(pos, neg):
    """A pair sampler that returns the fixed multiplicities ``pos`` and ``neg`` [B, B]
    whatever the batch (for reference tests of sampler-weighted losses)."""
    import tensorflow as tf

    from tfdml.samplers import base as samplers_base

    class FixedPairs(samplers_base.Sampler):
        kind = "pairs"
        needs_seed = False

        def sample(self, dist, labels, candidates, seed=None, embedding_dim=None):
            return samplers_base.PairSelection(tf.constant(pos, tf.float32), tf.constant(neg, tf.float32))

    return FixedPairs()


def random_multiplicities(labels, seed):
    """Random pair multiplicities (positive pairs 0..3, negative pairs 0..2 times) over the
    candidate pairs of ``labels``: what a pair sampler could return."""
    n = len(labels)
    rng = np.random.default_rng(seed)
    pos, neg = pos_neg(labels, candidates(labels))
    return pos * rng.integers(0, 4, size=(n, n)), neg * rng.integers(0, 3, size=(n, n))


def value_and_grad(loss, y, e):
    """Eagerly: ``loss(y, e)`` and its gradient with respect to ``e``, as NumPy."""
    import tensorflow as tf

    e = tf.constant(e)
    with tf.GradientTape() as tape:
        tape.watch(e)
        value = loss(y, e)
    return value.numpy(), tape.gradient(value, e).numpy()


@pytest.fixture(scope="session")
def ref():
    return types.SimpleNamespace(
        LABELS=LABELS,
        CLASS_SIZES=CLASS_SIZES,
        embeddings=embeddings,
        pairwise=pairwise,
        cosine=cosine,
        candidates=candidates,
        pos_neg=pos_neg,
        triplet_list=triplet_list,
        pairs_from_triplets=pairs_from_triplets,
        semi_hard_triplets=semi_hard_triplets,
        hard_triplets=hard_triplets,
        importance_targets=importance_targets,
        hong_weights=hong_weights,
        central_gradient=central_gradient,
        check_xla_equals_eager_with_unknown_batch=check_xla_equals_eager_with_unknown_batch,
        keras_file_round_trip=keras_file_round_trip,
        constant_daml_generator=constant_daml_generator,
        shifted_daml_generator=shifted_daml_generator,
        fixed_pairs=fixed_pairs,
        random_multiplicities=random_multiplicities,
        value_and_grad=value_and_grad,
    )
