"""A weighted sum of losses from a config (loss.name: weighted_sum with loss.terms): each
term is checked as a single loss section is, before TensorFlow is imported with the
messages of the library's validation; the built loss is tfdml.losses.WeightedSumLoss of the
terms; a run resumed from its backup restores every term's learned state (the proxies).
The shipped configs/proxy_anchor_multi_similarity.yaml trains one step in
tests/test_configs.py."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from tfdml_app import build, config, data, fit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROXY_ANCHOR = {"name": "proxy_anchor", "options": {"alpha": 32.0, "delta": 0.1, "proxy_lr_multiplier": 10.0}}
MULTI_SIMILARITY = {"name": "multi_similarity", "weight": 0.5, "sampler": "multi_similarity",
                    "sampler_options": {"epsilon": 0.1}}


def _sum(*terms, **loss):
    return {"loss": {"name": "weighted_sum", "terms": list(terms), **loss}}


#: (config, the start of the message that refuses it).
BAD = [
    (_sum(), "loss.name = 'weighted_sum' sums the losses of loss.terms, which is empty"),
    ({"loss": {"name": "margin", "terms": [PROXY_ANCHOR]}}, "loss.terms is given, but loss.name = 'margin'"),
    (_sum({"weight": 1.0}), "loss.terms[0] = {'weight': 1.0}: a term is a loss section with a name"),
    (_sum(PROXY_ANCHOR, {"name": "weighted_sum"}), "loss.terms[1].name = 'weighted_sum' is not valid"),
    (_sum({**MULTI_SIMILARITY, "weight": -1}), "loss.terms[0].weight = -1.0 must be a finite number >= 0"),
    (_sum({**MULTI_SIMILARITY, "memory": {"size": 8}}), "Unknown config key 'loss.terms[0].memory'"),
    (_sum(PROXY_ANCHOR, {"name": "proxy_anchor"}),
     "loss.terms[0] and loss.terms[1] are both named 'proxy_anchor'"),
    (_sum(PROXY_ANCHOR, {**MULTI_SIMILARITY, "options": {"lamb": 0.5}}),
     "loss.terms[1].options has 'lamb', which is not an option of multi_similarity (did you mean 'lam'?)"),
    (_sum(PROXY_ANCHOR, {**MULTI_SIMILARITY, "sampler": "top_k"}),
     "loss.terms[1].sampler = 'top_k' does not fit loss.terms[1].name = 'multi_similarity': it selects sets"),
    (_sum(PROXY_ANCHOR, {**MULTI_SIMILARITY, "sampler_options": {"epsilom": 0.1}}),
     "loss.terms[1].sampler_options has 'epsilom', which is not an option of multi_similarity"),
    (_sum({"name": "contrastive", "sampler_options": {"num_pairs": 4}}),
     "loss.terms[0].sampler_options {'num_pairs': 4} are given, but loss.terms[0].sampler is empty"),
    (_sum({"name": "proxy_anchor", "options": {"num_classes": 4}}), "loss.terms[0].options has 'num_classes'"),
    (_sum(PROXY_ANCHOR, sampler="all"), "loss.sampler = 'all' with loss.name = 'weighted_sum': each term has its own"),
    (_sum(PROXY_ANCHOR, memory={"size": 8}), "loss.memory = {'size': 8} with loss.name = 'weighted_sum'"),
    ({**_sum({"name": "triplet"}), "learned_sampler": {}}, "learned_sampler with loss.name = 'weighted_sum'"),
]

#: check_structure(names=True) on each of BAD in a fresh interpreter: its messages, then
#: whether TensorFlow was imported.
_SCRIPT = """
import json, sys, warnings
from tfdml_app import config
out = []
for raw in json.loads(sys.argv[1]):
    try:
        config.check_structure(raw, names=True)
        out.append(None)
    except config.ConfigError as err:
        out.append(str(err))
print(json.dumps([out, "tensorflow" in sys.modules]))
"""


@pytest.fixture(scope="module")
def before_tensorflow():
    """The messages check_structure gives for BAD before TensorFlow is imported."""
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps([raw for raw, _ in BAD])], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    messages, imported = json.loads(proc.stdout.splitlines()[-1])
    assert not imported
    return messages


@pytest.mark.parametrize("index", range(len(BAD)), ids=[message[:40] for _, message in BAD])
def test_a_bad_term_is_refused_before_tensorflow_as_the_library_refuses_it(before_tensorflow, index):
    raw, message = BAD[index]
    assert before_tensorflow[index] is not None and before_tensorflow[index].startswith(message), (
        before_tensorflow[index])
    with pytest.raises(config.ConfigError) as err:
        config.validate(raw)
    assert str(err.value) == before_tensorflow[index]


def test_a_term_the_design_cannot_feed_is_named():
    """What the built term asks of the design is checked as a single loss's, naming the term."""
    with pytest.raises(config.ConfigError, match=r"design.name = 'p_random' gives isolated pairs, but "
                                                 r"loss.terms\[1\].name = 'triplet' needs tuples"):
        config.validate({**_sum(PROXY_ANCHOR, {"name": "triplet"}), "design": {"name": "p_random"}})


def test_the_terms_are_built_as_single_losses_with_their_weights():
    cfg = config.validate(_sum(PROXY_ANCHOR, MULTI_SIMILARITY))
    assert [t["weight"] for t in cfg["loss"]["terms"]] == [1.0, 0.5]
    assert cfg["loss"]["terms"][0]["sampler"] is None and cfg["loss"]["terms"][1]["options"] == {}
    loss = build.build_loss(cfg, num_classes=5, num_examples=100)
    alone = [build.build_loss(config.validate({"loss": {k: v for k, v in t.items() if k != "weight"}}), 5, 100)
             for t in (PROXY_ANCHOR, MULTI_SIMILARITY)]
    assert loss.weights == [1.0, 0.5]
    for term, single in zip(loss.terms, alone):
        a, b = (keras.saving.serialize_keras_object(x) for x in (term, single))
        for x in (a, b):
            del x["config"]["name"]  # Keras numbers the names of unnamed losses
        assert a == b


class _KeepTheProxiesAndStop(keras.callbacks.Callback):
    """After the first epoch (its backup written): keep the proxies, then stop as a kill does."""

    def on_epoch_end(self, epoch, logs=None):
        self.proxies = self.model.loss.terms[0].proxy_layer.proxies.numpy().copy()
        raise KeyboardInterrupt("simulated kill")


def test_a_resumed_run_restores_the_proxies_of_its_term(tmp_path):
    cfg = config.validate({
        "seed": 3, "output_dir": str(tmp_path), "data": {"source": "digits"},
        "design": {"name": "m_per_class", "options": {"m": 4, "n": 5}},
        "model": {"backbone": "mlp", "backbone_options": {"width": 8}, "embedding_dim": 8},
        **_sum(PROXY_ANCHOR, MULTI_SIMILARITY),
        "training": {"epochs": 2, "steps_per_epoch": 2},
        "evaluation": {"metrics": ["recall"], "ks": [1], "plots": False}, "export": {"saved_model": False},
    })
    kill = _KeepTheProxiesAndStop()
    with pytest.raises(KeyboardInterrupt):
        fit.run(cfg, verbose=0, callbacks=[kill])
    assert fit.completed_epochs(os.path.join(str(tmp_path), "backup")) == 1
    split = data.build_source(cfg).split("train")
    model = build.build_model(cfg, data.input_shape_for(cfg, split.image_shape), int(split.num_classes),
                              int(split.num_examples))
    fresh = model.loss.terms[0].proxy_layer.proxies.numpy().copy()
    assert not np.allclose(fresh, kill.proxies)  # trained at 10x the learning rate
    from tfdml import runs

    state, _ = runs.Backup(os.path.join(str(tmp_path), "backup")).restore(model)
    assert int(state["epoch"]) == 1
    np.testing.assert_array_equal(model.loss.terms[0].proxy_layer.proxies.numpy(), kill.proxies)
    assert fit.run(cfg, verbose=0)["resumed_from_epoch"] == 1
