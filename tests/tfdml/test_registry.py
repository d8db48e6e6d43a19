"""tfdml.registry.Registry: one way to name and find every kind of part."""

import pytest

from tfdml.registry import Registry, did_you_mean


class Part:
    def __init__(self, size=1):
        self.size = size


def _registry(**kwargs):
    return Registry("part", **kwargs)


def test_a_registry_is_a_mapping_in_registration_order():
    reg = _registry()
    reg.register("b_part")(Part)
    reg.register("a_part")(dict)
    assert list(reg) == ["b_part", "a_part"] and sorted(reg) == ["a_part", "b_part"]
    assert reg["b_part"] is Part and "a_part" in reg and "c_part" not in reg and len(reg) == 2
    assert reg.get("c_part") is None  # the Mapping meaning of get
    assert dict(reg.items()) == {"b_part": Part, "a_part": dict}


def test_register_refuses_a_bad_name_and_a_taken_one_naming_what_it_holds():
    reg = _registry()
    with pytest.raises(ValueError, match="A part name must be a Python identifier, got 'two words'"):
        reg.register("two words")
    with pytest.raises(ValueError, match="must be a Python identifier"):
        reg.register(3)
    reg.register("part")(Part)
    with pytest.raises(ValueError, match=r"A part named 'part' is already registered \(Part\); choose another"):
        reg.register("part")(dict)
    assert reg.register("part")(Part) is Part  # the same object again is harmless
    assert reg["part"] is Part


def test_check_and_on_register_hooks():
    seen = []

    def check(name, obj):
        if not isinstance(obj, type):
            raise ValueError(f"register({name!r}) needs a class, got {obj!r}.")

    def on_register(name, obj):
        seen.append(name)
        return obj

    reg = _registry(check=check, on_register=on_register)
    with pytest.raises(ValueError, match="needs a class"):
        reg.register("fn")(len)
    reg.register("part")(Part)
    reg.register("part")(Part)
    assert seen == ["part"] and "fn" not in reg


def test_build_makes_from_a_name_passes_parts_through_and_suggests_on_a_typo():
    reg = _registry(instances=Part)
    reg.register("semi_hard")(Part)
    reg.register("hard")(Part)
    assert reg.build("semi_hard", size=3).size == 3
    made = Part()
    assert reg.build(made) is made
    with pytest.raises(ValueError, match="apply to a part name"):
        reg.build(made, size=2)
    with pytest.raises(ValueError, match=r"Unknown part 'semihard' \(did you mean 'semi_hard'\?\); "
                                         r"choose one of semi_hard, hard\."):
        reg.build("semihard")
    with pytest.raises(ValueError, match=r"Unknown part \['x'\]; choose one of"):
        reg.build(["x"])  # unhashable: the same one-line error


def test_make_hook_builds_the_part():
    reg = _registry(make=lambda entry, **kwargs: ("made", entry, kwargs))
    reg.register("part")(Part)
    assert reg.build("part", size=2) == ("made", Part, {"size": 2})


def test_item_assignment_and_deletion_for_test_patching():
    reg = _registry()
    reg["tmp"] = Part
    assert reg.lookup("tmp") is Part
    del reg["tmp"]
    assert reg.pop("tmp", None) is None and "tmp" not in reg


def test_did_you_mean():
    assert did_you_mean("margn", ["margin", "triplet"]) == " (did you mean 'margin'?)"
    assert did_you_mean("zzz", ["margin"]) == ""


def test_keras_hook_registers_a_new_class_and_keeps_a_known_name():
    import keras

    from tfdml.registry import keras_serializable

    class UserThing:
        def get_config(self):
            return {}

    hook = keras_serializable("tfdml_test")
    assert hook("user_thing", UserThing) is UserThing
    assert keras.saving.get_registered_name(UserThing) == "tfdml_test>UserThing"
    from tfdml.losses import MarginLoss

    hook("margin", MarginLoss)
    assert keras.saving.get_registered_name(MarginLoss) == "tfdml>MarginLoss"
