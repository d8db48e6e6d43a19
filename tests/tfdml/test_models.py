"""EmbeddingModel: dict targets, tracked loss state, global-batch mining under MirroredStrategy."""

import gc

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdml
from tfdml import distances, losses, masks, models, targets, xla


@keras.saving.register_keras_serializable(package="tfdml_test")
class ToyOffset(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.offset = self.add_weight(shape=(), initializer="ones", name="offset")


@keras.saving.register_keras_serializable(package="tfdml_test")
class BatchHardToyLoss(keras.losses.Loss):
    """Batch-hard triplet with a trainable margin: its value depends on the
    whole batch, so per-replica mining would give a different loss."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.state = ToyOffset()

    @property
    def parameter_layers(self):
        return [self.state]

    def call(self, y_true, y_pred):
        t = targets.unpack(y_true)
        d = distances.pairwise_euclidean(y_pred)
        pos, neg = masks.pair_masks(t.label)
        hardest_pos = tf.reduce_max(tf.where(pos, d, 0.0), axis=1)
        hardest_neg = tf.reduce_min(tf.where(neg, d, 1e9), axis=1)
        return tf.reduce_mean(tf.nn.relu(hardest_pos - hardest_neg + self.state.offset))


def _data(n=16):
    x = np.random.RandomState(0).rand(n, 8, 8, 1).astype("float32")
    y = {"label": np.repeat(np.arange(n // 4), 4).astype("int32")}
    return x, y


def _model(strategy=None, loss=None):
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        keras.utils.set_random_seed(1)
        encoder = models.build_encoder(models.small_cnn((8, 8, 1), width=4), embedding_dim=8)
        model = models.EmbeddingModel(encoder)
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss or BatchHardToyLoss())
    return model


def test_fit_with_dict_targets_trains_loss_state():
    x, y = _data()
    model = _model()
    assert any(v is model.loss_parameters[0].offset for v in model.trainable_variables)
    before = float(model.loss_parameters[0].offset.numpy())
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(16), epochs=2, verbose=0)
    assert float(model.loss_parameters[0].offset.numpy()) != before


def test_keras_file_round_trip_restores_embeddings_and_loss_state(tmp_path):
    x, y = _data()
    model = _model()
    model.fit(x, y["label"], batch_size=16, epochs=1, verbose=0)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = tfdml.load_model(path)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-6)
    assert loaded.loss_parameters[0].offset.numpy() == pytest.approx(
        model.loss_parameters[0].offset.numpy()
    )


def test_mirrored_training_equals_single_device_on_global_batch(mirrored_strategy):
    """Cross-replica gather: same loss and same weights as one device (2 logical CPUs)."""
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    single = _model()
    h1 = single.fit(ds, epochs=2, verbose=0).history["loss"]
    mirrored = _model(mirrored_strategy)
    h2 = mirrored.fit(ds, epochs=2, verbose=0).history["loss"]
    np.testing.assert_allclose(h1, h2, atol=1e-5)
    for a, b in zip(single.trainable_variables, mirrored.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)


def test_per_replica_mining_differs_from_global(mirrored_strategy):
    """Control: without the gather, the mirrored run mines on slices and differs."""
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    single = _model()
    h1 = single.fit(ds, epochs=1, verbose=0).history["loss"]
    mirrored = _model(mirrored_strategy)
    mirrored.gather_replicas = False
    h2 = mirrored.fit(ds, epochs=1, verbose=0).history["loss"]
    assert abs(h1[0] - h2[0]) > 1e-4


def test_clear_errors():
    encoder = models.build_encoder(models.mlp((4,), width=8), embedding_dim=4)
    with pytest.raises(ValueError, match="needs a loss"):
        models.EmbeddingModel(encoder).compile(optimizer="sgd")
    with pytest.raises(ValueError, match="Unknown backbone"):
        models.get_backbone("resnet9000", (8, 8, 1))


def test_small_cnn_pooling_options():
    assert models.small_cnn((8, 8, 1), width=4, pooling="flatten").output_shape == (None, 4 * 4 * 16)  # one 2x2 pool on 8x8 inputs
    assert models.small_cnn((8, 8, 1), width=4).output_shape == (None, 16)
    with pytest.raises(ValueError, match="pooling"):
        models.small_cnn((8, 8, 1), pooling="max")


class MaskingLoss(keras.losses.Loss):
    """A loss that hides non-finite embeddings behind a ``where`` (as a mask,
    a max or a ReLU kernel may): finite whatever the embeddings hold."""

    def call(self, y_true, y_pred):
        return tf.reduce_mean(tf.where(tf.math.is_finite(y_pred), y_pred, 0.0) ** 2)


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_nonfinite_embeddings_are_reported_even_when_the_loss_hides_them(
        nonfinite_after, jit_compile, value):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    poisoned = nonfinite_after(after=2, value=value)(keras.layers.Dense(3)(inputs))
    model = models.EmbeddingModel(keras.Model(inputs, poisoned))
    model.compile(optimizer="sgd", loss=MaskingLoss(), jit_compile=jit_compile)
    x = np.random.default_rng(0).normal(size=(8, 4)).astype("float32")
    ds = tf.data.Dataset.from_tensors((x, np.arange(8) % 2)).repeat()
    seen = []
    callback = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: seen.append(dict(logs)))
    model.fit(ds, steps_per_epoch=4, epochs=1, verbose=0, callbacks=[callback])
    # Steps 1-2 clean, steps 3-4 carry one non-finite row each (the metric sums the epoch).
    assert [s[models.NONFINITE_METRIC] for s in seen] == [0, 0, 1, 2]
    assert all(np.isfinite(s["loss"]) for s in seen[:2])
    assert all(np.isnan(s["loss"]) for s in seen[2:])


def test_terminate_on_nan_stops_at_the_first_nonfinite_embedding(nonfinite_after):
    """Keras' own guard sees it too: the step's loss is NaN."""
    inputs = keras.Input((4,))
    model = models.EmbeddingModel(keras.Model(inputs, nonfinite_after(after=1)(keras.layers.Dense(2)(inputs))))
    model.compile(optimizer="sgd", loss=MaskingLoss())
    x = np.ones((4, 4), "float32")
    ds = tf.data.Dataset.from_tensors((x, np.arange(4))).repeat()
    history = model.fit(ds, steps_per_epoch=5, epochs=3, verbose=0,
                        callbacks=[keras.callbacks.TerminateOnNaN()])
    assert len(history.history["loss"]) == 1


@pytest.mark.parametrize("how", ["arrays", "dataset"])
def test_sample_weight_is_refused_not_dropped(how):
    """Model.fit(..., sample_weight=w) trained as if w were absent. The losses
    score tuples, so a per-example weight is refused with the fix, before any update."""
    x, y = _data()
    model = _model(loss=losses.TripletLoss(sampler="hard"))
    before = [v.numpy().copy() for v in model.trainable_variables]
    w = np.linspace(0.5, 2.0, len(x)).astype("float32")
    with pytest.raises(ValueError, match="no per-example sample_weight.*importance"):
        if how == "arrays":
            model.fit(x, y, sample_weight=w, batch_size=16, epochs=1, verbose=0)
        else:
            model.fit(tf.data.Dataset.from_tensor_slices((x, y, w)).batch(16), epochs=1, verbose=0)
    for a, b in zip(before, model.trainable_variables):
        np.testing.assert_array_equal(a, b.numpy())


def test_private_keras_api_we_rely_on():
    """The three private Keras attributes (and one TensorFlow function) tfdml still uses, each with no public
    equivalent (see the comments at their use). If Keras changes one, this names it."""
    model = _model()
    tracker = getattr(model, "_tracker", None)
    assert tracker is not None and all(hasattr(tracker, n) for n in ("lock", "unlock", "locked")), (
        "keras.Model._tracker.lock/unlock/locked changed: EmbeddingModel.compile uses them to "
        "track the loss's state layers on an already built model (tfdml/models.py).")
    plain = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    plain.compile(loss="mse")
    assert hasattr(plain, "_compile_loss"), (
        "keras.Model.compile no longer sets _compile_loss: EmbeddingModel.compile clears it so "
        "that Keras' target-structure check does not reject the batch-contract dict.")
    assert model._compile_loss is None
    tracker = getattr(plain, "_loss_tracker", None)
    assert isinstance(tracker, keras.metrics.Mean) and tracker in plain.metrics, (
        "keras.Model._loss_tracker changed: DSNEmbeddingModel.train_step updates it to report "
        "'loss' (tfdml/dsn/model.py).")
    # TensorFlow: the module function behind GradientTape.stop_recording, used by
    # models.CompiledLoss (jit_compile="loss") to hide the compiled call from Keras' tape.
    from tensorflow.python.eager import record

    x = tf.constant(2.0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        with record.stop_recording():
            hidden = x * x
        seen = x * x
    assert tape.gradient(hidden, x) is None and float(tape.gradient(seen, x)) == 4.0, (
        "tensorflow.python.eager.record.stop_recording changed: models.CompiledLoss uses it so "
        "that the train step's tape does not split the compiled loss into forward and backward "
        "functions (tfdml/compiled_loss.py).")
    from keras.src.trainers.epoch_iterator import EpochIterator

    assert callable(getattr(EpochIterator, "reset", None)), (
        "keras.src.trainers.epoch_iterator.EpochIterator.reset changed: EmbeddingModel.fit "
        "resets the epoch iterators of a fit that raised (tfdml/keras_shims.py).")
    seen = []
    check = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: seen.append(isinstance(getattr(plain, "_eval_epoch_iterator", None),
                                                                EpochIterator)))
    plain.fit(np.zeros((4, 2), "float32"), np.zeros((4, 1), "float32"), validation_data=(
        np.zeros((2, 2), "float32"), np.zeros((2, 1), "float32")), callbacks=[check], verbose=0)
    assert seen == [True], (
        "keras.Model._eval_epoch_iterator changed: EmbeddingModel.fit drops the validation "
        "iterator of a fit that raised (tfdml/keras_shims.py).")


def test_additional_losses_are_added_as_keras_adds_them():
    x, y = _data()
    keras.utils.set_random_seed(2)
    encoder = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(),
                                keras.layers.Dense(8, kernel_regularizer=keras.regularizers.L2(0.5)),
                                keras.layers.ActivityRegularization(l1=0.01)])
    model = models.EmbeddingModel(encoder)
    model.compile(optimizer="sgd", loss=losses.TripletLoss(sampler="hard"))
    y_pred = model(x)
    with_reg = float(model.compute_loss(x, y, y_pred))
    alone = float(losses.TripletLoss(sampler="hard")(y, y_pred))
    reference = alone + sum(float(np.sum(v)) for v in model.losses)
    assert model.losses and with_reg == pytest.approx(reference, rel=1e-6) and with_reg > alone


def _fit_margin(jit_compile, x, y, steps=3):
    keras.utils.set_random_seed(3)
    encoder = models.build_encoder(models.small_cnn((8, 8, 1), width=4), embedding_dim=8)
    model = models.EmbeddingModel(encoder)
    loss = losses.MarginLoss(num_classes=4, seed=5)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=loss, jit_compile=jit_compile)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat()
    history = model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)
    return model, history.history["loss"][0]


def test_jit_compile_loss_compiles_the_loss_only_and_trains_as_graph_mode(tmp_path):
    """jit_compile="loss": the loss and its sampler are one XLA computation,
    the train step itself is not compiled, and training follows graph mode."""
    x, y = _data()
    graph, graph_loss = _fit_margin(False, x, y)
    loss_only, loss_only_loss = _fit_margin("loss", x, y)
    assert loss_only.jit_compile is False and loss_only.jit_compile_loss is True
    # The compiled piece is the loss: XLA gives its HLO.
    embeddings = loss_only(x[:16], training=False)
    hlo = loss_only._loss_call._value_and_gradients.experimental_get_compiler_ir(y, embeddings)(stage="hlo")
    assert "HloModule" in hlo
    # Same sampler stream, same steps: same loss and weights as graph mode (float tolerance:
    # XLA may fuse the arithmetic in another order).
    np.testing.assert_allclose(loss_only_loss, graph_loss, rtol=1e-4)
    for a, b in zip(loss_only.trainable_variables, graph.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-5)
    # Saved and reloaded, the model keeps the setting.
    path = str(tmp_path / "m.keras")
    loss_only.save(path)
    again = tfdml.load_model(path)
    assert again.jit_compile_loss is True and again.get_compile_config()["jit_compile"] == "loss"


def _small_model():
    return models.EmbeddingModel(models.build_encoder(models.small_cnn((8, 8, 1), width=4), embedding_dim=8))


def test_auto_jit_compile_on_cpu_compiles_the_loss_only(monkeypatch):
    """Keras' default jit_compile="auto" would compile the whole step, convolutions included,
    which on a CPU is ~2x slower than graph mode (benchmarks/RESULTS.md, "XLA modes"); on a
    machine without GPU EmbeddingModel resolves it to the loss and its sampler only, and
    records "auto" (resolved again where the model is loaded). Explicit values are kept."""
    monkeypatch.setattr(models.tf.config, "list_physical_devices", lambda kind=None: [])  # any machine
    model = _small_model()
    model.compile(optimizer="sgd", loss=losses.MarginLoss(num_classes=4, seed=5))
    assert model.jit_compile is False and model.jit_compile_loss is True
    assert model.get_compile_config()["jit_compile"] == "auto"
    for explicit, whole, loss_only in ((True, True, False), (False, False, False), ("loss", False, True)):
        model = _small_model()
        model.compile(optimizer="sgd", loss=losses.MarginLoss(num_classes=4, seed=5), jit_compile=explicit)
        assert (model.jit_compile, model.jit_compile_loss) == (whole, loss_only)
        assert model.get_compile_config()["jit_compile"] == explicit


def test_auto_jit_compile_with_a_gpu_is_keras_auto(monkeypatch):
    """With a GPU visible, "auto" is left to Keras (the whole step where the layers allow it)."""
    monkeypatch.setattr(models.tf.config, "list_physical_devices",
                        lambda kind=None: ["GPU:0"] if kind == "GPU" else [])
    assert models.resolve_auto_jit_compile("auto") == "auto"
    assert models.resolve_auto_jit_compile(False) is False


def test_auto_jit_compile_with_replicas_on_cpu_compiles_nothing(mirrored_strategy, monkeypatch):
    """Several replicas on split CPU devices: XLA cannot place their mirrored variables, so
    "auto" compiles nothing (Keras' "auto" would try the whole step and fail)."""
    monkeypatch.setattr(models.tf.config, "list_physical_devices", lambda kind=None: [])
    with mirrored_strategy.scope():
        model = _small_model()
        model.compile(optimizer="sgd", loss=losses.MarginLoss(num_classes=4, seed=5))
    assert model.jit_compile is False and model.jit_compile_loss is False


def test_jit_compile_refuses_other_strings():
    model = models.EmbeddingModel(models.build_encoder(models.small_cnn((8, 8, 1), width=4), embedding_dim=8))
    with pytest.raises(ValueError, match=r"jit_compile='losses': use True .*'loss'"):
        model.compile(loss=losses.TripletLoss(), jit_compile="losses")


class _ModeRevealingLoss:
    """Σ y_pred, times 1 when traced for XLA and 2 in graph mode, so the value shows which
    form ran; it reports XLA slower for batches of more than 4 rows."""

    parameter_layers = []

    def __call__(self, y, y_pred):
        return (1.0 if xla.is_compiling() else 2.0) * tf.reduce_sum(y_pred)

    def xla_is_slower(self, y):
        return tf.shape(targets.unpack(y).label)[0] > 4


@pytest.mark.parametrize("batch,factor", [(4, 1.0), (8, 2.0)])
def test_compiled_loss_runs_without_xla_where_the_loss_says_xla_is_slower(batch, factor):
    """jit_compile="loss": a batch for which the loss reports XLA slower (a custom sampler
    may say so) runs the loss in graph mode; the others run compiled. One traced step
    serves both (the choice is made at run time)."""
    compiled = models.CompiledLoss(_ModeRevealingLoss(), lambda: [])
    spec = [{"label": tf.TensorSpec([None], tf.int32)}, tf.TensorSpec([None, 3], tf.float32)]

    @tf.function(input_signature=spec)
    def step(y, e):
        with tf.GradientTape() as tape:
            tape.watch(e)
            value = compiled(y, e)
        return value, tape.gradient(value, e), compiled(y, e, training=False)

    # Eighths: every partial sum is exact in float32, so the value does not depend on the
    # order in which a CPU's kernels add (it did with tenths, checked to a tolerance).
    e = np.arange(batch * 3, dtype=np.float32).reshape(batch, 3) / 8
    value, grad, evaluated = step({"label": np.zeros(batch, np.int32)}, e)
    expected = np.float32(factor * e.astype(np.float64).sum())
    np.testing.assert_array_equal(value.numpy(), expected)
    np.testing.assert_array_equal(grad.numpy(), np.full_like(e, factor))
    np.testing.assert_array_equal(evaluated.numpy(), expected)


def test_jit_compile_loss_fit_with_a_class_semi_hard_sorts_trains_as_graph_mode():
    """A user's pipeline of unknown batch size whose batches alternate between small classes
    (semi-hard's compare path) and a class of more than the CPU table's XLA sort_above + 1
    examples (its sort path, under XLA the sorting network of tfdml.kernels.sorting): training
    follows graph mode."""
    from tfdml import kernels

    rng = np.random.default_rng(4)
    big = kernels.CHOICES["CPU"]["semi_hard"]["xla"].params["sort_above"] + 2
    labels = [np.repeat(np.arange(50), 4), np.concatenate([np.zeros(big), np.repeat(np.arange(1, 4), 3)])]
    batches = [(rng.random((len(y), 8, 8, 1)).astype("float32"), {"label": y.astype("int64")})
               for y in labels]
    spec = (tf.TensorSpec([None, 8, 8, 1], tf.float32), {"label": tf.TensorSpec([None], tf.int64)})

    def fit(jit_compile):
        keras.utils.set_random_seed(3)
        model = _small_model()
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss=losses.TripletLoss(),
                      jit_compile=jit_compile)
        data = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec)
        history = model.fit(data.repeat(), steps_per_epoch=4, epochs=1, verbose=0)
        return model, history.history["loss"][0]

    graph, graph_loss = fit(False)
    loss_only, loss_only_loss = fit("loss")
    assert loss_only.jit_compile_loss is True and graph_loss > 0
    np.testing.assert_allclose(loss_only_loss, graph_loss, rtol=1e-4)
    for a, b in zip(loss_only.trainable_variables, graph.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-5)


def test_fit_on_a_dataset_leaves_it_in_its_order_without_a_shuffle_warning():
    """A tf.data dataset is the batch design's order: EmbeddingModel.fit passes
    shuffle=False for one, so Keras' "shuffle=True ... ignored" warning is not raised."""
    import warnings

    x = np.random.default_rng(0).normal(size=(16, 4)).astype("float32")
    y = np.repeat(np.arange(4), 4)
    model = models.EmbeddingModel(keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)]))
    model.compile(optimizer="sgd", loss=losses.ContrastiveLoss(), jit_compile=False)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(data, epochs=1, verbose=0)
    assert not [w for w in caught if "shuffle" in str(w.message)]


def _live_data_iterators():
    """tf.data iterators alive or awaiting a garbage collection (a cycle not yet collected)."""
    from tensorflow.python.data.ops import iterator_ops

    return sum(isinstance(o, iterator_ops.OwnedIterator) for o in gc.get_objects())


@pytest.mark.parametrize("validation", [False, True], ids=["train", "with_validation"])
def test_a_fit_that_raises_leaves_no_data_iterator_for_a_garbage_collection(validation):
    """A fit that raises (a callback, a NaN guard, a kill handled by the caller) releases its
    input iterators when the exception is dropped: Keras' epoch iterator and its suspended
    generator form a reference cycle, and a tf.data iterator destroyed by a later collection
    waits for its autotuning thread, the longer the longer it lay uncollected."""

    class Stop(keras.callbacks.Callback):  # in the second epoch, after one validation
        epoch = 0

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            if self.epoch == 1 and batch == 1:
                raise RuntimeError("stop")

    x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
    y = np.repeat(np.arange(8), 4)
    model = models.EmbeddingModel(keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)]))
    model.compile(optimizer="sgd", loss=losses.ContrastiveLoss(), jit_compile=False)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()
    kwargs = {"validation_data": data, "validation_steps": 1, "validation_freq": 1} if validation else {}
    gc.collect()
    gc.disable()
    try:
        before = _live_data_iterators()
        try:
            model.fit(data, steps_per_epoch=3, epochs=2, verbose=0, callbacks=[Stop()], **kwargs)
        except RuntimeError:
            pass
        assert _live_data_iterators() == before
        if validation:  # the validation iterator too (Keras keeps it on the model until fit ends)
            model.evaluate(data, steps=1, verbose=0)
            assert _live_data_iterators() == before
    finally:
        gc.enable()


def test_a_fit_that_raises_inside_a_callback_of_another_fit_leaves_the_outer_fit_running():
    """Only the epoch iterators below the failed fit are reset: an outer fit whose callback
    ran the failed one trains on to its last step."""
    x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
    y = np.repeat(np.arange(8), 4)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()

    def model():
        m = models.EmbeddingModel(keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)]))
        m.compile(optimizer="sgd", loss=losses.ContrastiveLoss(), jit_compile=False)
        return m

    class Stop(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            raise RuntimeError("inner")

    class InnerFit(keras.callbacks.Callback):
        failures = 0

        def on_train_batch_end(self, batch, logs=None):
            try:
                model().fit(data, steps_per_epoch=2, verbose=0, callbacks=[Stop()])
            except RuntimeError:
                self.failures += 1

    inner = InnerFit()
    history = model().fit(data, steps_per_epoch=3, epochs=2, verbose=0, callbacks=[inner])
    assert inner.failures == 6 and len(history.history["loss"]) == 2


def _trained_counting_traces(how, jit_compile):
    """(traces of the train step, the weights and optimizer state after training) of a
    dense encoder trained with ``how`` ("fit" or "train_on_batch") on _data()."""
    x, y = _data()
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    keras.utils.set_random_seed(1)
    encoder = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(), keras.layers.Dense(4)])
    model = models.EmbeddingModel(encoder)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=BatchHardToyLoss(), jit_compile=jit_compile)
    traces = []
    step = model.train_step
    model.train_step = lambda batch: traces.append(1) or step(batch)  # runs once per trace
    if how == "fit":
        model.fit(data, epochs=2, verbose=0)
    else:
        for batch in data.repeat(2):
            model.train_on_batch(*batch)
    return len(traces), [v.numpy() for v in model.trainable_variables + model.optimizer.variables]


@pytest.mark.parametrize("how, jit_compile", [("fit", False), ("fit", "loss"), ("train_on_batch", "loss")])
def test_the_train_step_is_traced_once(how, jit_compile):
    """The optimizer's variables (and the loss's state, made in its __init__) exist before
    the first trace: otherwise tf.function traces the step a second time."""
    assert _trained_counting_traces(how, jit_compile)[0] == 1


def test_building_the_optimizer_first_trains_as_keras_lazy_build(monkeypatch):
    """The same weights and optimizer state as when Keras builds the optimizer inside the
    first trace (which traces the step twice)."""
    traces, weights = _trained_counting_traces("fit", False)
    monkeypatch.setattr(models.EmbeddingModel, "build_optimizer", lambda self: None)
    lazy_traces, lazy_weights = _trained_counting_traces("fit", False)
    assert (traces, lazy_traces) == (1, 2)
    assert len(weights) == len(lazy_weights)
    for a, b in zip(weights, lazy_weights):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_export_serves_the_encoder_without_the_loss_state(tmp_path):
    """EmbeddingModel.export writes the embedding function: no variable of the loss's
    parameter_layers (here MarginLoss's β0 and β_class), the same embeddings."""
    x = np.random.default_rng(1).normal(size=(8, 4)).astype("float32")
    model = models.EmbeddingModel(keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)]))
    model.compile(optimizer="sgd", loss=losses.MarginLoss(num_classes=5), jit_compile=False)
    model.fit(x, np.arange(8) % 2, epochs=1, batch_size=8, verbose=0)
    model.export(str(tmp_path / "served"), verbose=False)
    served = tf.saved_model.load(str(tmp_path / "served"))
    assert {tuple(v.shape) for v in served.variables} == {(4, 3), (3,)}
    np.testing.assert_allclose(served.serve(tf.constant(x)).numpy(), model.predict(x, verbose=0),
                               atol=1e-6)


def test_dtype_policy_scope_builds_a_bfloat16_backbone_with_a_float32_head_and_restores_the_policy():
    """Under mixed_bfloat16 the backbone computes in bfloat16, every variable and the
    head stay float32, so the embeddings are float32; the global policy is restored
    after the block, also when it raises."""
    before = keras.config.dtype_policy().name
    with models.dtype_policy_scope("mixed_bfloat16"):
        encoder = models.build_encoder(models.small_cnn((8, 8, 1), width=4), embedding_dim=8)
    assert keras.config.dtype_policy().name == before
    backbone = encoder.get_layer("small_cnn")
    assert backbone.get_layer("conv0").compute_dtype == "bfloat16"
    assert encoder.get_layer("embedding").compute_dtype == "float32"
    assert encoder.get_layer("l2_normalize").compute_dtype == "float32"
    assert {v.dtype for v in encoder.variables} == {"float32"}
    x, y = _data()
    model = models.EmbeddingModel(encoder)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=losses.MarginLoss(num_classes=4),
                  jit_compile=False)
    history = model.fit(x, y, epochs=1, batch_size=16, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert model(x).dtype == tf.float32
    with pytest.raises(RuntimeError), models.dtype_policy_scope("mixed_bfloat16"):
        raise RuntimeError("a failing build")
    assert keras.config.dtype_policy().name == before


def test_dtype_policy_scope_refuses_other_policies():
    """mixed_float16 would need loss scaling, which the tfdml train steps do not do."""
    with pytest.raises(ValueError, match=r"'mixed_float16' is not supported.*auto, float32, mixed_bfloat16"):
        with models.dtype_policy_scope("mixed_float16"):
            pass


@pytest.mark.parametrize("flags, jit_compile, expected", [
    ({"avx2"}, False, "float32"),
    ({"avx2"}, models.LOSS_ONLY, "float32"),
    ({"avx512_bf16"}, False, "mixed_bfloat16"),
    ({"avx512_bf16"}, models.LOSS_ONLY, "mixed_bfloat16"),
    ({"avx512_bf16"}, True, "float32"),  # XLA compiles the encoder: float32
])
def test_the_auto_dtype_policy_follows_the_cpu_and_the_compiled_part(monkeypatch, flags, jit_compile, expected):
    from tfdml import kernels

    monkeypatch.setattr(kernels, "cpu_features", lambda: frozenset(flags))
    assert models.resolve_dtype_policy("auto", jit_compile) == expected
    for policy in models.DTYPE_POLICIES:
        assert models.resolve_dtype_policy(policy, jit_compile) == policy
    before = keras.config.dtype_policy().name
    with models.dtype_policy_scope("auto", jit_compile):
        assert keras.config.dtype_policy().name == expected
    assert keras.config.dtype_policy().name == before


def test_the_auto_dtype_policy_on_a_gpu_is_float32_until_measured(monkeypatch):
    from tfdml import kernels

    monkeypatch.setattr(kernels, "cpu_features", lambda: frozenset({"avx512_bf16"}))
    monkeypatch.setattr(kernels, "device_kind", lambda: "GPU")
    assert models.resolve_dtype_policy("auto") == "float32"
