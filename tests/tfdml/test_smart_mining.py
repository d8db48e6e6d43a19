"""Smart mining (Harwood et al., ICCV 2017), model side: the table of nearest neighbours of
another class against a brute-force NumPy search, its recall with faiss's HNSW and IVF, the
adaptive controller on a hand case and through a checkpoint, and the refresh callback's
schedule in model.fit."""

import numpy as np
import pytest
import tensorflow as tf

from tfdml.mining import HardnessController, SmartMiningRefresh, hard_negative_table


def _data(n=120, d=8, classes=12, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)).astype(np.float32), np.arange(n) % classes


def brute_force_table(x, y, k, distance="euclidean"):
    """Loops over every example i: the k examples j with y_j != y_i of smallest distance."""
    x = np.asarray(x, np.float64)
    out = np.zeros((len(x), k), np.int64)
    for i in range(len(x)):
        cands = []
        for j in range(len(x)):
            if y[j] == y[i]:
                continue
            if distance == "cosine":
                dist = 1.0 - x[i] @ x[j] / (np.linalg.norm(x[i]) * np.linalg.norm(x[j]))
            else:
                dist = np.sqrt(np.sum((x[i] - x[j]) ** 2))
            cands.append((dist, j))
        out[i] = [j for _, j in sorted(cands)[:k]]
    return out


@pytest.mark.parametrize("distance", ["euclidean", "cosine"])
def test_exact_table_equals_brute_force_nearest_neighbours_of_other_classes(distance):
    x, y = _data()
    table = hard_negative_table(x, y, k=5, distance=distance)
    assert table.shape == (120, 5) and table.dtype == np.int32
    np.testing.assert_array_equal(table, brute_force_table(x, y, 5, distance))


def test_unequal_class_sizes_and_a_singleton_class():
    rng = np.random.default_rng(3)
    y = np.array([0] * 9 + [1] * 3 + [2] * 1 + [3] * 5)
    x = rng.normal(size=(len(y), 4)).astype(np.float32)
    np.testing.assert_array_equal(hard_negative_table(x, y, k=4), brute_force_table(x, y, 4))


def _recall(table, truth):
    return np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(table, truth)])


@pytest.mark.parametrize("approximate, params", [
    ("hnsw", {"hnsw_m": 16, "ef_search": 32}),
    ("ivf", {"nlist": 8, "nprobe": 4}),
])
def test_approximate_tables_recall_the_exact_neighbours(approximate, params):
    pytest.importorskip("faiss")
    # Clustered embeddings, as a trained model gives: 40 classes of 15 around their centres.
    rng = np.random.default_rng(7)
    centres = rng.normal(size=(40, 16)) * 3.0
    y = np.repeat(np.arange(40), 15)
    x = (centres[y] + rng.normal(size=(len(y), 16))).astype(np.float32)
    table = hard_negative_table(x, y, k=10, backend="faiss", approximate=approximate, **params)
    exact = hard_negative_table(x, y, k=10)
    assert table.shape == exact.shape
    assert not (y[table] == y[:, None]).any()  # never a neighbour of the same class
    assert _recall(table, exact) >= 0.9


def test_k_larger_than_the_other_classes_is_refused():
    x, y = _data(n=10, classes=2)
    with pytest.raises(ValueError, match="use k <= 5"):
        hard_negative_table(x, y, k=6)


def test_controller_follows_the_rule_on_a_hand_case():
    p = tf.Variable(0.5)
    ctrl = HardnessController(p, step=0.1, low=0.2, high=0.8)
    # loss:     1.0 (recorded), 0.8 (<=: up), 0.9 (>: down), 0.7 (up), 0.7 (<=: up),
    #           nan (ignored), 0.6 (up), 0.5 (up, clipped at 0.8), 2.0 (down)
    losses = [1.0, 0.8, 0.9, 0.7, 0.7, float("nan"), 0.6, 0.5, 2.0]
    expected = [0.5, 0.6, 0.5, 0.6, 0.7, 0.7, 0.8, 0.8, 0.7]
    got = [ctrl.observe(v) for v in losses]
    np.testing.assert_allclose(got, expected, atol=1e-6)
    for _ in range(10):
        ctrl.observe(3.0 + _)  # rising loss: down to low and no further
    assert float(p.numpy()) == pytest.approx(0.2)


def test_controller_state_is_restored_from_a_checkpoint(tmp_path):
    ctrl = HardnessController(tf.Variable(0.5), step=0.1)
    for v in (1.0, 0.5):
        ctrl.observe(v)
    path = tf.train.Checkpoint(controller=ctrl).write(str(tmp_path / "ckpt"))
    other = HardnessController(tf.Variable(0.0), step=0.1)
    tf.train.Checkpoint(controller=other).read(path).assert_consumed()
    assert float(other.fraction.numpy()) == pytest.approx(0.6)
    assert float(other.last_loss.numpy()) == pytest.approx(0.5)
    assert other.observe(0.4) == pytest.approx(0.7)  # continues from the restored loss


def test_controller_refuses_bad_arguments():
    with pytest.raises(ValueError, match="tf.Variable"):
        HardnessController(0.5)
    with pytest.raises(ValueError, match="low <= high"):
        HardnessController(tf.Variable(0.5), low=0.9, high=0.1)


def _frozen_model(d=8):
    model = tf.keras.Sequential([tf.keras.Input([d]), tf.keras.layers.Dense(4)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.0), loss="mse")
    return model


def test_refresh_on_schedule_writes_the_table_of_the_models_embeddings():
    x, y = _data(n=48, classes=6)
    model = _frozen_model()
    table = tf.Variable(tf.fill([48, 3], -1))
    refresh = SmartMiningRefresh(tf.data.Dataset.from_tensor_slices(x).batch(16), y, table,
                                 refresh_every=2, controller=HardnessController(tf.Variable(0.5)),
                                 verbose=0)
    train = tf.data.Dataset.from_tensor_slices((x, np.zeros((48, 4), np.float32))).batch(16)
    history = model.fit(train, epochs=5, callbacks=[refresh], verbose=0)
    assert refresh.refreshed_at == [0, 2, 4]
    expected = hard_negative_table(model.predict(x, verbose=0), y, 3)
    np.testing.assert_array_equal(table.numpy(), expected)
    assert len(history.history["hard_fraction"]) == 5
    # A resumed fit refreshes at its first epoch, then on the schedule.
    model.fit(train, epochs=6, initial_epoch=3, callbacks=[refresh], verbose=0)
    assert refresh.refreshed_at == [0, 2, 4, 3, 4]


def test_refresh_refuses_a_table_of_the_wrong_size():
    x, y = _data(n=48, classes=6)
    with pytest.raises(ValueError, match="one row per example"):
        SmartMiningRefresh(tf.data.Dataset.from_tensor_slices(x).batch(16), y,
                           tf.Variable(tf.fill([40, 3], -1)))
