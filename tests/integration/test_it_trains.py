"""It trains: every loss family improves held-out Recall@1.

scikit-learn's bundled digits (8×8), a small MLP, ``model.compile(loss=...,
jit_compile=True)`` and ``model.fit`` on classes 0–4. Recall@1 is computed
here by brute force (independent of tfdml.metrics). Two held-out sets:

* **unseen classes 5–9** (the open-set protocol of the papers), with a
  4-dimensional embedding. The bottleneck is what makes this a test of
  transfer: on these 8×8 digits raw pixels already reach Recall@1 0.989 on
  classes 5–9 and a 16-d random network keeps almost all of that geometry
  (0.93–0.98), so training on five classes has nothing left to add (it lowers
  the figure for every loss we tried). Squeezed to 4 dimensions, an untrained
  network keeps random directions (Recall@1 0.40–0.49 over seeds 0–4) and the
  trained one keeps directions learned on 0–4 that also separate 5–9 (+0.05
  to +0.15 for every family at 60 steps, seeds 0–2).
* **unseen examples** (30%) of classes 0–4 with a 16-d embedding.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_digits

from tfdml import losses, models

M, N_CLASSES, STEPS = 8, 5, 40


@pytest.fixture(scope="module")
def all_digits():
    x, y = load_digits(return_X_y=True)
    return (x / 16.0).astype("float32"), y.astype("int32")


@pytest.fixture(scope="module")
def digits(all_digits):
    """Classes 0–4, split 70/30 into training and held-out examples."""
    x, y = all_digits
    x, y = x[y < 5], y[y < 5]
    held_out = np.random.default_rng(0).random(len(y)) < 0.3
    return x[~held_out], y[~held_out], x[held_out], y[held_out]


@pytest.fixture(scope="module")
def open_set_digits(all_digits):
    """Classes 0–4 for training, the unseen classes 5–9 held out."""
    x, y = all_digits
    return x[y < 5], y[y < 5], x[y >= 5], y[y >= 5]


def recall_at_1(emb, labels):
    d = ((emb[:, None, :] - emb[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(d, np.inf)
    return float(np.mean(labels[np.argmin(d, axis=1)] == labels))


def m_per_class_batches(x, y, m, seed):
    """Infinite batches of m examples from each of the training classes, with the
    batch-contract columns (group-design weights of Hong Eq. 25, m, n = all classes)."""
    rng = np.random.default_rng(seed)
    classes = np.unique(y)
    sizes = {c: int(np.sum(y == c)) for c in classes}
    N, L, n = len(y), len(classes), len(classes)
    w_pos = L * (m * n - 1) / ((m - 1) * N * (N - 1))
    w_neg = L * (L - 1) * (m * n - 1) / (m * (n - 1) * N * (N - 1))
    while True:
        idx = np.concatenate([rng.choice(np.flatnonzero(y == c), m, replace=False) for c in classes])
        lab = y[idx]
        yield x[idx], {
            "label": lab,
            "class_size": np.array([sizes[c] for c in lab], "float32"),
            "w_pos": np.full(len(idx), w_pos, "float32"),
            "w_neg": np.full(len(idx), w_neg, "float32"),
        }


LOSS_FAMILIES = {
    "contrastive": lambda: losses.ContrastiveLoss(margin=1.0),
    "triplet_semi_hard": lambda: losses.TripletLoss(margin=0.2, squared=False, sampler="semi_hard"),
    "margin_dws": lambda: losses.MarginLoss(num_classes=5, sampler="distance_weighted", seed=0),
    "weighted_contrastive": lambda: losses.WeightedContrastiveLoss(margin=1.0),
    "balanced_contrastive": lambda: losses.BalancedContrastiveLoss(margin=1.0, lam=4.0, num_classes=5),
    "npair": lambda: losses.NPairLoss(l2_reg=0.002),
    "precision_at_k": lambda: losses.PrecisionAtKLoss(k=5, gamma=0.1),
    "stable_contrast": lambda: losses.StableContrastLoss(alpha=0.2, beta=1.2, seed=0),
    "robust_hard_contrastive": lambda: losses.RobustHardContrastiveLoss(alpha=0.5, beta=0.2),
}


def train_and_measure(family, x_tr, y_tr, x_te, y_te, embedding_dim, steps):
    """Held-out Recall@1 of a seeded MLP encoder before and after ``steps`` of fit."""
    keras.utils.set_random_seed(0)
    encoder = models.build_encoder(models.mlp((64,), width=64, depth=1), embedding_dim=embedding_dim)
    model = models.EmbeddingModel(encoder)
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss=LOSS_FAMILIES[family](), jit_compile=True)
    before = recall_at_1(model.predict(x_te, verbose=0), y_te)
    m = 2 if family == "npair" else M
    batch = m * N_CLASSES
    spec = (
        tf.TensorSpec((batch, 64), tf.float32),
        {
            "label": tf.TensorSpec((batch,), tf.int32),
            "class_size": tf.TensorSpec((batch,), tf.float32),
            "w_pos": tf.TensorSpec((batch,), tf.float32),
            "w_neg": tf.TensorSpec((batch,), tf.float32),
        },
    )
    ds = tf.data.Dataset.from_generator(lambda: m_per_class_batches(x_tr, y_tr, m, 0), output_signature=spec)
    history = model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0).history["loss"]
    assert np.all(np.isfinite(history))
    after = recall_at_1(model.predict(x_te, verbose=0), y_te)
    return before, after


@pytest.mark.parametrize("family", sorted(LOSS_FAMILIES))
def test_training_improves_recall_on_unseen_classes(family, open_set_digits):
    before, after = train_and_measure(family, *open_set_digits, embedding_dim=4, steps=60)
    # 900 queries: one binomial standard error of Recall@1 is at most 0.017.
    assert after > before + 0.02, f"{family}: Recall@1 on classes 5-9 {before:.3f} -> {after:.3f}"


@pytest.mark.parametrize("family", sorted(LOSS_FAMILIES))
def test_training_improves_recall_on_held_out_examples(family, digits):
    before, after = train_and_measure(family, *digits, embedding_dim=16, steps=STEPS)
    assert after > before, f"{family}: held-out Recall@1 {before:.3f} -> {after:.3f}"
