"""Global-batch mining under MirroredStrategy (2 logical CPUs) equals one device.

Same loss and same gradients as one device: margin + distance weighted sampling
and triplet + semi-hard with a small CNN (synchronised batch normalisation),
through ``model.fit`` and through the custom ``strategy.run`` loop used for
multi-worker training; every other loss family and the samplers that need the
whole batch (easy-hard, pair-margin, N-pair) with a dense encoder, one traced
step each.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdml import distributed, losses, models, optimizers, replica_gather

GLOBAL_BATCH = 16


def _loss(name):
    if name == "margin_dws":
        return losses.MarginLoss(num_classes=4, sampler="distance_weighted", seed=3)
    if name == "nt_xent_head":  # scores a projection head's output (see _model)
        return losses.NTXentLoss(temperature=0.5)
    return losses.TripletLoss(margin=0.2, squared=False, sampler="semi_hard")


def _data():
    rng = np.random.RandomState(0)
    x = rng.rand(GLOBAL_BATCH * 3, 8, 8, 1).astype("float32")
    labels = np.tile(np.repeat(np.arange(4), 4), 3).astype("int32")
    y = {"label": labels}
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).repeat()


def _model(strategy, loss_name):
    with strategy.scope():
        keras.utils.set_random_seed(1)
        encoder = models.build_encoder(models.small_cnn((8, 8, 1), width=4), embedding_dim=8)
        # The projection head runs on the gathered global batch: its batch normalisation sees
        # every replica's rows, and its gradients are those of one device too.
        head = [16, 6] if loss_name == "nt_xent_head" else None
        model = models.EmbeddingModel(encoder, projection_head=head)
        model.compile(optimizer=optimizers.SGD(0.05), loss=_loss(loss_name))
        model.build((None, 8, 8, 1))
    return model


def _weights(model):
    return [v.numpy() for v in model.trainable_variables]


@pytest.mark.parametrize("loss_name", ["margin_dws", "triplet_semi_hard"])
def test_fit_mirrored_equals_single_device(loss_name, mirrored_strategy):
    single = _model(tf.distribute.get_strategy(), loss_name)
    h1 = single.fit(_data(), steps_per_epoch=3, epochs=1, verbose=0).history["loss"]
    mirrored = _model(mirrored_strategy, loss_name)
    h2 = mirrored.fit(_data(), steps_per_epoch=3, epochs=1, verbose=0).history["loss"]
    np.testing.assert_allclose(h1, h2, atol=1e-5)
    for a, b in zip(_weights(single), _weights(mirrored)):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("loss_name", ["margin_dws", "triplet_semi_hard",
                                       pytest.param("nt_xent_head", marks=pytest.mark.slow)])
def test_first_step_gradients_equal(loss_name, mirrored_strategy):
    """The gradient of the global-batch loss, one device vs two replicas."""
    x, y = next(iter(_data()))

    def grads_of(model, strategy):
        def step(xs, ys):
            with tf.GradientTape() as tape:
                loss = model.compute_loss(x=xs, y=ys, y_pred=model(xs, training=True))
            grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, model.trainable_variables)]
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce("sum", loss), [ctx.all_reduce("sum", g) for g in grads]

        ds = distributed.distribute_global_batches(
            strategy, tf.data.Dataset.from_tensors((x, y)), GLOBAL_BATCH
        )
        xs, ys = next(iter(ds))
        loss, grads = strategy.run(tf.function(step), args=(xs, ys))
        first = lambda v: strategy.experimental_local_results(v)[0].numpy()  # noqa: E731
        return first(loss), [first(g) for g in grads]

    single = _model(tf.distribute.get_strategy(), loss_name)
    l1, g1 = grads_of(single, tf.distribute.get_strategy())
    mirrored = _model(mirrored_strategy, loss_name)
    l2, g2 = grads_of(mirrored, mirrored_strategy)
    np.testing.assert_allclose(l1, l2, atol=1e-5)
    assert any(np.abs(g).max() > 0 for g in g1)
    # A head's batch normalisation divides by the batch's standard deviation, which scales the
    # rounding of the gathered sums: its gradients (up to 0.7 here) agree to 1e-4 relative.
    # (Statistics per replica instead of the global batch's move the loss itself by 3e-3.)
    rtol = 3e-4 if loss_name == "nt_xent_head" else 1e-7  # assert_allclose's default
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=rtol)


def test_custom_loop_mirrored_equals_fit_single_device(mirrored_strategy):
    single = _model(tf.distribute.get_strategy(), "margin_dws")
    single.fit(_data(), steps_per_epoch=3, epochs=2, verbose=0)
    mirrored = _model(mirrored_strategy, "margin_dws")
    history = distributed.train_loop(
        mirrored, mirrored_strategy, _data(), GLOBAL_BATCH, epochs=2, steps_per_epoch=3, verbose=0
    )
    assert len(history) == 2 and all(np.isfinite(history))
    for a, b in zip(_weights(single), _weights(mirrored)):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_indivisible_global_batch_is_a_clear_error():
    with pytest.raises(ValueError, match="not divisible"):
        distributed.replica_slice(10, 4, 0)


def test_sum_gather_used_by_multi_worker_equals_single_device(mirrored_strategy, monkeypatch):
    """The all-reduce form of the gather (used under MultiWorkerMirroredStrategy)
    gives the single-device weights too, through the custom loop."""
    monkeypatch.setattr(replica_gather, "GATHER_METHOD", "sum")
    single = _model(tf.distribute.get_strategy(), "margin_dws")
    single.fit(_data(), steps_per_epoch=3, epochs=1, verbose=0)
    mirrored = _model(mirrored_strategy, "margin_dws")
    distributed.train_loop(mirrored, mirrored_strategy, _data(), GLOBAL_BATCH, epochs=1,
                           steps_per_epoch=3, verbose=0)
    for a, b in zip(_weights(single), _weights(mirrored)):
        np.testing.assert_allclose(a, b, atol=1e-5)


# --- every loss family on a global batch: a dense encoder, one traced step per loss -------------

# Rows r and r + 8 are the two views of instance r (example_id) and share its class (label): every
# instance has its views, and every class its rows, on both replicas (rows 0-7 and 8-15), so a
# loss computed on one replica's slice would differ from the global batch's.
_VIEWS = np.tile(np.arange(GLOBAL_BATCH // 2), 2).astype("int32")
_CLASSES = _VIEWS // 2  # 4 classes of 4 rows
_GLOBAL_BATCH_LOSSES = {  # name -> (loss, label column); the scales keep gradients O(1) for the tolerance
    "normalized_softmax": (lambda: losses.NormalizedSoftmaxLoss(4, 8, temperature=0.5, seed=2), _CLASSES),
    "cosface": (lambda: losses.CosFaceLoss(4, 8, scale=4.0, seed=2), _CLASSES),
    "arcface": (lambda: losses.ArcFaceLoss(4, 8, scale=4.0, seed=2), _CLASSES),
    "subcenter_arcface": (lambda: losses.SubCenterArcFaceLoss(4, 8, centers_per_class=2, scale=4.0, seed=2),
                          _CLASSES),
    "proxy_nca": (lambda: losses.ProxyNCALoss(4, 8, embedding_scale=1.0, proxy_scale=1.0, seed=2), _CLASSES),
    "nt_xent": (lambda: losses.NTXentLoss(temperature=0.5), _CLASSES),  # positives: example_id
    "supcon": (lambda: losses.SupConLoss(temperature=0.5), _CLASSES),
    "vicreg": (lambda: losses.VICRegLoss(lam=1.0, mu=1.0), _CLASSES),
    "barlow_twins": (lambda: losses.BarlowTwinsLoss(), _CLASSES),
    "histogram": (lambda: losses.HistogramLoss(num_bins=21), _CLASSES),
    "angular_npair": (lambda: losses.AngularLoss(combine_npair=True), _CLASSES),  # pairs by batch order
    "multi_similarity": (lambda: losses.MultiSimilarityLoss(lam=0.5), _CLASSES),  # mining across the batch
    "circle": (lambda: losses.CircleLoss(m=0.4, gamma=4.0), _CLASSES),
    "proxy_anchor": (lambda: losses.ProxyAnchorLoss(4, 8, alpha=1.0, seed=2), _CLASSES),
    "soft_triple": (lambda: losses.SoftTripleLoss(4, 8, centers_per_class=2, la=4.0, seed=2), _CLASSES),
    "fast_ap": (lambda: losses.FastAPLoss(), _CLASSES),  # each query's AP over the global batch
    # the hardest positive pair and its negatives, mined by the PDDM unit over the global batch
    "pddm": (lambda: losses.PDDMLoss(8, units=6, hidden_units=4, seed=2), _CLASSES),
    "facility_location": (lambda: losses.FacilityLocationLoss(refinement_steps=0), _CLASSES),  # greedy: a small graph
    "ddml_pair_margin": (lambda: losses.DDMLLoss(sampler="pair_margin"), _CLASSES),
    "triplet_easy_hard": (lambda: losses.TripletLoss(sampler="easy_hard"), _CLASSES),
    "triplet_npair": (lambda: losses.TripletLoss(sampler="npair"), _VIEWS),  # two rows per class
    "daml_hard": (lambda: losses.DAMLLoss(8, sampler="hard", seed=2), _CLASSES),  # and its generator's gradients
}


def _dense_model(strategy, loss):
    with strategy.scope():
        keras.utils.set_random_seed(1)
        backbone = keras.Sequential([keras.Input((6,)), keras.layers.Dense(6, activation="tanh")])
        model = models.EmbeddingModel(models.build_encoder(backbone, embedding_dim=8))
        model.compile(optimizer=optimizers.SGD(0.05), loss=loss, jit_compile=False)
        model.build((None, 6))
    return model


@pytest.mark.parametrize("loss_name", list(_GLOBAL_BATCH_LOSSES))
def test_global_batch_loss_and_gradients_equal_one_device(loss_name, mirrored_strategy):
    """The loss and the gradient of every trainable variable (the encoder's and the loss's
    own: proxies, class weights, centres) under MirroredStrategy over two replicas equal those
    of one device on the same global batch: the model gathers every column and embedding
    before the loss."""
    make_loss, labels = _GLOBAL_BATCH_LOSSES[loss_name]
    x = np.random.RandomState(0).normal(size=(GLOBAL_BATCH, 6)).astype("float32")
    y = {"label": labels, "example_id": _VIEWS}

    def step(model, xs, ys):
        with tf.GradientTape() as tape:
            loss = model.compute_loss(x=xs, y=ys, y_pred=model(xs, training=True))
        return loss, [tf.convert_to_tensor(g) for g in tape.gradient(loss, model.trainable_variables)]

    single = _dense_model(tf.distribute.get_strategy(), make_loss())
    l1, g1 = step(single, tf.constant(x), {k: tf.constant(v) for k, v in y.items()})  # eagerly: no trace

    mirrored = _dense_model(mirrored_strategy, make_loss())

    def replica_step(xs, ys):
        loss, grads = step(mirrored, xs, ys)
        ctx = tf.distribute.get_replica_context()
        return ctx.all_reduce("sum", loss), [ctx.all_reduce("sum", g) for g in grads]

    ds = distributed.distribute_global_batches(
        mirrored_strategy, tf.data.Dataset.from_tensors((x, y)), GLOBAL_BATCH)
    l2, g2 = mirrored_strategy.run(tf.function(replica_step), args=next(iter(ds)))
    first = lambda v: mirrored_strategy.experimental_local_results(v)[0].numpy()  # noqa: E731
    np.testing.assert_allclose(l1.numpy(), first(l2), rtol=1e-5, atol=1e-6)
    assert any(np.abs(g.numpy()).max() > 0 for g in g1)
    assert len(g1) == len(g2) == len(single.trainable_variables)
    for v, a, b in zip(single.trainable_variables, g1, g2):
        np.testing.assert_allclose(a.numpy(), first(b), rtol=1e-4, atol=1e-5, err_msg=v.path)
