"""tfdml.losses.register: the one step that makes a user's loss a tfdml loss."""

import pytest

from tfdml import losses


def test_register_refuses_what_is_not_a_loss_and_a_taken_name():
    with pytest.raises(ValueError, match="needs a tfdml.losses.MetricLoss subclass"):
        losses.register("not_a_loss")(dict)
    with pytest.raises(ValueError, match="'margin' is already registered \\(MarginLoss\\)"):
        @losses.register("margin")
        class Other(losses.MetricLoss):
            pass
    with pytest.raises(ValueError, match="must be a Python identifier"):
        losses.register("two words")
    assert losses.LOSSES["margin"] is losses.MarginLoss


def test_registering_the_same_class_twice_is_harmless():
    try:
        @losses.register("tmp_same")
        class Same(losses.MetricLoss):
            def compute(self, targets, embeddings):
                return 0.0

        assert losses.register("tmp_same")(Same) is Same
        assert losses.get("tmp_same").__class__ is Same
    finally:
        losses.LOSSES.pop("tmp_same", None)
