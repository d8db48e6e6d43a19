"""loss.memory in configs: validated with every loss and sampler before any work; refused
combinations say why."""

import pytest

from tfdml import losses
from tfdml_app import config, loss_config

MEMORY = {"size": 64, "warmup_steps": 2}


def _combinations():
    for name, cls in sorted(losses.LOSSES.items()):
        for sampler in loss_config.valid_samplers(name):
            yield name, sampler


@pytest.mark.parametrize("name, sampler", list(_combinations()))
def test_memory_is_validated_with_every_loss_and_sampler(name, sampler):
    cls = losses.LOSSES[name]
    options = {"importance": False} if "importance" in loss_config._init_parameters(cls) else {}
    cfg = {"loss": {"name": name, "sampler": sampler, "memory": MEMORY, "options": options}}
    if loss_config.scores_cascade_levels(loss_config._init_parameters(cls)):
        cfg["model"] = {"cascade": {"levels": 2}}  # the encoder whose levels it scores (hdc)
    if cls.memory_refusal is not None:
        with pytest.raises(config.ConfigError, match="cannot use a cross-batch memory: "):
            config.validate(cfg)
    else:
        try:
            resolved = config.validate(cfg)
        except config.ConfigError as err:  # a refusal that is not the memory's
            assert "memory" not in str(err), str(err)
            with pytest.raises(config.ConfigError):
                config.validate({**cfg, "loss": {k: v for k, v in cfg["loss"].items() if k != "memory"}})
            return
        assert resolved["loss"]["memory"] == MEMORY
        loss = loss_config.build_loss(resolved, 3)
        assert (loss.memory.size, loss.memory.warmup_steps) == (64, 2)
        assert loss.memory.embedding_dim == resolved["model"]["embedding_dim"]


def test_memory_is_refused_with_the_learned_sampler():
    with pytest.raises(config.ConfigError, match="learned_sampler .* not from an anchors x candidates"):
        config.validate({"loss": {"name": "triplet", "memory": MEMORY}, "learned_sampler": {}})


@pytest.mark.parametrize("loss, match", [
    ({"name": "contrastive", "options": {"importance": True}},
     "importance weights and design.name = 'm_per_class': .* Use design 'group'"),
    ({"name": "weighted_contrastive"}, "importance weights and design.name = 'm_per_class'"),
    ({"name": "triplet", "options": {"importance": True}}, "triplet weights of memory tuples are not derived"),
    ({"name": "contrastive", "sampler": "random", "options": {"importance": True}}, "remove the sampler"),
    ({"name": "contrastive", "memory": {"warmup_steps": 3}}, "give its size"),
    ({"name": "contrastive", "memory": {"size": 0}}, "size must be an integer >= 1"),
    ({"name": "contrastive", "memory": {"size": 8, "depth": 2}}, r"unknown option\(s\) \['depth'\]"),
    ({"name": "contrastive", "memory": {"size": 8, "embedding_dim": 2}}, "model.embedding_dim"),
    ({"name": "npair"}, "cannot use a cross-batch memory: "),
    ({"name": "contrastive", "memory": None, "options": {"memory": {"size": 8}}}, "set the cross-batch memory in loss.memory"),
])
def test_bad_memory_configs_are_refused_with_the_reason(loss, match):
    section = {"memory": {"size": 8}, **loss}
    with pytest.raises(config.ConfigError, match=match):
        config.validate({"loss": section})


@pytest.mark.parametrize("name", ["contrastive", "weighted_contrastive"])
def test_memory_with_importance_weights_is_accepted_with_the_group_design(name):
    resolved = config.validate({"design": {"name": "group", "options": {"m": 2, "n": 4}},
                                "loss": {"name": name, "sampler": "by_loss", "memory": {"size": 8},
                                         "options": {"importance": True}}})
    loss = loss_config.build_loss(resolved, 3)
    assert loss.importance and loss.memory.size == 8


def test_memory_with_importance_weights_must_hold_whole_batches():
    with pytest.raises(config.ConfigError, match="multiple of the batch size 8; use size 8"):
        config.validate({"design": {"name": "group", "options": {"m": 2, "n": 4}},
                         "loss": {"name": "contrastive", "sampler": "by_loss", "memory": {"size": 12},
                                  "options": {"importance": True}}})


def test_memory_with_isolated_pairs_is_refused():
    with pytest.raises(config.ConfigError, match="design gives isolated pairs"):
        config.validate({"design": {"name": "p_random"},
                         "loss": {"name": "contrastive", "sampler": "by_loss", "memory": {"size": 8}}})


@pytest.mark.parametrize("name, key, names", [
    ("margin", "num_classes", "the number of classes of the training split"),
    ("proxy_anchor", "num_classes", "the number of classes of the training split"),
    ("balanced_contrastive", "num_classes", "the number of classes of the training split"),
    ("proxy_nca", "embedding_dim", "model.embedding_dim"),
])
def test_what_a_run_fills_in_is_refused_in_loss_options(name, key, names):
    """A run sets num_classes from its training split and embedding_dim from the model: a
    value in loss.options would disagree with them at the first batch, so the config is
    refused when it is validated, before any work."""
    cfg = {"loss": {"name": name, "options": {key: 7}}}
    with pytest.raises(config.ConfigError, match=rf"loss.options has {key!r}: .*{names}.*remove {key}"):
        config.validate(cfg)


def test_a_null_num_classes_in_loss_options_builds_a_loss_without_class_parameters():
    """``num_classes: null`` is not a number a run would contradict: MarginLoss then learns
    no β_class (Wu et al. Table 3's fixed β0, an arm of the reproduction study)."""
    cfg = config.validate({"loss": {"name": "margin", "sampler": "distance_weighted",
                                    "options": {"num_classes": None, "learn_beta0": False}}})
    loss = loss_config.build_loss(cfg, num_classes=5)
    assert loss.margin_parameters.num_classes is None


@pytest.mark.parametrize("name", ["nt_xent", "vicreg", "barlow_twins"])
def test_a_loss_of_two_views_needs_the_two_view_design(name):
    with pytest.raises(config.ConfigError, match=f"loss.name = '{name}' pairs the two views .* Use design 'two_views'"):
        config.validate({"design": {"name": "group", "options": {"m": 2, "n": 4}}, "loss": {"name": name}})
    assert config.validate({"design": {"name": "two_views", "options": {"n": 8}}, "loss": {"name": name}})["loss"]["name"] == name
    # SupCon reads the classes: any design with positives will do.
    config.validate({"design": {"name": "m_per_class"}, "loss": {"name": "supcon"}})


def test_importance_weights_are_refused_on_two_view_batches():
    with pytest.raises(config.ConfigError, match="two views of an image are not a pair of the training split"):
        config.validate({"design": {"name": "two_views", "options": {"n": 8}}, "loss": {"name": "weighted_contrastive"}})
