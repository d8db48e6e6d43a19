"""The batch designs by name (:data:`DESIGNS`), :func:`register` and :func:`get_design`: the
one table that configs, the command lines and the docs read the design names from."""

from tfdml.registry import Registry

from pipelines.designs.base import Design
from pipelines.designs.group import GroupDesign, MPerClassDesign
from pipelines.designs.p_random import PRandomDesign
from pipelines.designs.smart_mining import SmartMiningDesign
from pipelines.designs.two_views import TwoViewDesign


def _check_design(name, obj):
    if not (isinstance(obj, type) and issubclass(obj, Design)):
        raise ValueError(f"A batch design is a subclass of pipelines.designs.Design; {name!r} is {obj!r}.")


#: name → :class:`Design` subclass, in registration order.
DESIGNS = Registry("batch design", check=_check_design)
DESIGNS.update({
    "group": GroupDesign,
    "p_random": PRandomDesign,
    "m_per_class": MPerClassDesign,
    "two_views": TwoViewDesign,
    "smart_mining": SmartMiningDesign,
})


def register(name):
    """Class decorator: make a :class:`Design` subclass the batch design named ``name``
    (:data:`DESIGNS`, :func:`get_design`, configs' ``design.name``, made with
    :meth:`Design.from_config`)."""
    return DESIGNS.register(name)


def get_design(name, **kwargs):
    """Build a design from its name and constructor arguments: ``get_design("group", m=4, n=16)``."""
    return DESIGNS.build(name, **kwargs)
