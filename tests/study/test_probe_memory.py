"""study/probe_memory.py: the pair composition against hand-computed cases, and the
fault checks (a wrong label is counted, a fresh row has no drift) on a real memory."""

import importlib.util
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("probe_memory", os.path.join(ROOT, "study", "probe_memory.py"))
pm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pm)

E1, E2 = np.eye(2)
DIAGONAL = (E1 + E2) / np.sqrt(2)


def test_tangent_norms_keep_only_what_moves_the_anchor_on_the_sphere():
    anchors = np.array([E1])
    candidates = np.array([E1, E2, DIAGONAL])
    # Σ of E2 and the diagonal = (1/√2, 1 + 1/√2); the anchor's own direction is radial.
    np.testing.assert_allclose(pm.tangent_norms(anchors, candidates, np.array([[0, 1, 1]])), [1 + 1 / np.sqrt(2)])
    np.testing.assert_allclose(pm.tangent_norms(anchors, candidates, np.array([[1, 0, 0]])), [0.0], atol=1e-12)


def test_composition_by_hand():
    anchors, labels, ids = np.array([E1, E2]), np.array([0, 1]), np.array([0, 1])
    # Row 0: anchor 0's class (a positive of anchor 0, S = 1, term 0); row 1: another class at
    # S = 1/√2 from both anchors (active at margin 0.5: term 1/√2 − 0.5 each); row 2: anchor 0's
    # own example (never its positive) and at S = 0 from anchor 1 (an inactive negative).
    memory, memory_labels, memory_ids = np.array([E1, DIAGONAL, E1]), np.array([0, 2, 0]), np.array([5, 6, 0])
    rows = pm.composition(anchors, labels, ids, memory, memory_labels, memory_ids, margin=0.5)
    m, b = rows["memory"], rows["batch"]
    assert m["positives"] == 0.5  # the median of anchors' 1 and 0
    assert m["active_negatives"] == 1.0
    assert m["positive_terms"] == 0.0
    np.testing.assert_allclose(m["negative_terms"], 2 * (1 / np.sqrt(2) - 0.5))
    # Anchor 1's push: the diagonal row's tangent part at E2 is (1/√2, 0).
    np.testing.assert_allclose(m["push"], 1 / np.sqrt(2))
    # Within the batch: E1 and E2 are different classes at S = 0 (inactive), nothing else.
    assert (b["positives"], b["active_negatives"], b["negative_terms"]) == (0.0, 0.0, 0.0)


class _Split:
    labels = np.array([3, 1, 4, 1, 5, 9], np.int32)

    @staticmethod
    def load(ids):
        rng = np.random.default_rng(0)
        images = rng.normal(size=(6, 5)).astype(np.float32)
        return images[np.asarray(ids)]


def test_probe_counts_a_wrong_label_and_a_fresh_row_has_no_drift():
    import keras

    from tfdml.memory import CrossBatchMemory

    keras.utils.set_random_seed(0)
    encoder = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3), keras.layers.UnitNormalization()])
    memory = CrossBatchMemory(size=6, embedding_dim=3)
    ids = np.array([4, 0, 2, 5])
    memory.embeddings.assign(np.concatenate([encoder.predict(_Split.load(ids), verbose=0), np.zeros((2, 3))]))
    labels = _Split.labels[ids].astype(np.int64)
    labels[1] = 7  # one row with a label its example does not have
    memory.labels.assign(np.concatenate([labels, [0, 0]]))
    memory.example_ids.assign(np.concatenate([ids, [0, 0]]))
    memory.filled.assign(4)
    memory.position.assign(4)
    record = pm.probe(encoder, memory, 4, _Split, margin=0.5, batch_size=2)
    assert record["label_mismatches"] == 1
    np.testing.assert_allclose([record["drift_cosine_median"], record["drift_cosine_min"]], [1.0, 1.0], atol=1e-5)
    assert set(record["pairs"]) == {"batch", "memory"}


def test_an_arm_with_and_without_a_memory_is_probed_end_to_end(kanji_dir, tmp_path, monkeypatch, capsys):
    import json

    monkeypatch.setitem(pm.reproduce.BUDGETS, "quick", dict(pm.reproduce.BUDGETS["quick"], train_classes=None,
                                                             test_classes=3))
    for arm in ("xbm-contrastive-mem0", "xbm-contrastive-mem256"):
        assert pm.main(["--arm", arm, "--budget", "quick", "--every", "4", "--data", kanji_dir,
                        "--out", str(tmp_path), "--set", "optimizer.learning_rate=1e-4"]) == 0
    without, with_memory = (json.loads((tmp_path / "probes" / f"memory-{arm}-seed0-{tail}.json").read_text())
                            for arm, tail in (("xbm-contrastive-mem0", "warmup0-optimizer.learning_rate1e-4"),
                                              ("xbm-contrastive-mem256",
                                               "warmup0.25-optimizer.learning_rate1e-4")))
    assert without["warmup_steps"] is None and not any("filled" in r for r in without["records"])
    assert with_memory["warmup_steps"] == 10
    probed = [r for r in with_memory["records"] if "filled" in r]
    assert probed and all(r["label_mismatches"] == 0 for r in probed)
    assert {"batch", "memory"} == set(probed[-1]["pairs"])
    assert "| step | loss |" in capsys.readouterr().out


def test_embed_as_trained_uses_each_chunk_s_statistics_and_leaves_the_moving_ones():
    import keras

    keras.utils.set_random_seed(0)
    encoder = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3), keras.layers.BatchNormalization(),
                                keras.layers.UnitNormalization()])
    images = np.random.default_rng(1).normal(size=(6, 5)).astype(np.float32)
    before = [v.numpy().copy() for v in encoder.non_trainable_variables]
    got = pm.embed_as_trained(encoder, images, batch_size=3)
    for variable, value in zip(encoder.non_trainable_variables, before):
        np.testing.assert_array_equal(variable.numpy(), value)
    # Each chunk of 3 normalised by its own mean and variance (BatchNormalization's ε), then unit rows.
    dense = images @ encoder.layers[0].kernel.numpy() + encoder.layers[0].bias.numpy()
    chunks = [(c - c.mean(0)) / np.sqrt(c.var(0) + encoder.layers[1].epsilon) for c in (dense[:3], dense[3:])]
    want = np.concatenate(chunks)
    np.testing.assert_allclose(got, want / np.linalg.norm(want, axis=1, keepdims=True), atol=1e-5)
