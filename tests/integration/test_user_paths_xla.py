"""``model.fit(..., jit_compile=True)`` on the paths a user takes.

Two ways a batch reaches the loss:

* a batch design (``MPerClassDesign(...).batches`` and the README's
  ``GroupDesign`` snippet), whose batches have static shapes (docs/design.md: a
  design knows its batch size);
* a user's own pipeline, ``Dataset.from_tensor_slices((x, y)).batch(B)``
  without ``drop_remainder``: the batch dimension is unknown when Keras traces
  the step (``element_spec`` ``(None, ...)``) and the last batch of the epoch is
  smaller. Shapes that a loss or a sampler builds from ``tf.shape``, in the
  forward pass or in its gradient, must still compile under XLA (the gradient
  of ``tf.linalg.set_diag`` in the euclidean distance did not).

Every registered loss (``tfdml.losses.LOSSES``) runs with one sampler of each
kind it accepts (``sampler_kinds``), the samplers rotated so that every
registered sampler is used at least once; a tiny MLP, 2–3 steps, on a user's
pipeline. The same matrix on designs' batches is ``slow`` (TFDML_SLOW=1):
their shapes are static, and by default the README's snippet (group design,
``jit_compile=True`` and ``"auto"``), a reported snippet (m-per-class) with
user-built CNNs and the DSN model cover designs under XLA.
"""

import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdml
from pipelines import designs, sources
from tfdml import losses, samplers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHAPE = (4, 4, 1)
NUM_CLASSES = 6  # training classes of the small split
EMBEDDING = 8
USER_EXAMPLES, USER_BATCH = 24, 16  # a user's pipeline: a batch of 16, then a partial one of 8

# One sampler per accepted kind, chosen per loss so that every sampler appears somewhere.
SAMPLER_FOR = {
    ("contrastive", "pairs"): "random",
    ("contrastive", "triplets"): "semi_hard",
    ("margin", "pairs"): "all",
    ("margin", "triplets"): "distance_weighted",
    ("triplet", "triplets"): "hard",
    ("stable_contrast", "triplets"): "semi_hard",
    ("histogram", "pairs"): "all",
    ("global", "pairs"): "random",
    ("lifted_structured", "pairs"): "all",
    ("lifted_structured", "triplets"): "random_triplets",
    ("binomial_deviance", "pairs"): "random",
    ("binomial_deviance", "triplets"): "hard",
    ("multi_similarity", "pairs"): "multi_similarity",
    ("multi_similarity", "triplets"): "semi_hard",
    ("circle", "pairs"): "hdc",
    ("circle", "triplets"): "hard",
    ("ddml", "pairs"): "pair_margin",
    ("ddml", "triplets"): "easy_hard",
    ("daml", "triplets"): "random_triplets",
}
# Constructor arguments a loss needs beyond its defaults.
REQUIRED = {
    "balanced_contrastive": {"lam": 4.0, "num_classes": NUM_CLASSES},
    "margin": {"num_classes": NUM_CLASSES},
    "proxy_nca": {"num_classes": NUM_CLASSES, "embedding_dim": EMBEDDING},
    "proxy_anchor": {"num_classes": NUM_CLASSES, "embedding_dim": EMBEDDING},
    "normalized_softmax": {"num_classes": NUM_CLASSES, "embedding_dim": EMBEDDING},
    "cosface": {"num_classes": NUM_CLASSES, "embedding_dim": EMBEDDING},
    "arcface": {"num_classes": NUM_CLASSES, "embedding_dim": EMBEDDING},
    "sub_center_arcface": {"num_classes": NUM_CLASSES, "embedding_dim": EMBEDDING},
    "soft_triple": {"num_classes": NUM_CLASSES, "embedding_dim": EMBEDDING},
    "daml": {"embedding_dim": EMBEDDING},
    "pddm": {"embedding_dim": EMBEDDING},
    "hdc": {"levels": 2},  # the MLP's embedding as two level blocks of 4
}


def _cases():
    cases = []
    for name, cls in sorted(losses.LOSSES.items()):
        kinds = [k for k in cls.sampler_kinds if k != "sets"]  # "sets": built into PrecisionAtKLoss
        if not kinds:
            cases.append((name, None))
        for kind in kinds:
            cases.append((name, SAMPLER_FOR[(name, kind)]))
    return cases


CASES = _cases()


def make_loss(name, sampler):
    kwargs = dict(REQUIRED.get(name, {}))
    if sampler is not None:
        kwargs["sampler"] = sampler
        kwargs["seed"] = 0
    return losses.get(name, **kwargs)


def mlp_model():
    keras.utils.set_random_seed(0)
    encoder = keras.Sequential(
        [
            keras.Input(SHAPE),
            keras.layers.Flatten(),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(EMBEDDING),
            keras.layers.UnitNormalization(),
        ]
    )
    return tfdml.models.EmbeddingModel(encoder)


def user_cnn(input_shape, stages=4, widths=(4, 8, 8, 16), embedding=16):
    """A user's own functional CNN: Conv-BN-ReLU-pool stages, Dense, UnitNormalization."""
    inputs = keras.Input(input_shape)
    x = inputs
    for filters in widths[:stages]:
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(embedding)(x)
    x = keras.layers.UnitNormalization()(x)
    return keras.Model(inputs, x)


def fit(model, dataset, loss, steps, jit_compile=True, optimizer="sgd"):
    model.compile(optimizer=optimizer, loss=loss, jit_compile=jit_compile)
    before = [w.numpy().copy() for w in model.trainable_weights] if model.built else None
    history = model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)
    assert int(model.optimizer.iterations) == steps
    assert np.all(np.isfinite(history.history["loss"]))
    if before is not None:
        assert any(not np.array_equal(b, w.numpy()) for b, w in zip(before, model.trainable_weights))
    return history


def small_split():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(2 * NUM_CLASSES), 8).astype(np.int32)
    features = rng.random((len(labels),) + SHAPE).astype(np.float32)
    source = sources.arrays(
        features,
        labels,
        train_classes=list(range(NUM_CLASSES)),
        test_classes=list(range(NUM_CLASSES, 2 * NUM_CLASSES)),
    )
    return source.split("train")


@pytest.fixture(scope="module")
def split():
    return small_split()


def user_pipeline(split, name):
    """A user's own pipeline: unknown batch dimension, a partial last batch."""
    idx = np.random.default_rng(1).choice(split.num_examples, USER_EXAMPLES, replace=False)
    x = split.load(idx).numpy()
    y = split.labels[idx].astype(np.int32)
    if name == "balanced_contrastive":  # η needs the training-split class sizes
        y = {"label": y, "class_size": np.array([split.class_sizes[int(c)] for c in y], np.float32)}
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(USER_BATCH)


def test_cases_cover_every_loss_and_sampler():
    assert {name for name, _ in CASES} == set(losses.LOSSES)
    # top_k: inside PrecisionAtKLoss; npair: needs two examples per class, which a user's batch
    # of 16 random examples is not (tested with its design in tests/tfdml/samplers/test_npair_sampler.py)
    used = {s for _, s in CASES if s is not None} | {"top_k", "npair"}
    assert used == set(samplers.SAMPLERS)
    for name, sampler in CASES:
        loss = make_loss(name, sampler)
        assert sampler is None or loss.sampler == samplers.get(sampler)


# jit_compile="loss" (the loss and its sampler compiled, with their gradient, inside an
# uncompiled step): every case with TFDML_SLOW=1, by default the ones whose compiled part
# holds a tf.cond / while loop or learned state (margin's β, semi-hard's sort path).
LOSS_ONLY_BY_DEFAULT = {("margin", "distance_weighted"), ("contrastive", "semi_hard"), ("balanced_contrastive", None)}
USER_PIPELINE_CASES = [(name, sampler, True) for name, sampler in CASES] + [
    pytest.param(name, sampler, "loss", marks=() if (name, sampler) in LOSS_ONLY_BY_DEFAULT else pytest.mark.slow)
    for name, sampler in CASES]


@pytest.mark.parametrize("name,sampler,jit_compile", USER_PIPELINE_CASES)
def test_jit_fit_on_user_pipeline_with_unknown_batch_size(split, name, sampler, jit_compile):
    ds = user_pipeline(split, name)
    assert tf.nest.flatten(ds.element_spec)[0].shape[0] is None  # what Keras traces with
    model = mlp_model()
    model.build((None,) + SHAPE)
    fit(model, ds, make_loss(name, sampler), steps=2, jit_compile=jit_compile)  # a batch of 16, then 8


# Hong et al.'s losses on their own designs (p-random pairs, (m, n)-groups); m-per-class otherwise.
DESIGN_FOR = {
    "balanced_contrastive": lambda: designs.PRandomDesign(0.5, pairs=6),
    "weighted_contrastive": lambda: designs.GroupDesign(m=4, n=3),
}


@pytest.mark.slow
@pytest.mark.parametrize("name,sampler", CASES)
def test_jit_fit_on_design_batches(split, name, sampler):
    design = DESIGN_FOR.get(name, lambda: designs.MPerClassDesign(m=4, classes_per_batch=3))()
    ds = design.batches(split, seed=0)
    assert all(s.shape.is_fully_defined() for s in tf.nest.flatten(ds.element_spec))
    model = mlp_model()
    model.build((None,) + SHAPE)
    fit(model, ds, make_loss(name, sampler), steps=3)


def _readme_design_snippet():
    guide = open(os.path.join(ROOT, "docs", "guide.md"), encoding="utf-8").read()
    section = guide.split("\n## Batch designs and importance weights\n")[1].split("\n### ")[0]
    blocks = [b for b in re.findall(r"```python\n(.*?)```", section, flags=re.S) if "designs." in b]
    assert len(blocks) == 1, "docs/guide.md: expected one python block with the batch designs snippet"
    return blocks[0]


@pytest.mark.parametrize("jit_compile", [True, "auto"])
def test_readme_batch_designs_snippet(jit_compile):
    """The user guide's "Batch designs" snippet, with a user-built functional CNN as its
    encoder and ``jit_compile`` set in its own compile call (tests/test_doc_examples.py runs
    it as printed)."""
    snippet = _readme_design_snippet()
    replaced = {
        "model = tfdml.models.EmbeddingModel(encoder)":
            "model = tfdml.models.EmbeddingModel(user_cnn((28, 28, 1), stages=2))\n"
            "model.build((None, 28, 28, 1))\n"
            "before = [w.numpy().copy() for w in model.trainable_weights]",
        "model.compile(": "model.compile(jit_compile=jit_compile, ",
        "steps_per_epoch=100": "steps_per_epoch=3",
    }
    for old, new in replaced.items():
        assert snippet.count(old) == 1, f"docs/guide.md's batch designs snippet no longer holds {old!r}"
        snippet = snippet.replace(old, new)
    namespace = {"__name__": "readme_batch_designs", "user_cnn": user_cnn, "jit_compile": jit_compile}
    exec(compile(snippet, "docs/guide.md", "exec"), namespace)
    model = namespace["model"]
    x_spec, y_spec = namespace["batches"].element_spec
    assert x_spec.shape == (20, 28, 28, 1)  # the snippet's comment
    assert set(y_spec) == {"label", "class_size", "w_pos", "w_neg", "example_id",
                           "w_triplet", "w_memory"}
    assert int(model.optimizer.iterations) == 3
    assert any(not np.array_equal(b, w.numpy()) for b, w in zip(namespace["before"], model.trainable_weights))


def test_user_cnn_on_m_per_class_design_under_xla():
    """A user's report, as written: a functional CNN (Conv-BN-ReLU-pool ×4, Dense,
    UnitNormalization) on 32×32×1 images from MPerClassDesign(m=4, batch_size=128),
    ContrastiveLoss(squared=False), jit_compile=True (failed at the gradient of the
    distance's diagonal)."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(48), 6)
    x = rng.random((len(y), 32, 32, 1)).astype(np.float32)
    source = sources.arrays(x, y, train_classes=list(range(40)), test_classes=list(range(40, 48)))
    ds = designs.MPerClassDesign(m=4, batch_size=128).batches(source.split("train"), seed=0)
    assert ds.element_spec[0].shape == (128, 32, 32, 1)
    assert all(s.shape == (128,) for s in ds.element_spec[1].values())
    model = tfdml.models.EmbeddingModel(user_cnn((32, 32, 1)))
    fit(model, ds, losses.ContrastiveLoss(squared=False), steps=2, optimizer="adam")


def test_dsn_model_with_jit_on_design_batches(split):
    """The learned sampler (DSNEmbeddingModel, Duan et al. Algorithm 1) under
    jit_compile=True, fed by a design's batches (the pools)."""
    from tfdml import dsn

    keras.utils.set_random_seed(0)
    encoder = tfdml.models.build_encoder(tfdml.models.mlp(SHAPE, width=8, depth=1), embedding_dim=EMBEDDING)
    model = dsn.DSNEmbeddingModel(
        encoder, sampler="triplet", tuples_per_minibatch=4, minibatches=1, seed=0,
        sampler_options={"width": 8, "depth": 1, "input_size": 4},
    )
    model.compile(optimizer="sgd", loss=losses.TripletLoss(margin=0.5), dsn_optimizer="sgd", jit_compile=True)
    pools = designs.MPerClassDesign(m=4, classes_per_batch=3).batches(split, seed=0)
    history = model.fit(pools, epochs=1, steps_per_epoch=2, verbose=0)
    assert int(model.dsn_optimizer.iterations) == 2
    for key in ("loss", "dsn_loss", "dsn_score"):
        assert np.all(np.isfinite(history.history[key]))
