"""RetrievalEvaluation: logs seen by History, CSVLogger, EarlyStopping, ModelCheckpoint;
the guards of a run: NaNGuard, EarlyStop."""

import json
import os
import re
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdml import metrics, models, runs
from tfdml.callbacks import EarlyStop, NaNGuard, NonFiniteError, RetrievalEvaluation


def square_norm(y_true, y_pred):
    return tf.reduce_mean(tf.square(y_pred))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(5), 8).astype(np.int32)
    centers = rng.standard_normal((5, 8)) * 3
    x = (centers[labels] + rng.standard_normal((40, 8))).astype(np.float32)
    return x, labels


def make_model(learning_rate=0.01):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate), loss=square_norm)
    return model


def test_works_under_the_default_strategy_scope(data):
    x, labels = data
    with tf.distribute.get_strategy().scope():
        model = make_model()
    cb = RetrievalEvaluation((x, labels), metrics=["map@r"])
    hist = model.fit(x, labels, epochs=1, batch_size=20, verbose=0, callbacks=[cb])
    ref = metrics.evaluate_embeddings(model(x).numpy(), labels, ["map@r"])
    assert hist.history["map@r"] == [pytest.approx(ref["map@r"])]


def test_history_gets_the_metrics_of_the_final_weights(data):
    x, labels = data
    model = make_model()
    cb = RetrievalEvaluation((x, labels), metrics=["recall", "map@r", "nmi"], ks=[1, 3])
    hist = model.fit(x, labels, epochs=2, batch_size=20, verbose=0, callbacks=[cb])
    for key in ("recall@1", "recall@3", "map@r", "nmi"):
        assert len(hist.history[key]) == 2
    ref = metrics.evaluate_embeddings(model.predict(x, verbose=0), labels,
                                      ["recall", "map@r", "nmi"], [1, 3])
    for key in cb.keys:
        assert hist.history[key][-1] == pytest.approx(ref[key])
    assert "num_queries" not in hist.history


def test_every_n_epochs_and_prefix(data):
    x, labels = data
    cb = RetrievalEvaluation((x, labels), every_n_epochs=2, metrics=["map@r"], prefix="val_")
    hist = make_model().fit(x, labels, epochs=3, batch_size=20, verbose=0, callbacks=[cb])
    assert len(hist.history["val_map@r"]) == 1  # epoch 2 only


def test_early_stopping_checkpoint_and_csv_read_the_key(data, tmp_path):
    x, labels = data
    model = make_model(learning_rate=0.0)  # nothing changes: no improvement after epoch 1
    path = str(tmp_path / "best.keras")
    csv = str(tmp_path / "log.csv")
    callbacks = [
        RetrievalEvaluation((x, labels), metrics=["recall", "map@r"]),
        keras.callbacks.ModelCheckpoint(path, monitor="map@r", mode="max", save_best_only=True),
        keras.callbacks.EarlyStopping(monitor="recall@1", mode="max", patience=0),
        keras.callbacks.CSVLogger(csv),
    ]
    hist = model.fit(x, labels, epochs=6, batch_size=20, verbose=0, callbacks=callbacks)
    assert len(hist.history["loss"]) == 2  # stopped by EarlyStopping on recall@1
    assert os.path.exists(path)
    header = open(csv).readline().strip().split(",")
    assert "map@r" in header and "recall@1" in header


def test_dataset_input_equals_arrays(data):
    x, labels = data
    model = make_model()
    model.fit(x, labels, epochs=1, batch_size=20, verbose=0)
    ds = tf.data.Dataset.from_tensor_slices((x, labels)).batch(7)
    from_ds = RetrievalEvaluation(ds, metrics=["recall", "map@r"])
    from_arrays = RetrievalEvaluation((x, labels), metrics=["recall", "map@r"])
    for cb in (from_ds, from_arrays):
        cb.set_model(model)
    assert from_ds.evaluate() == pytest.approx(from_arrays.evaluate())


def test_tensorboard_scalars(data, tmp_path):
    x, labels = data
    cb = RetrievalEvaluation((x, labels), metrics=["recall"], ks=[1], log_dir=str(tmp_path))
    make_model().fit(x, labels, epochs=2, batch_size=20, verbose=0, callbacks=[cb])
    tags = {}
    for f in tmp_path.iterdir():
        for event in tf.compat.v1.train.summary_iterator(str(f)):
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append(event.step)
    assert tags == {"retrieval/recall_at_1": [1, 2]}  # epochs counted from 1, as in history.csv


def test_bad_arguments(data):
    x, labels = data
    with pytest.raises(ValueError, match="every_n_epochs"):
        RetrievalEvaluation((x, labels), every_n_epochs=0)
    with pytest.raises(ValueError, match="Unknown metric"):
        RetrievalEvaluation((x, labels), metrics=["accuracy"])
    with pytest.raises(ValueError, match="must match"):
        RetrievalEvaluation((x, labels[:-1]))
    with pytest.raises(ValueError, match="tuple of arrays or a tf.data.Dataset"):
        RetrievalEvaluation(x)
    with pytest.raises(ValueError, match="dataset of \\(x, labels\\)"):
        RetrievalEvaluation(tf.data.Dataset.from_tensor_slices(x))
    with pytest.raises(ValueError, match="Unknown argument"):
        RetrievalEvaluation((x, labels), chunksize=3)


_MIRRORED = textwrap.dedent("""
    import json, numpy as np, tensorflow as tf, keras
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from tfdml import metrics
    from tfdml.callbacks import RetrievalEvaluation
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(5), 9).astype(np.int32)
    x = (rng.standard_normal((5, 8))[labels] * 3 + rng.standard_normal((45, 8))).astype("float32")
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
        model.compile(optimizer="sgd", loss=lambda y, p: tf.reduce_mean(tf.square(p)))
    cb = RetrievalEvaluation((x, labels), metrics=["recall", "map@r"], batch_size=10)
    hist = model.fit(x, labels, epochs=1, batch_size=10, verbose=0, callbacks=[cb])
    direct = model(x).numpy()  # one device, no strategy involved
    ref = metrics.evaluate_embeddings(direct, labels, ["recall", "map@r"])
    print(json.dumps({"replicas": strategy.num_replicas_in_sync,
                      "logged": {k: hist.history[k][-1] for k in cb.keys},
                      "ref": {k: ref[k] for k in cb.keys}}))
""")


@pytest.mark.slow  # a fresh TensorFlow process (logical devices are fixed at start-up): ~30 s
def test_works_under_mirrored_strategy_on_two_logical_cpus():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, "-c", _MIRRORED], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["replicas"] == 2
    assert result["logged"] == pytest.approx(result["ref"])


def test_epoch_summary_prints_one_line_per_epoch():
    import io

    from tfdml.callbacks import EpochSummary

    out = io.StringIO()
    summary = EpochSummary(stream=out)
    summary.set_params({"epochs": 4})
    summary.on_epoch_begin(2)
    summary.on_epoch_end(2, {"loss": 0.41234, "val_map@r": 0.5, "nonfinite_embeddings": 0})
    assert re.fullmatch(r"epoch 3/4: loss 0\.4123, val_map@r 0\.5000 \(0 s\)\n", out.getvalue())


def _scalars(folder):
    """{tag: [(step, value), ...]} of the event files in ``folder`` (TF's own reader)."""
    from tensorflow.core.util import event_pb2

    out = {}
    for name in sorted(os.listdir(folder)):
        for record in tf.data.TFRecordDataset(os.path.join(folder, name)):
            event = event_pb2.Event.FromString(record.numpy())
            for v in event.summary.value:
                value = float(tf.make_ndarray(v.tensor)) if v.HasField("tensor") else v.simple_value
                out.setdefault(v.tag, []).append((event.step, value))
    return out


def test_held_out_figures_go_to_their_own_tensorboard_run(data, tmp_path):
    """Test_* figures were logged under logs/train as if they were training
    figures; they go to logs/test, val_* to logs/validation, the loss stays in train."""
    from tfdml.callbacks import HeldOutTensorBoard

    x, labels = data
    model = make_model()
    callbacks = [RetrievalEvaluation((x, labels), metrics=["map@r"], prefix="test_"),
                 RetrievalEvaluation((x, labels), metrics=["recall"], ks=[1], prefix="val_"),
                 HeldOutTensorBoard(str(tmp_path), write_graph=False)]
    hist = model.fit(x, labels, epochs=2, batch_size=20, verbose=0, callbacks=callbacks)
    assert sorted(os.listdir(tmp_path)) == ["test", "train", "validation"]
    train = _scalars(tmp_path / "train")
    test = _scalars(tmp_path / "test")
    val = _scalars(tmp_path / "validation")
    assert "epoch_loss" in train and not any("map" in tag or "recall" in tag for tag in train)
    # Every run's step is the epoch counted from 1, as in history.csv and the progress bar.
    assert [s for s, _ in test["epoch_map@r"]] == [1, 2] == [s for s, _ in train["epoch_loss"]]
    np.testing.assert_allclose([v for _, v in test["epoch_map@r"]], hist.history["test_map@r"],
                               rtol=1e-6)
    np.testing.assert_allclose([v for _, v in val["epoch_recall@1"]], hist.history["val_recall@1"],
                               rtol=1e-6)
    assert "test_map@r" in hist.history  # the logs themselves are not changed for later callbacks


def test_loss_on_sample_is_hong_eq15_without_weights_over_all_pairs_of_the_sample(data):
    """LossOnSample with BalancedContrastiveLoss(importance=False): the mean over the
    n(n − 1) ordered pairs of the sample of Y·D² + (1 − Y)·η·[α − D]_+² with
    η = λ/(L − 1)·(N_{y_i} − 1)/N_{y_j} (Hong Eq. 15), written out in NumPy; logged under
    its key after epochs n, 2n, ... only."""
    from tfdml import losses
    from tfdml.callbacks import LossOnSample

    x, labels = data
    sizes = np.array([9.0, 12.0, 20.0, 15.0, 30.0], np.float32)  # N_c of a larger training split
    y = {"label": labels, "class_size": sizes[labels]}
    lam, alpha, num_classes = 16.0, 1.0, 7
    loss = losses.BalancedContrastiveLoss(margin=alpha, lam=lam, num_classes=num_classes, importance=False)
    model = make_model()
    callback = LossOnSample((x, y), loss, every_n_epochs=2, key="objective")
    model.fit(x, labels, epochs=3, batch_size=40, verbose=0, callbacks=[callback])
    e = model.predict(x, verbose=0).astype(np.float64)
    terms = []
    for i in range(len(labels)):
        for j in range(len(labels)):
            if i == j:
                continue
            d = np.linalg.norm(e[i] - e[j])
            if labels[i] == labels[j]:
                terms.append(d**2)
            else:
                eta = lam / (num_classes - 1) * (sizes[labels[i]] - 1) / sizes[labels[j]]
                terms.append(eta * max(alpha - d, 0.0) ** 2)
    assert callback.value() == pytest.approx(np.mean(terms), rel=1e-4)
    history = model.history.history
    assert len(history["objective"]) == 1  # epochs 3 and 1 are not multiples of 2
    with pytest.raises(ValueError, match="every_n_epochs"):
        LossOnSample((x, y), loss, every_n_epochs=0)
    with pytest.raises(ValueError, match=r"\(x, y\) pair"):
        LossOnSample(x, loss)


def test_early_stopping_count_continues_after_a_resume():
    """The backup's wait count is restored: one more flat evaluation reaches patience 2."""
    class Model:
        stop_training = False

    best = runs.AtomicCheckpoint("unused", monitor="val_map@r", best=0.5)
    stopper = EarlyStop(best, patience=2, wait=1)
    stopper.set_model(Model())
    stopper.on_epoch_end(3, {"loss": 1.0})  # an epoch without evaluation does not count
    assert not stopper.model.stop_training and stopper.wait == 1
    stopper.on_epoch_end(4, {"val_map@r": 0.4})  # the checkpoint kept its best 0.5
    assert stopper.model.stop_training and stopper.stopped_epoch == 4


class _Backup:
    def describe(self):
        return "runs/x/backup (after epoch 1)"


def test_nan_guard_names_the_step_and_the_last_good_checkpoint():
    guard = NaNGuard(_Backup())
    guard.on_epoch_begin(1)
    guard.on_train_batch_end(0, {"loss": 0.5, models.NONFINITE_METRIC: 0.0})  # finite: goes on
    with pytest.raises(NonFiniteError, match=r"the loss became nan at epoch 2, step 3\. "
                                             r"Last good checkpoint: runs/x/backup \(after epoch 1\)"):
        guard.on_train_batch_end(2, {"loss": float("nan")})
    with pytest.raises(NonFiniteError, match=r"embeddings became non-finite \(NaN or Inf in 2 row\(s\)\)"):
        guard.on_train_batch_end(0, {"loss": 0.5, models.NONFINITE_METRIC: 2.0})
