"""Distance weighted sampling, Wu et al. 2017 §4: Pr(n*=n|a) ∝ min(λ, q^{-1}(D_an)) with
q(d) ∝ d^{n-2} [1 - d²/4]^{(n-3)/2}, and §5: one negative per positive pair."""

import numpy as np
import pytest
import scipy.special
import scipy.stats
import tensorflow as tf

from tfdml import kernels, masks, samplers


def _numpy_probabilities(d, y, cand, n, cutoff, nonzero_loss_cutoff, lam):
    """Wu §4 written out per anchor in float64; q normalised by B(1/2, (n-1)/2)."""
    b = len(y)
    out = np.zeros((b, b))
    for a in range(b):
        negs = [j for j in range(b) if j != a and cand[a, j] and y[j] != y[a]]
        log_w = {}
        for j in negs:
            if nonzero_loss_cutoff is not None and d[a, j] >= nonzero_loss_cutoff:
                continue
            x = min(max(d[a, j], cutoff), 2.0 - 1e-4)
            log_q = (n - 2) * np.log(x) + (n - 3) / 2 * np.log(1 - x**2 / 4) - scipy.special.betaln(0.5, (n - 1) / 2)
            log_w[j] = -log_q if lam is None else min(np.log(lam), -log_q)  # min(λ, q^{-1})
        if log_w:
            top = max(log_w.values())
            for j, v in log_w.items():
                out[a, j] = np.exp(v - top)
            out[a] /= out[a].sum()
        elif negs:  # every negative beyond the no-loss cutoff: uniform fallback
            out[a, negs] = 1.0 / len(negs)
    return out


def test_density_is_normalised_on_the_sphere():
    # q(d) integrates to 1 over (0, 2) (the distance density of Wu §4, [1]).
    d = np.linspace(1e-4, 2 - 1e-4, 200001).astype(np.float64)
    for n in (3, 8, 32):
        q = np.exp(-samplers.log_inverse_density(tf.constant(d), n, cutoff=0.0).numpy())
        assert abs(np.trapezoid(q, d) - 1.0) < 1e-3


@pytest.mark.parametrize(
    "n,cutoff,nonzero,lam",
    [(3, 0.5, 1.4, None), (8, 0.5, 1.4, None), (8, 0.3, None, 3.0), (128, 0.5, 1.4, None), (16, 0.5, 1.4, 2.0)],
)
@pytest.mark.parametrize("seed", [0, 1])
def test_probabilities_match_wu_sec4(n, cutoff, nonzero, lam, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, size=13)
    pair_id = rng.integers(0, 2, size=13) if seed else None
    d = rng.uniform(0.0, 1.99, size=(13, 13)).astype(np.float32)
    cand = masks.candidate_mask(y, pair_id).numpy()
    got = samplers.distance_weighted_probabilities(d, y, cand, n, cutoff, nonzero, lam).numpy()
    ref = _numpy_probabilities(d.astype(np.float64), y, cand, n, cutoff, nonzero, lam)
    np.testing.assert_allclose(got, ref, rtol=2e-4, atol=1e-6)
    has_neg = (cand & (y[:, None] != y[None])).any(1)
    np.testing.assert_allclose(got.sum(1)[has_neg], 1.0, rtol=1e-5)
    assert np.all(got[~has_neg] == 0)
    if lam is not None:  # the clip is active in this case: it changes the distribution
        unclipped = _numpy_probabilities(d.astype(np.float64), y, cand, n, cutoff, nonzero, None)
        assert not np.allclose(ref, unclipped, atol=1e-3)


def _star_batch(neg_dist, members=30):
    """Class 0 has ``members`` examples, each at the same distances ``neg_dist`` from the
    negatives (one per class 1, 2, ...): every anchor of class 0 draws from one distribution."""
    k = len(neg_dist)
    b = members + k
    y = np.concatenate([np.zeros(members, int), 1 + np.arange(k)]).astype(np.int32)
    d = np.full((b, b), 1.0, np.float32)
    d[:members, :members] = 0.2
    d[:members, members:] = neg_dist
    d[members:, :members] = np.asarray(neg_dist)[:, None]
    np.fill_diagonal(d, 0.0)
    return d, y


def _draw_counts(sampler, d, y, seeds, members, n):
    b = len(y)
    counts = np.zeros(b, int)
    for s in seeds:
        sel = sampler(d, y, seed=tf.constant([s, 17]), embedding_dim=n)
        m = sel.mask.numpy() & (sel.anchor.numpy() < members)
        counts += np.bincount(sel.negative.numpy()[m], minlength=b)
    return counts


def test_draws_follow_target_distribution_chi_square():
    neg_dist = [0.3, 0.6, 0.8, 1.0, 1.2, 1.35, 1.5, 1.9]  # the last two: beyond 1.4, probability 0
    members, n = 30, 4
    d, y = _star_batch(neg_dist, members)
    sampler = samplers.DistanceWeightedSampler()
    probs = _numpy_probabilities(d.astype(np.float64), y, masks.candidate_mask(y).numpy(), n, 0.5, 1.4, None)[0]
    counts = _draw_counts(sampler, d, y, range(8), members, n)
    assert counts[:members].sum() == 0  # never a same-class example
    support = probs > 0
    assert counts[~support].sum() == 0  # never a zero-weight negative
    total = counts.sum()
    assert total == 8 * members * (members - 1)  # one negative per positive pair (Wu §5)
    assert scipy.stats.chisquare(counts[support], probs[support] * total).pvalue > 0.01


def test_all_negatives_beyond_cutoff_fall_back_to_uniform():
    members, n = 30, 16
    d, y = _star_batch([1.5, 1.6, 1.7, 1.8], members)
    sampler = samplers.DistanceWeightedSampler()
    probs = sampler.probabilities(d, y, embedding_dim=n).numpy()
    np.testing.assert_allclose(probs[0], [0] * members + [0.25] * 4)
    counts = _draw_counts(sampler, d, y, range(3), members, n)
    assert counts[:members].sum() == 0
    assert scipy.stats.chisquare(counts[members:]).pvalue > 0.01


def test_draws_respect_candidates_and_labels():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 3, size=20)
    pair_id = rng.integers(0, 3, size=20)
    cand = masks.candidate_mask(y, pair_id).numpy()
    x = rng.normal(size=(20, 6))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    d = np.linalg.norm(x[:, None] - x[None], axis=-1).astype(np.float32)
    sampler = samplers.DistanceWeightedSampler(cutoff=0.3)
    probs = sampler.probabilities(d, y, cand, embedding_dim=6).numpy()
    pos = cand & (y[:, None] == y[None])
    has_neg = (cand & (y[:, None] != y[None])).any(1)
    for s in range(5):
        sel = sampler(d, y, cand, seed=[s, 0], embedding_dim=6)
        m = sel.mask.numpy()
        a, p, neg = sel.anchor.numpy(), sel.positive.numpy(), sel.negative.numpy()
        np.testing.assert_array_equal(m, (pos & has_neg[:, None]).reshape(-1))
        assert np.all(cand[a[m], neg[m]]) and np.all(y[a[m]] != y[neg[m]])
        assert np.all(probs[a[m], neg[m]] > 0)
        assert np.all(y[a[m]] == y[p[m]])


def test_probabilities_carry_no_gradient():
    x = tf.Variable(tf.math.l2_normalize(tf.random.stateless_normal([6, 4], [0, 1]), axis=1))
    with tf.GradientTape() as tape:
        d = tf.norm(x[:, None] - x[None] + 1e-3, axis=-1)
        probs = samplers.distance_weighted_probabilities(d, [0, 0, 1, 1, 2, 2], embedding_dim=4)
        probe = tf.reduce_sum(probs * tf.range(6, dtype=tf.float32))
    assert tape.gradient(probe, x) is None


def test_errors():
    d, y = np.zeros((3, 3), np.float32), [0, 0, 1]
    with pytest.raises(ValueError, match="embedding_dim"):
        samplers.DistanceWeightedSampler()(d, y, seed=[0, 0])
    with pytest.raises(ValueError, match="seed"):
        samplers.DistanceWeightedSampler()(d, y, embedding_dim=8)
    with pytest.raises(ValueError, match="embedding_dim"):
        samplers.distance_weighted_probabilities(d, y, embedding_dim=1)
    with pytest.raises(ValueError, match="cutoff"):
        samplers.DistanceWeightedSampler(cutoff=2.5)
    with pytest.raises(ValueError, match="lam"):
        samplers.DistanceWeightedSampler(lam=0.0)
    # the constructor's embedding_dim is the default, the call's wins
    sel = samplers.DistanceWeightedSampler(embedding_dim=8)(d, y, seed=[0, 0])
    assert sel.mask.shape == (9,)


def test_a_loss_refuses_distance_weighted_sampling_on_another_distance():
    """Q(d) is the density of euclidean distances on the unit sphere (Wu §4);
    PML asserts it, we refuse it when the loss is built."""
    from tfdml import losses

    for distance in ("cosine", "squared_euclidean"):
        with pytest.raises(ValueError, match=r"DistanceWeightedSampler assumes euclidean .*"
                                             rf"distance='{distance}'.*use distance='euclidean'"):
            losses.MarginLoss(num_classes=3, sampler="distance_weighted", distance=distance)
    losses.MarginLoss(num_classes=3, sampler="distance_weighted")  # the default: euclidean


def _inverse_cdf_batch(per_class):
    """48 unit embeddings: m-per-class (4: every anchor has 3 positives, XLA lists them) or
    classes of 20, 20 and 8 (19 positives: more than XLA lists per anchor, it searches the whole grid)."""
    sizes = [4] * 12 if per_class == 4 else [20, 20, 8]
    y = np.repeat(np.arange(len(sizes)), sizes).astype(np.int32)
    rng = np.random.default_rng(per_class)
    x = rng.normal(size=(len(y), 8))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    d = np.linalg.norm(x[:, None] - x[None], axis=-1).astype(np.float32)
    cand = masks.candidate_mask(y).numpy() & (rng.random(d.shape) > 0.1)  # a few pairs left out
    return d, y, cand


@pytest.mark.parametrize("per_class", [4, 20])
@pytest.mark.parametrize("mode", ["eager", "xla", "xla_unknown_batch"])
def test_each_valid_slot_draws_by_inverse_cdf_with_its_own_uniform(per_class, mode):
    """The negative of valid slot (a, p) is the first column n with cdf[a, n] > u[a, p]·cdf[a, -1],
    u the slot's philox uniform (searchsorted, side="right"), whichever slots are searched;
    an invalid slot holds 0. Under XLA the CDF may differ from eager in its last bits, so
    there a draw is checked against its bracket with a 1e-5 tolerance."""
    d, y, cand = _inverse_cdf_batch(per_class)
    b, n = len(y), 8
    sampler = samplers.DistanceWeightedSampler()
    seed = tf.constant([3, 9], tf.int32)
    cdf = tf.cumsum(sampler.probabilities(d, y, cand, embedding_dim=n), axis=1).numpy()
    u = samplers.base.uniform01([b, b], seed).numpy() * cdf[:, -1:]
    valid = (cand & (y[:, None] == y[None])) & (cand & (y[:, None] != y[None])).any(1, keepdims=True)
    listed = kernels.choose("triplet_slots", mode="xla", device="CPU").params["width"]  # slots XLA lists per anchor
    assert (valid.sum(1).max() <= listed) == (per_class == 4)

    def run(d, y, cand, seed):
        return tuple(sampler(d, y, cand, seed=seed, embedding_dim=n))

    if mode == "eager":
        sel = run(d, y, cand, seed)
    else:
        spec = None
        if mode == "xla_unknown_batch":
            spec = (tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None], tf.int32),
                    tf.TensorSpec([None, None], tf.bool), tf.TensorSpec([2], tf.int32))
        sel = tf.function(run, input_signature=spec, jit_compile=True)(d, y, cand, seed)
    negative = sel[2].numpy().reshape(b, b)
    np.testing.assert_array_equal(sel[3].numpy().reshape(b, b), valid)
    assert np.all(negative[~valid] == 0)
    a, p = np.nonzero(valid)
    if mode == "eager":
        expected = [min(np.searchsorted(cdf[i], u[i, j], side="right"), np.nonzero(cdf[i] < cdf[i, -1])[0].size)
                    for i, j in zip(a, p)]
        np.testing.assert_array_equal(negative[a, p], expected)
    else:
        got = negative[a, p]
        below = np.where(got > 0, cdf[a, np.maximum(got - 1, 0)], 0.0)
        assert np.all(below <= u[a, p] + 1e-5) and np.all(u[a, p] < cdf[a, got] + 1e-5)
    assert np.all(y[a] != y[negative[a, p]]) and np.all(cand[a, negative[a, p]])
