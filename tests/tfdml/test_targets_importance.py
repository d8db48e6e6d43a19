import numpy as np
import pytest

from tfdml import importance, targets


def test_unpack_plain_labels():
    t = targets.unpack(np.array([[1], [2], [1]]))
    assert t.label.numpy().tolist() == [1, 2, 1]
    assert t.class_size is None and t.pair_id is None
    assert importance.pair_weights(t) is None


def test_unpack_rejects_unknown_column_and_missing_label():
    with pytest.raises(ValueError, match="labels_typo"):
        targets.unpack({"label": [1], "labels_typo": [1]})
    with pytest.raises(ValueError, match="'label'"):
        targets.unpack({"class_size": [1.0]})


def test_pair_weights_follow_hong_eq25_group_design():
    """Columns -> W_ij equals Hong Eq. 25 computed directly (N, L, m, n known)."""
    class_sizes = {0: 5, 1: 3, 2: 7}
    N, L, m, n = sum(class_sizes.values()), len(class_sizes), 2, 2
    labels = np.array([0, 0, 2, 2])
    nc = np.array([class_sizes[c] for c in labels], dtype="float32")
    w_pos = L * (m * n - 1) / ((m - 1) * N * (N - 1))
    w_neg = L * (L - 1) * (m * n - 1) / (m * (n - 1) * N * (N - 1))
    cols = {
        "label": labels,
        "class_size": nc,
        "w_pos": np.full(4, w_pos, "float32"),
        "w_neg": np.full(4, w_neg, "float32"),
    }
    W = importance.pair_weights(cols).numpy()
    for i in range(4):
        for j in range(4):
            Ni, Nj = nc[i], nc[j]
            if labels[i] == labels[j]:
                expected = L * (m * n - 1) * Ni * (Ni - 1) / ((m - 1) * N * (N - 1))
            else:
                expected = L * (L - 1) * (m * n - 1) * Ni * Nj / (m * (n - 1) * N * (N - 1))
            np.testing.assert_allclose(W[i, j], expected, rtol=1e-5)
