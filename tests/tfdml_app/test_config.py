"""Config validation: every bad input names the key, the value and the choices."""

import glob
import inspect
import os
import re
import subprocess
import sys

import pytest
import yaml

from tfdml_app import config, loss_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_defaults_validate():
    cfg = config.validate({})
    assert cfg["loss"]["name"] == "margin" and cfg["design"]["name"] == "m_per_class"


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "configs", "*.yaml"))))
def test_shipped_configs_validate(path):
    config.load(path)


def test_unknown_key_names_key_and_suggests():
    with pytest.raises(config.ConfigError, match=r"'training.epoch'.*did you mean 'epochs'"):
        config.validate({"training": {"epoch": 3}})
    with pytest.raises(config.ConfigError, match=r"Unknown config key 'dat'"):
        config.validate({"dat": {}})


def test_wrong_type_names_expected_type():
    with pytest.raises(config.ConfigError, match=r"training.epochs must be int, got 'three'"):
        config.validate({"training": {"epochs": "three"}})
    with pytest.raises(config.ConfigError, match=r"boolean"):
        config.validate({"training": {"epochs": True}})


def test_unknown_names_list_choices():
    with pytest.raises(config.ConfigError, match=r"loss.name = 'tripplet'.*did you mean 'triplet'.*choose one of"):
        config.validate({"loss": {"name": "tripplet"}})
    with pytest.raises(config.ConfigError, match=r"design.name = 'groups'.*m_per_class"):
        config.validate({"design": {"name": "groups"}})


def test_impossible_combinations():
    with pytest.raises(config.ConfigError, match=r"p_random.*triplet"):
        config.validate({"design": {"name": "p_random"}, "loss": {"name": "triplet"}})
    with pytest.raises(config.ConfigError, match=r"loss.sampler = 'top_k' does not fit loss.name = 'margin'"):
        config.validate({"loss": {"name": "margin", "sampler": "top_k"}})
    with pytest.raises(config.ConfigError, match=r"design.options.p = 1.5 must lie strictly between 0 and 1"):
        config.validate({"design": {"name": "p_random", "options": {"p": 1.5}}, "loss": {"name": "contrastive"}})
    with pytest.raises(config.ConfigError, match=r"design.options.m = 1 must be >= 2"):
        config.validate({"design": {"options": {"m": 1}}})
    with pytest.raises(config.ConfigError, match=r"evaluation.metrics: Unknown metric 'recal' \(did you mean 'recall'\?\); choose from"):
        config.validate({"evaluation": {"metrics": ["recal"]}})
    # Distance weighted sampling assumes euclidean distances on the unit sphere.
    with pytest.raises(config.ConfigError, match=r"assumes unit-norm embeddings.*model.normalize: true"):
        config.validate({"loss": {"name": "margin", "sampler": "distance_weighted"},
                         "model": {"normalize": False}})
    with pytest.raises(config.ConfigError, match=r"assumes euclidean distances, and margin computes cosine distances: "
                                                 r"use loss.options.distance = 'euclidean'"):
        config.validate({"loss": {"name": "margin", "sampler": "distance_weighted",
                                  "options": {"distance": "cosine"}}})


def test_jit_compile_takes_the_models_choices():
    from tfdml import models

    for value in models.JIT_COMPILE_CHOICES:
        assert config.validate({"training": {"jit_compile": value}})["training"]["jit_compile"] == value
    with pytest.raises(config.ConfigError, match=r"training.jit_compile = 'losses'.*did you mean 'loss'"):
        config.validate({"training": {"jit_compile": "losses"}})
    with pytest.raises(config.ConfigError, match=r"training.jit_compile = 'loss'.*learned sampler.*true"):
        config.validate({"loss": {"name": "triplet"}, "learned_sampler": {}, "training": {"jit_compile": "loss"}})


def test_dtype_policy_takes_the_models_choices():
    from tfdml import models

    assert config.validate({})["model"]["dtype_policy"] == models.AUTO_DTYPE_POLICY
    for value in models.DTYPE_POLICY_CHOICES:
        assert config.validate({"model": {"dtype_policy": value}})["model"]["dtype_policy"] == value
    with pytest.raises(config.ConfigError, match=r"^model.dtype_policy = 'mixed_bfloat' is not valid \(did you mean "
                                                 r"'mixed_bfloat16'\?\); choose one of: auto, float32, mixed_bfloat16\.$"):
        config.load(None, ["model.dtype_policy=mixed_bfloat"])
    with pytest.raises(config.ConfigError, match=r"model.dtype_policy = 'mixed_float16'.*choose one of"):
        config.validate({"model": {"dtype_policy": "mixed_float16"}})
    # Part of the model: a resume with another policy is refused.
    assert "model.dtype_policy" in config.resume_differences(
        config.validate({}), config.validate({"model": {"dtype_policy": "mixed_bfloat16"}}))


def test_overrides_are_parsed_as_yaml():
    cfg = config.load(None, ["training.epochs=2", "loss.options={alpha: 0.3}", "output_dir=/tmp/x"])
    assert cfg["training"]["epochs"] == 2
    assert cfg["loss"]["options"] == {"alpha": 0.3}
    with pytest.raises(config.ConfigError, match="key=value"):
        config.load(None, ["training.epochs"])


def test_validation_runs_no_tensorflow_op():
    """Validation builds the loss (with its variables) but runs no op, so what
    must be configured at program startup still can be afterwards: logical
    devices here, a MultiWorkerMirroredStrategy in train.py (tests/test_multi_worker.py)."""
    code = (
        "import tensorflow as tf\n"
        "from tfdml_app import config\n"
        "config.load('configs/default.yaml')\n"
        "cpu = tf.config.list_physical_devices('CPU')[0]\n"
        "tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)\n"
        "print(len(tf.config.list_logical_devices('CPU')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "2"


def test_numbers_in_exponent_notation_are_floats(tmp_path):
    """PyYAML (YAML 1.1) reads 1e-3 as a string, and learning_rate: 1e-3
    was refused. Files and --set values read it as YAML 1.2 does; quoted stays text."""
    path = tmp_path / "c.yaml"
    path.write_text(
        "output_dir: '1e-3'\n"
        "optimizer: {learning_rate: 1e-3, weight_decay: 1E-4, head_lr_multiplier: 2e+1}\n"
        "loss: {name: margin, options: {alpha: +2.5e-1}}\n"
    )
    cfg = config.load(str(path))
    assert cfg["optimizer"]["learning_rate"] == 1e-3 and isinstance(cfg["optimizer"]["learning_rate"], float)
    assert cfg["optimizer"]["weight_decay"] == 1e-4 and cfg["optimizer"]["head_lr_multiplier"] == 20.0
    assert cfg["loss"]["options"]["alpha"] == 0.25
    assert cfg["output_dir"] == "1e-3"
    cfg = config.load(str(path), ["optimizer.learning_rate=1e-4", "optimizer.decay_rate=5E-1",
                                  "output_dir=runs/1e-3", "data.train_split='2e5'"])
    assert cfg["optimizer"]["learning_rate"] == 1e-4 and cfg["optimizer"]["decay_rate"] == 0.5
    assert cfg["output_dir"] == "runs/1e-3" and cfg["data"]["train_split"] == "2e5"
    # The resolved config written into a run reads back the same.
    config.dump(cfg, str(tmp_path / "resolved.yaml"))
    assert config.load(str(tmp_path / "resolved.yaml")) == cfg
    # PyYAML's own loader is left alone.
    assert yaml.safe_load("x: 1e-3") == {"x": "1e-3"}


def test_missing_file_is_clear(tmp_path):
    with pytest.raises(config.ConfigError, match="does not exist"):
        config.load(str(tmp_path / "nope.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(config.ConfigError, match="not valid YAML"):
        config.load(str(bad))


def test_schema_names_are_the_registries():
    """The config's choices are read from the libraries, not copied."""
    from tfdml import losses, samplers

    assert config.SCHEMA["loss"]["name"].choices == tuple(losses.LOSSES) + (config.WEIGHTED_SUM,)
    assert config.TERM_SCHEMA["name"].choices == tuple(losses.LOSSES)
    sampler_choices = set(config.SCHEMA["loss"]["sampler"].choices)
    assert sampler_choices == set(samplers.SAMPLERS) | {config.NO_SAMPLER, None}
    for copied in ("LOSSES", "SAMPLERS", "LOSS_SAMPLERS", "TUPLE_LOSSES", "METRICS"):
        assert not hasattr(config, copied), copied


def test_stable_contrast_refuses_a_pair_sampler_at_validation():
    """Stable_contrast + random passed validation and failed after loading the data.
    StableContrastLoss accepts triplet samplers only; random selects pairs."""
    with pytest.raises(config.ConfigError) as err:
        config.validate({"loss": {"name": "stable_contrast", "sampler": "random"}})
    message = str(err.value)
    assert "loss.sampler = 'random'" in message and "selects pairs" in message
    triplet_samplers = [s for s in loss_config.valid_samplers("stable_contrast") if s not in (loss_config.NO_SAMPLER, None)]
    assert set(triplet_samplers) >= {"random_triplets", "semi_hard", "hard", "distance_weighted"}
    assert f"valid samplers for stable_contrast: {', '.join(triplet_samplers)}" in message


def _library_accepts(cls, sampler):
    kwargs = {"sampler": sampler}
    if "num_classes" in inspect.signature(cls).parameters:
        kwargs["num_classes"] = 2
    if "embedding_dim" in inspect.signature(cls).parameters:  # a proxy loss's proxies
        kwargs["embedding_dim"] = 2
    try:
        cls(**kwargs)
    except (TypeError, ValueError):
        return False
    return True


def _config_accepts(raw):
    try:
        config.validate(raw)
    except config.ConfigError:
        return False
    return True


def test_config_accepts_exactly_the_samplers_a_loss_accepts():
    """Every (loss, sampler) pair: the config says yes where the library says yes.
    Losses with a sampler argument are asked directly; a loss that fixes its own
    selection (no sampler argument) accepts the names of the kinds it declares."""
    from tfdml import losses, samplers

    for name, cls in losses.LOSSES.items():
        takes_sampler = "sampler" in loss_config._init_parameters(cls)  # also through **kwargs
        # The losses of two views need a design that shows each image twice.
        design = {"design": {"name": "two_views"}} if getattr(cls, "needs_two_views", False) else {}
        # A loss of a cascade's levels (hdc) scores the levels of model.cascade.
        if loss_config.scores_cascade_levels(loss_config._init_parameters(cls)):
            design["model"] = {"cascade": {"levels": 2}}
        for sampler in samplers.SAMPLERS:
            per_class = getattr(samplers.get(sampler), "examples_per_class", None)  # the design must fit it
            fitted = ({**design, "design": {"options": {"m": per_class}}} if per_class and "design" not in design
                      else design)
            accepted = _config_accepts({**fitted, "loss": {"name": name, "sampler": sampler}})
            if takes_sampler:
                assert accepted == _library_accepts(cls, sampler), (name, sampler)
            else:
                assert accepted == (samplers.get(sampler).kind in cls.sampler_kinds), (name, sampler)
        takes_none = takes_sampler and _library_accepts(cls, None)
        fixed_without_sampler = not takes_sampler and not cls.sampler_kinds
        assert _config_accepts({**design, "loss": {"name": name, "sampler": "by_loss"}}) == (
            takes_none or fixed_without_sampler), name


def test_learned_sampler_losses_come_from_tfdml_dsn():
    from tfdml import dsn, losses

    for name, cls in losses.LOSSES.items():
        raw = {"loss": {"name": name}, "learned_sampler": {}}
        assert _config_accepts(raw) == (dsn.kind_for_loss(cls) is not None), name
    assert _config_accepts({"loss": {"name": "triplet"}, "learned_sampler": {}})
    with pytest.raises(config.ConfigError, match=r"learned_sampler with loss.name = 'margin': .*trains triplet, "
                                                 r"npair only"):
        config.validate({"loss": {"name": "margin"}, "learned_sampler": {}})


def test_the_learned_sampler_is_a_section_of_its_own():
    """learned_sampler: {options} (null: none) instead of a loss.sampler name; its option
    names are the model's and the sampler network's, checked before TensorFlow too; the
    old spelling loss.sampler: learned (options in loss.sampler_options) is read as the
    section with a warning naming it, and a backup that holds it resumes."""
    assert config.validate({})["learned_sampler"] is None
    assert "learned" not in loss_config.valid_samplers("triplet")
    options = {"tuples_per_minibatch": 4, "width": 8}
    cfg = config.validate({"loss": {"name": "triplet"}, "learned_sampler": options})
    assert cfg["learned_sampler"] == options and cfg["loss"]["sampler"] is None
    for names in (True, False):
        check = config.check_structure if names else config.validate
        with pytest.raises(config.ConfigError, match=r"learned_sampler has 'widht', which is not an option of the "
                                                     r"learned sampler \(did you mean 'width'\?\)"):
            check({"loss": {"name": "triplet"}, "learned_sampler": {"widht": 8}}, *([True] if names else []))
        with pytest.raises(config.ConfigError, match=r"learned_sampler picks the training tuples, so loss.sampler "
                                                     r"= 'hard'"):
            check({"loss": {"name": "triplet", "sampler": "hard"}, "learned_sampler": {}}, *([True] if names else []))
    raw = {"loss": {"name": "triplet", "sampler": "learned", "sampler_options": options}}
    with pytest.warns(FutureWarning, match=r"loss.sampler = 'learned' is an old spelling of the learned_sampler "
                                           r"section.*remove loss.sampler"):
        old = config.validate(raw)
    assert old == cfg and raw["loss"]["sampler"] == "learned"  # the caller's dict is left as it is
    with pytest.raises(config.ConfigError, match="both given"):
        config.validate({**raw, "learned_sampler": options})
    saved = config.validate({"loss": {"name": "triplet"}})
    saved["loss"].update(sampler="learned", sampler_options=options)
    del saved["learned_sampler"]
    with pytest.warns(FutureWarning):
        assert config.resume_differences(saved, cfg) == []


def test_a_registered_loss_needs_no_edit_of_the_config(monkeypatch):
    """Adding a loss to tfdml.losses.LOSSES is enough for loss.name to accept it:
    its samplers follow from its sampler_kinds, its options from its constructor."""
    from tfdml import losses

    class PairOnlyLoss(losses.ContrastiveLoss):
        sampler_kinds = ("pairs",)

    monkeypatch.setitem(losses.LOSSES, "pair_only", PairOnlyLoss)
    cfg = config.validate({"seed": 7, "loss": {"name": "pair_only", "sampler": "random",
                                               "sampler_options": {"num_pairs": 4},
                                               "options": {"margin": 0.5}}})
    loss = config.build_loss(cfg, num_classes=3)
    assert type(loss) is PairOnlyLoss and loss.margin == 0.5 and loss.seed == 7
    assert loss.sampler.num_pairs == 4
    with pytest.raises(config.ConfigError,
                       match=r"'hard'.*selects triplets.*valid samplers for pair_only: "
                             r"all, random, multi_similarity, pair_margin, hdc, by_loss"):
        config.validate({"loss": {"name": "pair_only", "sampler": "hard"}})
    with pytest.raises(config.ConfigError, match=r"'pair_onl'.*did you mean 'pair_only'"):
        config.validate({"loss": {"name": "pair_onl"}})


def test_loss_and_sampler_options_are_checked_by_the_library():
    with pytest.raises(config.ConfigError, match=r"loss.options has 'alpah'.*did you mean 'alpha'"):
        config.validate({"loss": {"name": "margin", "options": {"alpah": 0.1}}})
    with pytest.raises(config.ConfigError, match=r"loss.options for 'margin': alpha must be a number > 0"):
        config.validate({"loss": {"name": "margin", "options": {"alpha": -0.1}}})
    with pytest.raises(config.ConfigError, match=r"loss.sampler_options has 'num_pair'.*'num_pairs'"):
        config.validate({"loss": {"name": "margin", "sampler": "random", "sampler_options": {"num_pair": 3}}})
    with pytest.raises(config.ConfigError, match=r"loss.sampler_options for 'random'.*num_pairs"):
        config.validate({"loss": {"name": "margin", "sampler": "random", "sampler_options": {"num_pairs": 0}}})
    # Options without a sampler name are those of the loss's default sampler ...
    cfg = config.validate({"loss": {"name": "margin", "sampler_options": {"cutoff": 0.4}}})
    assert config.build_loss(cfg, 5).sampler.cutoff == 0.4
    # ... and refused where there is none to apply them to.
    with pytest.raises(config.ConfigError, match=r"contrastive uses no sampler by default"):
        config.validate({"loss": {"name": "contrastive", "sampler_options": {"num_pairs": 3}}})
    with pytest.raises(config.ConfigError, match=r"precision_at_k builds its own top_k sampler"):
        config.validate({"loss": {"name": "precision_at_k", "sampler": "top_k", "sampler_options": {"k": 3}}})


def test_p_random_needs_a_loss_and_sampler_that_score_single_pairs():
    """The p-random design scores only the pair sharing a pair_id: a triplet
    sampler finds no anchor with both a positive and a negative there."""
    with pytest.raises(config.ConfigError, match=r"p_random.*default of margin.*DistanceWeightedSampler"
                                                 r".*sampler of single pairs \(all, random, pair_margin, hdc, by_loss\)"):
        config.validate({"design": {"name": "p_random"}, "loss": {"name": "margin"}})
    with pytest.raises(config.ConfigError, match=r"p_random.*loss.sampler = 'hard'"):
        config.validate({"design": {"name": "p_random"}, "loss": {"name": "contrastive", "sampler": "hard"}})
    for loss, sampler in [("margin", "random"), ("contrastive", None), ("balanced_contrastive", None),
                          ("npair", None)]:  # N-pair: p-random positive pairs form one N-pair batch
        config.validate({"design": {"name": "p_random"}, "loss": {"name": loss, "sampler": sampler}})


def test_evaluation_names_come_from_tfdml_metrics():
    """evaluate.py reads evaluation.distance and recall@k names from the same
    YAML that train.py validates: the config accepts what tfdml.metrics accepts."""
    from tfdml.metrics import knn

    assert config.validate({})["evaluation"]["distance"] == "euclidean"
    for distance in knn.RETRIEVAL_DISTANCES:
        assert config.validate({"evaluation": {"distance": distance}})["evaluation"]["distance"] == distance
    with pytest.raises(config.ConfigError,
                       match=r"evaluation.distance = 'manhattan'.*euclidean, squared_euclidean, cosine"):
        config.validate({"evaluation": {"distance": "manhattan"}})
    config.validate({"evaluation": {"metrics": ["recall@2", "map@r", "auc"], "ks": [1]}})


def test_data_choices_are_read_from_the_pipelines(monkeypatch):
    """The data side's names are not copied: a source registered in pipelines is a valid data.source."""
    from pipelines import designs, sources

    assert config.SCHEMA["design"]["name"].choices == tuple(designs.DESIGNS)
    assert config.SCHEMA["data"]["source"].choices == tuple(sources.SOURCES)
    assert config.SCHEMA["data"]["validation"]["mode"].choices == tuple(sources.VALIDATION_MODES)
    monkeypatch.setitem(sources.SOURCES, "my_source", sources.SOURCES["digits"])
    assert config.validate({"data": {"source": "my_source"}})["data"]["source"] == "my_source"


def test_what_a_design_allows_is_read_from_its_class_not_its_name(monkeypatch):
    """A design registered from outside that groups its rows by class (a subclass of
    m-per-class) feeds a learned sampler and gets the m check, as the built-ins do."""
    from pipelines import designs

    class Wide(designs.MPerClassDesign):
        pass

    monkeypatch.setitem(designs.DESIGNS, "wide", Wide)
    assert config.validate({"design": {"name": "wide"}, "loss": {"name": "triplet"}, "learned_sampler": {}})
    with pytest.raises(config.ConfigError, match=r"design.options.m = 1"):
        config.validate({"design": {"name": "wide", "options": {"m": 1}}})
    with pytest.raises(config.ConfigError, match=r"design.name = 'p_random'"):
        config.validate({"design": {"name": "p_random"}, "loss": {"name": "triplet"}, "learned_sampler": {}})

    class Pairs(designs.PRandomDesign):
        pass

    monkeypatch.setitem(designs.DESIGNS, "pairs", Pairs)
    with pytest.raises(config.ConfigError, match=r"design.name = 'pairs' gives isolated pairs.*triplet.*"
                                                 r"Use design 'group' or 'm_per_class' or 'wide'"):
        config.validate({"design": {"name": "pairs"}, "loss": {"name": "triplet"}})


@pytest.mark.parametrize("section, message", [
    ({"fraction": 1.0}, "data.validation.fraction = 1.0 must lie strictly between 0 and 1"),
    ({"fraction": 0}, "data.validation.fraction = 0.0 must lie strictly between 0 and 1"),
    ({"fraction": 0.2, "mode": "class"}, "did you mean 'classes'"),
    ({"fractoin": 0.2}, "did you mean 'fraction'"),
])
def test_validation_section_errors_name_the_key(section, message):
    with pytest.raises(config.ConfigError, match=re.escape(message)):
        config.validate({"data": {"validation": section}})


def test_validation_is_off_by_default_and_part_of_the_resume_check():
    cfg = config.validate({})
    assert cfg["data"]["validation"] == {"fraction": None, "mode": "classes", "seed": 0}
    other = config.validate({"data": {"validation": {"fraction": 0.2, "seed": 1}}})
    assert config.resume_differences(cfg, other) == ["data.validation.fraction", "data.validation.seed"]


def test_unknown_baseline_lists_choices():
    with pytest.raises(config.ConfigError, match=r"evaluation.baseline = 'pixels'.*raw_pixels"):
        config.validate({"evaluation": {"baseline": "pixels"}})
    assert config.validate({"evaluation": {"baseline": "raw_pixels"}})["evaluation"]["baseline"] == "raw_pixels"


def test_check_structure_needs_no_library(tmp_path):
    """config.read + check_structure: keys, types, fixed choices and ranges; the
    names the library registers are left to validate()."""
    path = tmp_path / "c.yaml"
    path.write_text("training: {epochs: 2}\nloss: {name: not_a_registered_loss}\n")
    raw = config.read(str(path), ["optimizer.name=sgd"])
    assert raw == {"training": {"epochs": 2}, "loss": {"name": "not_a_registered_loss"},
                   "optimizer": {"name": "sgd"}}
    config.check_structure(raw)  # the loss name is the library's to check
    with pytest.raises(config.ConfigError, match="loss.name = 'not_a_registered_loss' is not valid"):
        config.validate(raw)
    for bad, match in (({"trainig": {}}, "Unknown config key 'trainig'"),
                       ({"optimizer": {"name": "adma"}}, "optimizer.name = 'adma' is not valid"),
                       ({"evaluation": {"every_n_epochs": 0}}, "must be >= 1"),
                       ({"training": {"epochs": "two"}}, "training.epochs must be int")):
        with pytest.raises(config.ConfigError, match=match):
            config.check_structure(bad)



def test_check_structure_with_names_checks_the_builtin_names_and_the_combinations():
    """names=True (train.py without --import): also the names of the built-in parts
    (tfdml.builtin_names) and every range and combination that needs no part of the
    library, with the messages of validate()."""
    config.check_structure({"loss": {"name": "margin", "sampler": "semi_hard"}, "model": {"backbone": "mlp"}},
                           names=True)
    for bad, match in (({"loss": {"name": "not_a_registered_loss"}}, "loss.name = 'not_a_registered_loss'"),
                       ({"model": {"backbone": "resnet"}}, "model.backbone = 'resnet' is not valid"),
                       ({"training": {"epochs": 0}}, r"training.epochs must be >= 1, got 0\."),
                       ({"evaluation": {"metrics": ["nmi", "recal"]}}, "Unknown metric 'recal'"),
                       ({"design": {"name": "group", "options": {"m": 1}}},
                        r"design.options.m = 1 must be >= 2 \(a class needs two examples")):
        with pytest.raises(config.ConfigError, match=match):
            config.check_structure(bad, names=True)
        with pytest.raises(config.ConfigError, match=match):
            config.validate(bad)


def test_an_unknown_backbone_is_a_config_error():
    with pytest.raises(config.ConfigError, match=r"model.backbone = 'resnet50' is not valid \(did you mean "
                                                 r"'resnet50v2'\?\); choose one of: small_cnn, mlp, "):
        config.validate({"model": {"backbone": "resnet50"}})

@pytest.mark.parametrize("name", sorted(loss_config._losses().LOSSES))
def test_every_sampler_offered_for_a_loss_builds_with_it(name):
    """valid_samplers is what errors and docs offer: each in-graph sampler it lists for a
    loss must build with that loss (a sampler that needs euclidean distances is not
    offered to a loss fixed to cosine)."""
    cls = loss_config._losses().LOSSES[name]
    if not loss_config._takes_sampler(cls):
        pytest.skip(f"{name} builds its own fixed sampler")
    offered = [s for s in loss_config.valid_samplers(name)
               if s not in (loss_config.NO_SAMPLER, *loss_config.LEARNED_SAMPLERS)]
    refused = [s for s in offered if loss_config._refuses_sampler(cls, s, seed=1, num_classes=4)]
    assert refused == []


def test_a_backup_saved_before_a_key_existed_resumes_when_the_key_keeps_its_default():
    """A run interrupted under an older tfdml resumes after an upgrade that added a key:
    the key absent from the saved config, at its default now, changes nothing."""
    current = config.validate({})
    saved = config.validate({})
    del saved["model"]["embedding_dim"]
    assert config.resume_differences(saved, current) == []
    # Set to something else than the default, it is a difference.
    other = config.validate({"model": {"embedding_dim": 32}})
    assert config.resume_differences(saved, other) == ["model.embedding_dim"]


def test_a_backup_saved_before_a_key_s_default_changed_counts_as_what_it_ran_with():
    """model.dtype_policy's default is now "auto"; a backup of a tfdml without the key ran
    float32, which a run resolves "auto" to on resume (tfdml_app.fit.resolve_dtype_policy)."""
    saved = config.validate({})
    del saved["model"]["dtype_policy"]
    assert config.resume_differences(saved, config.validate({"model": {"dtype_policy": "float32"}})) == []
    assert config.resume_differences(saved, config.validate({"model": {"dtype_policy": "mixed_bfloat16"}})) == [
        "model.dtype_policy"]


def test_no_sampler_and_the_default_sampler_have_names_that_cannot_be_confused():
    """loss.sampler: by_loss builds the loss without a sampler (it forms its own tuples);
    an empty loss.sampler (null) builds it with its default sampler."""
    own = loss_config.build_loss(config.validate({"loss": {"name": "margin", "sampler": "by_loss"}}), 2)
    default = loss_config.build_loss(config.validate({"loss": {"name": "margin", "sampler": None}}), 2)
    assert own.sampler is None
    assert type(default.sampler).__name__ == "DistanceWeightedSampler"
    # The old spelling 'none' is not offered, and is read as by_loss with a warning naming it.
    assert "none" not in loss_config.valid_samplers("margin")
    with pytest.raises(config.ConfigError, match=r"loss.sampler = 'nonee' is not valid.*choose one of: (?!.*\bnone\b)"):
        config.validate({"loss": {"sampler": "nonee"}})
    with pytest.warns(FutureWarning, match=r"loss.sampler = 'none' is an old spelling of 'by_loss'.*"
                                           r"write sampler: by_loss"):
        cfg = config.validate({"loss": {"name": "margin", "sampler": "none"}})
    assert cfg["loss"]["sampler"] == "by_loss"
    with pytest.warns(FutureWarning):
        config.check_structure({"loss": {"name": "margin", "sampler": "none"}}, names=True)
    # A backup written with the old spelling resumes under the new one.
    saved = config.validate({"loss": {"sampler": "by_loss"}})
    saved["loss"]["sampler"] = "none"
    assert config.resume_differences(saved, config.validate({"loss": {"sampler": "by_loss"}})) == []
    assert config.resume_differences(saved, config.validate({})) == ["loss.sampler"]
