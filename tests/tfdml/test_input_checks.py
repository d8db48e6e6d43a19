"""Invalid targets are never trained on silently, in every compile mode.

XLA drops in-graph asserts, so a loss states its checks as counts
(``MetricLoss.input_checks``): eagerly the loss raises at once, in a user's graph
it asserts, under XLA its value is NaN, and :class:`tfdml.models.EmbeddingModel`
counts the invalid rows in its step and raises :class:`tfdml.errors.InvalidInputError`
after it, without having updated a weight from them. Id columns that arrive as
floats with a fraction (a label 1.5) are refused the same way, never rounded.
"""

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdml import distributed, errors, losses, models, optimizers, samplers

B = 8
GOOD_LABELS = np.repeat(np.arange(4), 2).astype("int64")


def _importance(labels, **overrides):
    y = {"label": labels, "class_size": np.full(B, 5.0, "float32"),
         "w_pos": np.full(B, 0.1, "float32"), "w_neg": np.full(B, 0.01, "float32"),
         "w_triplet": np.full(B, 0.02, "float32")}
    y.update(overrides)
    return y


#: name -> (loss factory, invalid targets, pattern every error message matches, the
#: offending values an eager error lists)
CASES = {
    "margin_label_above_num_classes": (
        lambda: losses.MarginLoss(num_classes=4, sampler=None),
        {"label": GOOD_LABELS + 10},
        r"MarginLoss: the 'label' column must lie in \[0, num_classes=4\).*8 examples", "(got 10, 11, 12, 13)",
    ),
    "margin_label_2_to_the_40": (
        lambda: losses.MarginLoss(num_classes=4, sampler=None),
        {"label": GOOD_LABELS + 2**40},
        r"'label' column must lie in \[0, num_classes=4\).*8 examples", "(got 1099511627776, 1099511627777",
    ),
    "margin_negative_label": (
        lambda: losses.MarginLoss(num_classes=4, sampler=None),
        {"label": GOOD_LABELS - 1},
        r"'label' column must lie in \[0, num_classes=4\).*2 examples", "(got -1)",
    ),
    "margin_example_id_above_num_examples": (
        lambda: losses.MarginLoss(num_examples=6, sampler=None),
        {"label": GOOD_LABELS, "example_id": np.arange(B, dtype="int64")},
        r"'example_id' column must lie in \[0, num_examples=6\).*2 examples", "(got 6, 7)",
    ),
    "contrastive_negative_w_pos": (
        lambda: losses.ContrastiveLoss(importance=True),
        _importance(GOOD_LABELS, w_pos=np.full(B, -0.1, "float32")),
        r"ContrastiveLoss: the 'w_pos' column must be finite and >= 0.*8 examples", "(got -0.1)",
    ),
    "contrastive_nonfinite_w_neg": (
        lambda: losses.ContrastiveLoss(importance=True, sampler="hard"),
        _importance(GOOD_LABELS, w_neg=np.array([np.inf] + [0.01] * (B - 1), "float32")),
        r"'w_neg' column must be finite and >= 0.*1 example[^s]", "(got inf)",
    ),
    "margin_class_size_below_one": (
        lambda: losses.MarginLoss(importance=True, sampler=None),
        _importance(GOOD_LABELS, class_size=np.full(B, 0.5, "float32")),
        r"MarginLoss: the 'class_size' column must be finite and >= 1.*8 examples", "(got 0.5)",
    ),
    "triplet_negative_w_triplet": (
        lambda: losses.TripletLoss(importance=True, sampler="hard"),
        _importance(GOOD_LABELS, w_triplet=np.full(B, -1.0, "float32")),
        r"TripletLoss: the 'w_triplet' column must be finite and >= 0.*8 examples", "(got -1.0)",
    ),
    "proxy_nca_label_above_num_classes": (
        lambda: losses.ProxyNCALoss(num_classes=4, embedding_dim=4, seed=0),
        {"label": GOOD_LABELS + 4},
        r"ProxyNCALoss: the 'label' column must lie in \[0, num_classes=4\).*8 examples", "(got 4, 5, 6, 7)",
    ),
    "triplet_fractional_label": (
        lambda: losses.TripletLoss(sampler="hard"),
        {"label": GOOD_LABELS.astype("float32") + np.array([0.5, 0.0] * 4, "float32")},
        r"TripletLoss: the 'label' column must hold whole numbers \(integer ids\).*4 examples", "(got 0.5, 1.5, 2.5, 3.5)",
    ),
    "contrastive_fractional_pair_id": (
        lambda: losses.ContrastiveLoss(),
        {"label": GOOD_LABELS, "pair_id": np.array([0, 0, 1, 1, 2, 2, 3, 3.25], "float32")},
        r"ContrastiveLoss: the 'pair_id' column must hold whole numbers \(integer ids\).*1 example[^s]", "(got 3.25)",
    ),
    "balanced_nan_class_size": (
        lambda: losses.BalancedContrastiveLoss(num_classes=4, importance=False),
        _importance(GOOD_LABELS, class_size=np.array([np.nan] + [5.0] * (B - 1), "float32")),
        r"BalancedContrastiveLoss: the 'class_size' column must be finite and >= 1.*1 example[^s]", "(got nan)",
    ),
    "triplet_npair_sampler_three_of_a_class": (
        lambda: losses.TripletLoss(sampler="npair"),
        {"label": np.array([0, 0, 0, 1, 1, 2, 2, 3], "int64")},
        r"TripletLoss: the 'label' column must hold exactly two examples of each class \(an N-pair "
        r"batch\).*4 examples", "(got 0, 3)",
    ),
}

X = np.random.default_rng(0).normal(size=(B, 4)).astype("float32")


def _as_tensors(y):
    return {k: tf.constant(v) for k, v in y.items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_eager_call_raises_at_once(case):
    make, y, pattern, seen = CASES[case]
    embeddings = tf.math.l2_normalize(tf.constant(X), axis=1)
    with pytest.raises(errors.InvalidInputError, match=pattern) as raised:
        make()(_as_tensors(y), embeddings)
    assert seen in str(raised.value)


def _valid(y):
    """Valid targets with the same columns as ``y``."""
    valid = {k: v for k, v in _importance(GOOD_LABELS).items() if k in y}
    if "example_id" in y:
        valid["example_id"] = np.arange(B, dtype="int64") % 6
    if "pair_id" in y:
        valid["pair_id"] = np.repeat(np.arange(4), 2)
    return valid


@pytest.mark.parametrize("case", sorted(CASES))
def test_graph_call_raises(case):
    """A user's own tf.function (no XLA): the loss asserts, so the call stops with the
    check's message; the same function on valid targets is a number."""
    make, y, pattern, _ = CASES[case]
    loss = make()
    embeddings = tf.math.l2_normalize(tf.constant(X), axis=1)
    graph = tf.function(lambda y, e: loss(y, e))
    expected = pattern.split(".*")[0].replace("'", "`") + r", but some examples of the batch do not"
    with pytest.raises(tf.errors.InvalidArgumentError, match=expected):
        graph(_as_tensors(y), embeddings)
    assert np.isfinite(graph(_as_tensors(_valid(y)), embeddings).numpy())


@pytest.mark.parametrize("case", sorted(CASES))
def test_xla_loss_is_nan(case):
    """Under XLA, which drops asserts, a tfdml loss outside EmbeddingModel is NaN, never a
    finite value computed from invalid targets."""
    make, y, _, _ = CASES[case]
    loss = make()
    embeddings = tf.math.l2_normalize(tf.constant(X), axis=1)
    compiled = tf.function(lambda y, e: loss(y, e), jit_compile=True)
    assert np.isnan(compiled(_as_tensors(y), embeddings).numpy())
    assert np.isfinite(compiled(_as_tensors(_valid(y)), embeddings).numpy())


def _model(make_loss, jit_compile, strategy=None, gather_replicas=True):
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        keras.utils.set_random_seed(0)
        inputs = keras.Input((4,))
        outputs = keras.layers.UnitNormalization()(keras.layers.Dense(4)(inputs))
        model = models.EmbeddingModel(keras.Model(inputs, outputs), gather_replicas=gather_replicas)
        model.compile(optimizer=optimizers.SGD(0.1), loss=make_loss(), jit_compile=jit_compile)
        model.build((None, 4))
    return model


def _weights(model):
    return [v.numpy().copy() for v in model.trainable_variables + [
        v for layer in model.loss_parameters for v in layer.trainable_variables]]


def _dataset(y, repeat=True):
    ds = tf.data.Dataset.from_tensors((X, y))
    return ds.repeat() if repeat else ds


#: The whole step compiled, the default ("auto": on a CPU the loss only), the loss only, nothing.
MODES = [True, "auto", "loss", False]


@pytest.mark.parametrize("jit_compile", MODES)
@pytest.mark.parametrize("case", ["margin_label_above_num_classes", "margin_label_2_to_the_40"])
def test_fit_raises_after_the_step_and_trains_nothing(case, jit_compile):
    """The Keras default included: fit stops with the error after the first step, before a
    second one, and neither the encoder nor β_class moved."""
    make, y, _, _ = CASES[case]
    model = _model(make, jit_compile)
    before = _weights(model)
    steps = []
    callback = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: steps.append(b))
    with pytest.raises(errors.InvalidInputError,
                       match=r"MarginLoss: the 'label' column must lie in \[0, num_classes=4\).*8 examples"):
        model.fit(_dataset(y), steps_per_epoch=3, epochs=1, verbose=0, callbacks=[callback])
    assert steps == []
    for a, b in zip(before, _weights(model)):
        np.testing.assert_array_equal(a, b)
    # The count was consumed by the error: valid targets train again, β_class with them.
    model.fit(_dataset({"label": GOOD_LABELS}), steps_per_epoch=2, epochs=1, verbose=0)
    assert np.any(model.loss_parameters[0].beta_class.numpy() != 0)


#: Every other check in the three modes of the acceptance; by default each in one of them.
_OTHER_CASES = sorted(set(CASES) - {"margin_label_above_num_classes", "margin_label_2_to_the_40"})
_EVERY_CHECK = [
    pytest.param(case, mode, marks=[] if i % 3 == j else [pytest.mark.slow])
    for i, case in enumerate(_OTHER_CASES) for j, mode in enumerate([True, "auto", False])
]


@pytest.mark.parametrize("case, jit_compile", _EVERY_CHECK)
def test_fit_raises_for_every_check(case, jit_compile):
    make, y, pattern, _ = CASES[case]
    model = _model(make, jit_compile)
    before = _weights(model)
    with pytest.raises(errors.InvalidInputError, match=pattern):
        model.fit(_dataset(y), steps_per_epoch=2, epochs=1, verbose=0)
    for a, b in zip(before, _weights(model)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("jit_compile", [True, False])
def test_evaluate_raises(jit_compile):
    make, y, pattern, _ = CASES["margin_example_id_above_num_examples"]
    model = _model(make, jit_compile)
    with pytest.raises(errors.InvalidInputError, match=pattern):
        model.evaluate(_dataset(y, repeat=False), verbose=0)


@pytest.mark.parametrize("jit_compile", [False, "auto"])
def test_fit_run_eagerly_raises(jit_compile):
    """run_eagerly: an eager loss raises itself, listing the values; with the default the
    loss still runs compiled (jit_compile="loss" on a CPU) and the count raises after the step."""
    make, y, pattern, seen = CASES["margin_label_above_num_classes"]
    model = _model(make, jit_compile)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=make(), run_eagerly=True, jit_compile=jit_compile)
    before = _weights(model)
    with pytest.raises(errors.InvalidInputError, match=pattern) as raised:
        model.fit(_dataset(y), steps_per_epoch=2, epochs=1, verbose=0)
    assert (seen in str(raised.value)) == (jit_compile is False)
    for a, b in zip(before, _weights(model)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_plain_keras_model_stops_on_a_fractional_label(jit_compile):
    """Without EmbeddingModel nothing counts after the step: without XLA the loss's assert
    stops fit with the check's message; under XLA the loss is NaN (which
    keras.callbacks.TerminateOnNaN stops on), never a number computed from rounded labels."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.UnitNormalization()(keras.layers.Dense(3)(inputs)))
    model.compile(optimizer="sgd", loss=losses.TripletLoss(sampler="hard"), jit_compile=jit_compile)
    labels = GOOD_LABELS.astype("float32") + 0.5
    if not jit_compile:
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"the `label` column must hold whole numbers"):
            model.fit(X, labels, batch_size=B, epochs=2, verbose=0)
        return
    history = model.fit(X, labels, batch_size=B, epochs=2, verbose=0,
                        callbacks=[keras.callbacks.TerminateOnNaN()])
    assert len(history.history["loss"]) == 1 and np.isnan(history.history["loss"][0])


def test_whole_float_labels_still_train():
    """Labels that arrive as whole floats (1.0) are ids as before (with the warning that
    a float holds ids exactly only up to its mantissa)."""
    model = _model(lambda: losses.TripletLoss(sampler="hard"), False)
    history = model.fit(_dataset({"label": GOOD_LABELS.astype("float32")}), steps_per_epoch=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_mirrored_fit_and_custom_loop_raise(mirrored_strategy):
    """Two replicas, each with half of the batch, the second one holding every bad row;
    mining on the global batch (the default) or on each replica's slice."""
    labels = GOOD_LABELS.copy()
    labels[-2:] = [4, 5]  # the second replica's slice only
    make = lambda: losses.MarginLoss(num_classes=4, sampler=None)  # noqa: E731
    pattern = r"'label' column must lie in \[0, num_classes=4\).*2 examples"
    model = _model(make, "auto", mirrored_strategy)
    per_replica = _model(make, "auto", mirrored_strategy, gather_replicas=False)
    before = _weights(model)
    for trained in (model, per_replica):
        with pytest.raises(errors.InvalidInputError, match=pattern):
            trained.fit(_dataset({"label": labels}), steps_per_epoch=2, epochs=1, verbose=0)
    with pytest.raises(errors.InvalidInputError, match=pattern + r" of the batch of epoch 1, step 1 do not\."):
        distributed.train_loop(model, mirrored_strategy, _dataset({"label": labels}), B, epochs=1,
                               steps_per_epoch=2, verbose=0)
    for a, b in zip(before, _weights(model)):
        np.testing.assert_array_equal(a, b)


def _every_loss_and_sampler():
    """(name, loss) for every registered loss, with each sampler it accepts and importance on
    where it has it (a few samplers need a seed, margin its tables)."""
    for name, cls in sorted(losses.LOSSES.items()):
        params = inspect.signature(cls.__init__).parameters
        kwargs = {key: value for key, value in (("num_classes", 4), ("num_examples", B), ("embedding_dim", 4))
                  if key in params}
        if cls.supports_importance and "importance" in params:
            kwargs["importance"] = True
        choices = [] if cls.sampler_required else [None]
        if cls.sampler_kinds and "sampler" in params:
            choices += [s for s in samplers.SAMPLERS if samplers.get(s).kind in cls.sampler_kinds]
        for sampler in choices:
            extra = {} if sampler is None else {"sampler": sampler, "seed": 1}
            yield f"{name}-{sampler}", lambda cls=cls, kwargs=kwargs, extra=extra: cls(**kwargs, **extra)


#: Traced by default (each loss with a check, and the samplers that sort or draw); all the rest slow.
_TRACED_BY_DEFAULT = {"margin-None", "balanced_contrastive-None", "triplet-semi_hard",
                      "precision_at_k-None"}


@pytest.mark.parametrize("name, make", [
    pytest.param(name, make, marks=[] if name in _TRACED_BY_DEFAULT else [pytest.mark.slow], id=name)
    for name, make in _every_loss_and_sampler()])
def test_no_assert_ops_left_for_xla_to_drop(name, make):
    """Under XLA every check is a count: no Assert op in any traced loss and sampler, their
    branches and XLA-only forms included (XLA logs "Ignoring Assert operator" and drops them)."""
    loss = make()
    y = _as_tensors(dict(_importance(GOOD_LABELS), example_id=np.arange(B, dtype="int64")))
    embeddings = tf.math.l2_normalize(tf.constant(X), axis=1)
    function = tf.function(lambda y, e: loss(y, e), jit_compile=True)
    graph_def = function.get_concrete_function(y, embeddings).graph.as_graph_def()
    ops = {node.op for node in graph_def.node}
    ops |= {node.op for function in graph_def.library.function for node in function.node_def}
    assert "Assert" not in ops, name
