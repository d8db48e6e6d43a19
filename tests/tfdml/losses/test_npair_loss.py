"""NPairLoss against Duan et al. 2019 Eq. 9 (Sohn's N-pair loss) + Sohn's ℓ2 regulariser."""

import numpy as np
import pytest

from tfdml.losses import NPairLoss


def np_pairs(labels, pair_id=None):
    """(slot, probe, gallery) triples: within each class (and pair_id), in batch order,
    members 1-2, 3-4, ... are pairs; pairs with pair_id all share slot 0."""
    groups = {}
    for i, lab in enumerate(labels):
        key = (lab, None if pair_id is None else pair_id[i])
        groups.setdefault(key, []).append(i)
    out = []
    for members in groups.values():
        for r in range(0, len(members) - 1, 2):
            out.append((r // 2, members[r], members[r + 1]))
    return out


def np_npair(e, labels, l2_reg, pair_id=None):
    """Eq. 9: 1/N Σ_i log(1 + Σ_{j≠i} exp(f_iᵀf_j⁺ − f_iᵀf_i⁺)) over the pairs of one slot
    (each N-pair batch), plus l2_reg/(2N) Σ (‖f_i‖² + ‖f_i⁺‖²)."""
    e = np.asarray(e, np.float64)
    pairs = np_pairs(labels, pair_id)
    if not pairs:
        return 0.0
    total, reg = 0.0, 0.0
    for slot, i, ip in pairs:
        others = [jp for s, j, jp in pairs if s == slot and labels[j] != labels[i]]
        inner = sum(np.exp(e[i] @ e[jp] - e[i] @ e[ip]) for jp in others)
        total += np.log1p(inner)
        reg += e[i] @ e[i] + e[ip] @ e[ip]
    n = len(pairs)
    return total / n + l2_reg * reg / (2 * n)


@pytest.mark.parametrize("case", ["mixed", "one_class", "no_positive"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_npair_eq9(ref, case, seed):
    labels = ref.LABELS[case]
    e = 2.0 * ref.embeddings(len(labels), seed=seed, normalize=False)
    for l2_reg in (0.0, 0.05):
        got = float(NPairLoss(l2_reg=l2_reg)(labels, e))
        np.testing.assert_allclose(got, np_npair(e, labels, l2_reg), rtol=1e-5, atol=1e-6)


def test_npair_m_per_class_batch(ref):
    """64-class-style m-per-class batch (here 5 classes × 4, shuffled): two N-pair batches."""
    rng = np.random.default_rng(3)
    labels = rng.permutation(np.repeat(np.arange(5), 4)).astype(np.int32)
    e = ref.embeddings(len(labels), dim=5, seed=3, normalize=False)
    assert len(np_pairs(labels)) == 10
    np.testing.assert_allclose(
        float(NPairLoss(l2_reg=0.01)(labels, e)), np_npair(e, labels, 0.01), rtol=1e-5
    )


def test_npair_pairs_from_pair_id(ref):
    labels = np.array([0, 0, 1, 1, 2, 0, 3, 3], np.int32)
    pair_id = np.array([0, 0, 1, 1, 2, 2, 3, 3], np.int32)
    e = ref.embeddings(len(labels), seed=5, normalize=False)
    expected = np_npair(e, labels, 0.002, pair_id)
    assert len(np_pairs(labels, pair_id)) == 3  # the negative pair 2 (labels 2, 0) is no N-pair
    got = NPairLoss()({"label": labels, "pair_id": pair_id}, e)
    np.testing.assert_allclose(float(got), expected, rtol=1e-5)


def test_npair_takes_the_base_arguments_through_kwargs_and_refuses_a_distance():
    import inspect

    import keras

    assert list(inspect.signature(NPairLoss.__init__).parameters) == ["self", "l2_reg", "kwargs"]
    loss = NPairLoss(l2_reg=0.01, tuple_reduction="sum", name="np", dtype="float64", seed=3)
    config = loss.get_config()
    assert config == {"name": "np", "reduction": "sum_over_batch_size", "dtype": "float64",
                      "tuple_reduction": "sum", "l2_reg": 0.01}
    assert keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss)).get_config() == config
    with pytest.raises(ValueError, match="NPairLoss scores dot products .* and takes no distance; remove distance"):
        NPairLoss(distance="cosine")
    with pytest.raises(ValueError, match="NPairLoss takes no sampler"):
        NPairLoss(sampler="hard")
    with pytest.raises(ValueError, match="NPairLoss has no importance-weighted form"):
        NPairLoss(importance=True)
