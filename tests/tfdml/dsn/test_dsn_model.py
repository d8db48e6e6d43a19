"""DSNEmbeddingModel: Algorithm 1 (Duan et al. 2019) as a train_step under model.fit,
the DSN saved and restored with the model, reproducible with a fixed seed."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdml
from tfdml import dsn, losses, models

K, M = 2, 6
CLASSES, PER_CLASS = 4, 5  # pools of 4 classes × 5 images (an m-per-class batch)


def _pools(num=4, seed=0):
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for _ in range(num):
        labels = np.repeat(rng.choice(10, CLASSES, replace=False), PER_CLASS).astype(np.int32)
        x = rng.normal(size=(len(labels), 8, 8, 1)).astype(np.float32) + labels[:, None, None, None] / 5
        xs.append(x)
        ys.append({"label": labels, "class_size": np.full(len(labels), 50.0, np.float32)})
    return xs, ys


def _dataset(xs, ys, start=0, steps=None):
    steps = len(xs) if steps is None else steps
    xs, ys = xs[start : start + steps], ys[start : start + steps]
    labels = np.stack([y["label"] for y in ys])
    sizes = np.stack([y["class_size"] for y in ys])
    return tf.data.Dataset.from_tensor_slices((np.stack(xs), {"label": labels, "class_size": sizes}))


def _model(kind="triplet", seed=5, jit=False, eager=True, backbone="small_cnn", trunk="mlp", diagnostics=False,
           learning_rates=(0.01, 0.05)):
    keras.utils.set_random_seed(0)
    if backbone == "small_cnn":
        net = models.small_cnn((8, 8, 1), width=4)
    else:
        net = models.mlp((8, 8, 1), width=16, depth=1)
    encoder = models.build_encoder(net, embedding_dim=6)
    model = dsn.DSNEmbeddingModel(
        encoder,
        sampler=kind,
        tuples_per_minibatch=M if kind == "triplet" else CLASSES,
        minibatches=K,
        seed=seed,
        sampler_options={"width": 8, "depth": 1, "input_size": 4, "trunk": trunk, "channels": 4},
        diagnostics=diagnostics,
    )
    loss = losses.TripletLoss(margin=0.5) if kind == "triplet" else losses.NPairLoss(l2_reg=0.01)
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rates[0]),
        loss=loss,
        dsn_optimizer=keras.optimizers.Adam(learning_rates[1]),
        jit_compile=jit,
        run_eagerly=eager and not jit,  # eager steps: no tracing cost in these short runs
    )
    return model


def _values(variables):
    return [v.numpy().copy() for v in variables]


def _assert_same(a, b):
    assert len(a) == len(b)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)


def _all_state(model):
    return (
        _values(model.variables)
        + _values(model.optimizer.variables)
        + _values(model.dsn_optimizer.variables)
    )


@pytest.fixture(scope="module")
def pools():
    return _pools()


@pytest.mark.parametrize("trunk", dsn.network.TRUNKS)
def test_fit_runs_algorithm_1_with_xla(pools, trunk):
    """One fit step = K DSN updates (lines 4–9) and one embedding update (line 10);
    both networks change; jit_compile=True (an MLP encoder keeps the XLA compile short);
    with either DSN trunk (§3.2's conv network on the images, or the MLP)."""
    model = _model(jit=True, backbone="mlp", trunk=trunk)
    history = model.fit(_dataset(*pools), epochs=1, steps_per_epoch=3, verbose=0)
    assert int(model.optimizer.iterations) == 3
    assert int(model.dsn_optimizer.iterations) == 3 * K
    for key in ("loss", "dsn_loss", "dsn_score"):
        assert np.isfinite(history.history[key]).all()
    # Triplet Eq. 2 with margin 0.5 on unit-normalised embeddings: the loss is positive.
    assert history.history["loss"][0] > 0
    fresh = _model(backbone="mlp", trunk=trunk)
    fresh.build((None, 8, 8, 1))
    changed = lambda a, b: any(not np.array_equal(u, v) for u, v in zip(a, b))  # noqa: E731
    assert changed(_values(model.sampler.trainable_variables), _values(fresh.sampler.trainable_variables))
    assert changed(_values(model.encoder.trainable_variables), _values(fresh.encoder.trainable_variables))


def test_npair_fit_and_pretraining(pools):
    """N-pair DSN (Fig. 2b) under fit; pre-training (Algorithm 1, line 2) changes
    only the DSN's trainable weights."""
    model = _model("npair")
    model.build((None, 8, 8, 1))
    encoder_before = _values(model.encoder.trainable_variables)
    sampler_before = _values(model.sampler.trainable_variables)
    scores = model.pretrain_sampler(_dataset(*pools).repeat(), steps=2)
    assert len(scores) == 2 and np.all(np.isfinite(scores))
    _assert_same(_values(model.encoder.trainable_variables), encoder_before)
    assert any(
        not np.array_equal(u, v) for u, v in zip(_values(model.sampler.trainable_variables), sampler_before)
    )
    assert int(model.dsn_optimizer.iterations) == 2 * K
    history = model.fit(_dataset(*pools), epochs=1, steps_per_epoch=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all() and history.history["loss"][0] > 0
    # evaluate(): the compiled N-pair loss on whole pools (no DSN terms).
    logs = model.evaluate(_dataset(*pools).take(1), verbose=0, return_dict=True)
    assert set(logs) == {"loss", "nonfinite_embeddings"} and np.isfinite(logs["loss"])
    assert logs["nonfinite_embeddings"] == 0


@pytest.fixture(scope="module")
def trained_two_steps(pools):
    """A triplet DSN model trained 2 steps on the first two pools (the tests that read it
    save or checkpoint it and compare it, and never train it further)."""
    xs, ys = pools
    model = _model()
    model.fit(_dataset(xs, ys, 0, 2), epochs=1, verbose=0)
    return model


def test_save_restore_and_reproducibility(pools, trained_two_steps, tmp_path):
    """The DSN, its optimizer and its random stream are saved with the model: a model
    trained 2 steps, saved (.keras and .weights.h5), restored and trained 2 more steps
    ends exactly where an uninterrupted 4-step run with the same seed ends."""
    xs, ys = pools
    first = trained_two_steps
    path = str(tmp_path / "dsn.keras")
    first.save(path)
    weights = str(tmp_path / "dsn.weights.h5")
    first.save_weights(weights)

    loaded = tfdml.load_model(path)
    assert isinstance(loaded, dsn.DSNEmbeddingModel) and loaded.sampler.kind == "triplet"
    _assert_same(_all_state(loaded), _all_state(first))

    restored = _model(seed=99)  # a different seed: its state must come from the file
    restored.build((None, 8, 8, 1))
    restored.load_weights(weights)
    _assert_same(_all_state(restored), _all_state(first))

    loaded.fit(_dataset(xs, ys, 2, 2), epochs=1, verbose=0)
    straight = _model()
    straight.fit(_dataset(xs, ys, 0, 4), epochs=1, verbose=0)
    after = _all_state(straight)
    _assert_same(_all_state(loaded), after)
    assert int(straight.dsn_optimizer.iterations) == 4 * K


def test_tf_train_checkpoint_restores_the_dsn_and_its_random_stream(trained_two_steps, tmp_path):
    """tf.train.Checkpoint (and its CheckpointManager) of a trained model saves the DSN, both
    optimizers and the DSN's random stream: a fresh model restores all of them exactly."""
    first = trained_two_steps
    assert first.sampler_seed.generator.state.numpy().any()
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=first), str(tmp_path), max_to_keep=1)
    manager.save()
    restored = _model(seed=99)  # a different seed: its state must come from the checkpoint
    restored.build((None, 8, 8, 1))
    tf.train.Checkpoint(model=restored).restore(manager.latest_checkpoint).assert_existing_objects_matched()
    _assert_same(_all_state(restored), _all_state(first))


def test_bad_configuration_raises():
    encoder = models.build_encoder(models.mlp((4,), width=4), embedding_dim=3)
    with pytest.raises(ValueError, match="TripletLoss"):
        dsn.DSNEmbeddingModel(encoder).compile(loss=losses.MarginLoss())
    with pytest.raises(ValueError, match="NPairLoss"):
        dsn.DSNEmbeddingModel(encoder, sampler="npair").compile(loss=losses.TripletLoss())
    with pytest.raises(ValueError, match="minibatches"):
        dsn.DSNEmbeddingModel(encoder, minibatches=0)
    with pytest.raises(ValueError, match="sampler_options"):
        dsn.DSNEmbeddingModel(encoder, sampler_options={"colour": 1})
    with pytest.raises(ValueError, match="baseline"):
        dsn.DSNEmbeddingModel(encoder, baseline="ema")


def test_sample_weight_is_refused_not_dropped(pools):
    """The DSN step unpacked and dropped a per-example sample_weight."""
    xs, ys = pools
    weights = np.ones((len(xs), len(ys[0]["label"])), np.float32)
    data = tf.data.Dataset.zip((_dataset(xs, ys), tf.data.Dataset.from_tensor_slices(weights)))
    data = data.map(lambda xy, w: (xy[0], xy[1], w))
    model = _model()
    with pytest.raises(ValueError, match="no per-example sample_weight.*importance"):
        model.fit(data, epochs=1, steps_per_epoch=1, verbose=0)


@pytest.mark.parametrize("kind", ["triplet", "npair"])
def test_diagnostics_leave_training_as_it_is(pools, kind):
    """diagnostics=True reports the policy against the uniform one and changes nothing of
    the training: the same weights, optimizer states and losses as without."""
    plain, diagnosed = _model(kind), _model(kind, diagnostics=True)
    runs = [m.fit(_dataset(*pools), epochs=1, steps_per_epoch=2, verbose=0).history for m in (plain, diagnosed)]
    _assert_same(_all_state(plain), _all_state(diagnosed))
    assert runs[0]["loss"] == runs[1]["loss"] and runs[0]["dsn_score"] == runs[1]["dsn_score"]
    assert not set(dsn.DIAGNOSTICS) & set(runs[0])
    assert all(np.isfinite(runs[1][name]).all() for name in dsn.DIAGNOSTICS)
    logs = diagnosed.evaluate(_dataset(*pools).take(1), verbose=0, return_dict=True)
    assert set(logs) == {"loss", "nonfinite_embeddings"}


def test_a_uniform_policy_s_diagnostics_are_the_uniform_chain_s(pools):
    """With every head's logits zeroed the policy is the uniform chain (Eq. 5 with equal
    logits): on a pool of 4 classes × 5 every triplet has p(p, c, n | a) = 1/4 · 1/3 · 1/5,
    so both entropies are log 60 exactly. With no learning (rates 0) the embeddings stay
    fixed, and the mean loss term of the picked and of the uniform triplets over many
    draws is the triplet term (Eq. 2, ℓ2², margin 0.5) averaged over the uniform chain,
    computed here by enumerating every (a, p, c, n) of the pool (NumPy)."""
    steps = 40
    # An MLP encoder: no batch statistics, so the inference-mode embeddings stay fixed too.
    # A compiled step (not eager): traced once, it is the cheaper way to take the many draws.
    model = _model(diagnostics=True, learning_rates=(0.0, 0.0), backbone="mlp", eager=False)
    model.build((None, 8, 8, 1))
    for logit in model.sampler.head_layers[1::2]:
        logit.set_weights([np.zeros_like(w) for w in logit.get_weights()])
    x, y = pools[0][0], pools[1][0]
    history = model.fit(_dataset([x] * steps, [y] * steps), epochs=1, verbose=0).history
    np.testing.assert_allclose(history["dsn_entropy"][0], np.log(60.0), rtol=1e-5)
    np.testing.assert_allclose(history["dsn_uniform_entropy"][0], np.log(60.0), rtol=1e-5)

    emb = model.encoder(x, training=False).numpy().astype(np.float64)
    d2 = ((emb[:, None, :] - emb[None, :, :]) ** 2).sum(-1)
    labels = y["label"]
    size = len(labels)
    # Every (a, p, n) with p a positive of a, n of another class: in a balanced pool each has
    # the uniform chain's probability 1/20 · 1/4 · 1/3 · 1/5.
    terms = np.array([max(0.0, d2[a, p] - d2[a, n] + 0.5)
                      for a in range(size) for p in range(size) for n in range(size)
                      if labels[p] == labels[a] and p != a and labels[n] != labels[a]])
    assert len(terms) == 20 * 4 * 15
    draws = steps * K * M
    for name in ("dsn_picked_loss", "dsn_uniform_loss"):
        assert abs(history[name][0] - terms.mean()) < 4 * terms.std() / np.sqrt(draws), (
            name, history[name][0], terms.mean())
