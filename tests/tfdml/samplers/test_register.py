"""tfdml.samplers.register: the one step that makes a user's sampler a tfdml sampler."""

import keras
import pytest

from tfdml import samplers
from tfdml_app import config


class FarthestPositiveSampler(samplers.HardSampler):
    """A user's triplet sampler (the batch-hard rule under another name)."""


@pytest.fixture
def registered():
    try:
        yield samplers.register("farthest_positive")(FarthestPositiveSampler)
    finally:
        samplers.SAMPLERS.pop("farthest_positive", None)


def test_a_registered_sampler_is_found_by_name_and_in_configs(registered):
    assert "farthest_positive" in samplers.SAMPLERS
    assert type(samplers.get("farthest_positive")) is FarthestPositiveSampler
    assert "farthest_positive" in config.valid_samplers("triplet")
    assert "farthest_positive" not in config.valid_samplers("precision_at_k")  # a sets loss
    cfg = config.validate({"loss": {"name": "triplet", "sampler": "farthest_positive"}})
    loss = config.build_loss(cfg, num_classes=4)
    assert type(loss.sampler) is FarthestPositiveSampler
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert type(restored.sampler) is FarthestPositiveSampler


def test_register_refuses_what_is_not_a_sampler_and_a_taken_name():
    with pytest.raises(ValueError, match="needs a tfdml.samplers.Sampler subclass"):
        samplers.register("not_a_sampler")(dict)
    with pytest.raises(ValueError, match=r"'hard' is already registered \(HardSampler\)"):
        samplers.register("hard")(FarthestPositiveSampler)
    assert samplers.SAMPLERS["hard"] is samplers.HardSampler


def test_an_unknown_name_suggests_the_closest():
    with pytest.raises(ValueError, match=r"Unknown sampler 'semihard' \(did you mean 'semi_hard'\?\)"):
        samplers.get("semihard")
    with pytest.raises(ValueError, match=r"did you mean 'top_k'"):
        samplers.get({"name": "topk"})
