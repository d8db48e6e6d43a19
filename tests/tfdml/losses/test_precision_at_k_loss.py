"""PrecisionAtKLoss against Lu et al. 2019 §3.3: ℓ_k (Eq. 5) with ŝ (Eq. 4) and the misplaced
sets of Eq. 6–7 (n₊ < k) and Eq. 9–10 (n₊ ≥ k), summed over queries (Algorithm 1)."""

import numpy as np
import pytest

from tfdml import samplers

needs_top_k = pytest.mark.skipif(
    not hasattr(samplers, "TopKMisplacedSampler"), reason="tfdml.samplers has no TopKMisplacedSampler yet"
)


def misplaced(scores, y, k):
    """(P, N) index lists for one query from ŝ (``scores``) and y ∈ {0, 1} (Eq. 6, 7, 9, 10)."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    top = set(order[:k])  # K
    n_pos = int(sum(y))
    pos_scores = sorted([scores[i] for i in range(len(y)) if y[i]], reverse=True)
    neg_scores = sorted([scores[i] for i in range(len(y)) if not y[i]], reverse=True)
    if n_pos < k:  # Case 1
        P = [i for i in range(len(y)) if y[i] and i not in top]  # Eq. 6
        m = k - n_pos
        if m <= len(neg_scores):
            N = [i for i in top if not y[i] and scores[i] < neg_scores[m - 1]]  # Eq. 7
        else:
            N = []
    else:  # Case 2
        N = [i for i in top if not y[i]]  # Eq. 9
        P = [i for i in range(len(y)) if y[i] and i not in top and scores[i] >= pos_scores[k - 1]]  # Eq. 10
    return P, N


def test_reference_reproduces_figures_2_and_3():
    # Fig. 2: k = 6, n₊ = 4, ŝ sorted descending, orange = positive.
    s2 = [0.8, 0.7, 0.68, 0.66, 0.65, 0.6, 0.55, 0.5, 0.45, 0.4]
    y2 = [0, 0, 1, 1, 0, 0, 1, 0, 0, 1]
    P, N = misplaced(s2, y2, 6)
    assert sum(s2[i] for i in N) - sum(s2[i] for i in P) == pytest.approx(0.65 + 0.6 - (0.55 + 0.4))
    # Fig. 3: k = 5, n₊ = 6.
    s3 = [0.9, 0.8, 0.7, 0.65, 0.6, 0.55, 0.53, 0.5, 0.45, 0.4]
    y3 = [1, 0, 1, 0, 1, 1, 1, 1, 0, 1]
    P, N = misplaced(s3, y3, 5)
    assert sum(s3[i] for i in N) - sum(s3[i] for i in P) == pytest.approx(0.8 + 0.65 - (0.55 + 0.53))


def np_lk(e, labels, k, gamma, cand):
    """Σ_a ℓ_k(a), ℓ_k = Σ_N ŝ − Σ_P ŝ, ŝ = s + γ(1 − y), s cosine (Lu §3.1)."""
    s = np.asarray(e, np.float64)
    s = s / np.linalg.norm(s, axis=1, keepdims=True)
    s = s @ s.T
    total = 0.0
    for a in range(len(labels)):
        idx = [i for i in range(len(labels)) if cand[a, i]]
        y = [int(labels[i] == labels[a]) for i in idx]
        scores = [s[a, i] + gamma * (1 - yi) for i, yi in zip(idx, y)]
        P, N = misplaced(scores, y, k)
        total += sum(scores[i] for i in N) - sum(scores[i] for i in P)
    return total


@needs_top_k
@pytest.mark.parametrize("k", [2, 5])
@pytest.mark.parametrize("case", ["mixed", "one_class", "no_positive"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lk_eq5_both_cases(ref, case, seed, k):
    from tfdml.losses import PrecisionAtKLoss

    labels = ref.LABELS[case]
    e = ref.embeddings(len(labels), seed=seed, normalize=False)
    expected = np_lk(e, labels, k, 0.1, ref.candidates(labels))
    got = PrecisionAtKLoss(k=k, gamma=0.1)(labels, e)
    np.testing.assert_allclose(float(got), expected, rtol=1e-5, atol=1e-6)


@needs_top_k
def test_lk_pair_id_and_mean_reduction(ref):
    from tfdml.losses import PrecisionAtKLoss

    labels = ref.LABELS["mixed"]
    pair_id = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1], np.int32)
    e = ref.embeddings(len(labels), seed=3, normalize=False)
    cand = ref.candidates(labels, pair_id)
    expected = np_lk(e, labels, 2, 0.2, cand)
    y = {"label": labels, "pair_id": pair_id}
    np.testing.assert_allclose(float(PrecisionAtKLoss(k=2, gamma=0.2)(y, e)), expected, rtol=1e-5)
    mean = PrecisionAtKLoss(k=2, gamma=0.2, tuple_reduction="mean")(y, e)
    np.testing.assert_allclose(float(mean), expected / len(labels), rtol=1e-5)


@needs_top_k
def test_lk_takes_the_base_arguments_through_kwargs_and_refuses_what_it_fixes():
    import inspect

    import keras

    from tfdml.losses import PrecisionAtKLoss

    assert list(inspect.signature(PrecisionAtKLoss.__init__).parameters) == ["self", "k", "gamma", "kwargs"]
    loss = PrecisionAtKLoss(k=3, gamma=0.2, tuple_reduction="mean", name="lk", dtype="float64", seed=4)
    assert (loss.distance, type(loss.sampler).__name__, loss.sampler.k) == ("cosine", "TopKMisplacedSampler", 3)
    config = loss.get_config()
    assert config == {"name": "lk", "reduction": "sum_over_batch_size", "dtype": "float64",
                      "tuple_reduction": "mean", "k": 3, "gamma": 0.2}
    assert keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss)).get_config() == config
    with pytest.raises(ValueError, match=r"PrecisionAtKLoss scores cosine similarities .* and takes no distance; "
                                         r"remove distance"):
        PrecisionAtKLoss(distance="euclidean")
    with pytest.raises(ValueError, match=r"PrecisionAtKLoss selects .*TopKMisplacedSampler\(k\).* and takes no "
                                         r"sampler; remove sampler"):
        PrecisionAtKLoss(sampler="top_k")
