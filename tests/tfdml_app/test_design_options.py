"""design.options: a batch design's own parameters (their names, defaults and ranges from
its class), checked before TensorFlow is imported; the old layout (the parameters beside
design.name) read with a warning."""

import pytest

from tfdml_app import config


def test_the_design_parameters_are_its_options():
    """design.options holds the design's own parameters, with the names, defaults and ranges
    of its class (Design.config_options: the class's own argument checks read the same
    ranges), checked before TensorFlow too with validate()'s messages; the old place beside
    design.name (and --set design.m=...) is read as design.options with a warning naming it,
    and a backup that holds the old layout resumes."""
    from pipelines import designs

    from tfdml_app import data

    for name, cls in designs.DESIGNS.items():
        resolved = config.check_values({"design": {"name": name}})["design"]
        assert resolved == {"name": name, "options": {k: s["default"] for k, s in cls.config_options.items()}}
    built = data.build_design(config.check_values({"design": {"name": "p_random", "options": {"p": 0.3, "pairs": 7}}}))
    assert (type(built), built.p, built.pairs) == (designs.PRandomDesign, 0.3, 7)
    with pytest.raises(ValueError, match=r"p must lie strictly between 0 and 1 \(Eq. 24 divides by p and 1-p\)"):
        designs.PRandomDesign(p=0.0, pairs=2)
    for check in (lambda raw: config.check_structure(raw, names=True), config.validate):
        with pytest.raises(config.ConfigError, match=r"design.options has 'mm', which is not an option of the group "
                                                     r"design \(did you mean 'm'\?\); valid: m, n, batch_size \(with another "):
            check({"design": {"name": "group", "options": {"mm": 3}}})
        with pytest.raises(config.ConfigError, match=r"design.options.p = 0.0 must lie strictly between 0 and 1 "
                                                     r"\(Eq. 24 divides by p and 1-p\)\."):
            check({"design": {"name": "p_random", "options": {"p": 0}}, "loss": {"name": "contrastive"}})
        with pytest.raises(config.ConfigError, match=r"design.options.n must be an integer, got 'five'"):
            check({"design": {"options": {"n": "five"}}})
    raw = {"design": {"name": "group", "m": 4, "n": 6, "p": 0.3}}
    with pytest.warns(FutureWarning, match=r"design.m, design.n, design.p beside design.name is the old place .* "
                                           r"design.options.*design.p, which the group design does not take"):
        old = config.validate(raw)
    assert old == config.validate({"design": {"name": "group", "options": {"m": 4, "n": 6}}})
    assert raw["design"]["m"] == 4  # the caller's dict is left as it is
    with pytest.raises(config.ConfigError, match="design.m and design.options.m are both given"):
        config.validate({"design": {"m": 4, "options": {"m": 4}}})
    with pytest.warns(FutureWarning, match=r"--set design.m is the old place .* --set design.options.m"):
        assert config.apply_overrides({}, ["design.m=4"]) == {"design": {"options": {"m": 4}}}
    current = config.validate({})
    saved = config.validate({})
    saved["design"] = {"name": "m_per_class", "m": 8, "n": 5, "p": 0.5, "pairs": 32, "options": {}}
    with pytest.warns(FutureWarning):
        assert config.resume_differences(saved, current) == []
    saved["design"]["m"] = 4
    with pytest.warns(FutureWarning):
        assert config.resume_differences(saved, current) == ["design.options.m"]
