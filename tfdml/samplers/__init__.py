"""In-graph samplers: fixed-shape selections of pairs, triplets or sets.

Each sampler is called as ``sampler(dist, labels, candidates=None, seed=None,
embedding_dim=None)`` on a [B, M] matrix of the batch's B anchors against M
candidates (the batch itself, M = B, or the batch followed by a cross-batch
memory, :mod:`tfdml.memory`) and returns one of
:class:`PairSelection`, :class:`TripletSelection` or :class:`SetSelection`
(see :mod:`tfdml.samplers.base`). ``dist`` is a distance (larger = farther),
except for :class:`TopKMisplacedSampler`, which takes similarity scores.

Names for configs (:func:`get`), in :data:`SAMPLERS`; a sampler of the user's
joins them with :func:`register` (and is then a valid ``loss.sampler``):

=====================  ==========================  =========  ============
name                   class                       kind       paper
=====================  ==========================  =========  ============
``all``                :class:`AllPairsSampler`    pairs      Wu §3
``random``             :class:`RandomPairSampler`  pairs      Wu §5.1
``random_triplets``    RandomTripletSampler        triplets   Lu §4.5
``semi_hard``          :class:`SemiHardSampler`    triplets   Wu §3
``hard``               :class:`HardSampler`        triplets   Wu §3
``distance_weighted``  DistanceWeightedSampler     triplets   Wu §4, §5
``top_k``              TopKMisplacedSampler        sets       Lu §3.3
``multi_similarity``   MultiSimilaritySampler      pairs      Wang 2019
``easy_hard``          :class:`EasyHardSampler`    triplets   Xuan 2020
``pair_margin``        :class:`PairMarginSampler`  pairs      PML
``npair``              :class:`NPairSampler`       triplets   Sohn; Duan
``hdc``                :class:`HDCSampler`         pairs      Yuan 2017
=====================  ==========================  =========  ============
"""

import keras

from tfdml import registry
from tfdml.samplers.base import (
    KINDS,
    GridTripletSelection,
    PairSelection,
    Sampler,
    SetSelection,
    TripletSelection,
    split_candidates,
)
from tfdml.samplers.distance_weighted import (
    DistanceWeightedSampler,
    distance_weighted_probabilities,
    log_inverse_density,
)
from tfdml.samplers.easy_hard import EasyHardSampler
from tfdml.samplers.hard import HardSampler
from tfdml.samplers.hdc import HDCSampler
from tfdml.samplers.multi_similarity import MultiSimilaritySampler
from tfdml.samplers.npair import NPairSampler
from tfdml.samplers.pair_margin import PairMarginSampler
from tfdml.samplers.pairs import AllPairsSampler, RandomPairSampler
from tfdml.samplers.random_triplets import RandomTripletSampler
from tfdml.samplers.semi_hard import SemiHardSampler
from tfdml.samplers.top_k import TopKMisplacedSampler


def _check_sampler_class(name, cls):
    if not (isinstance(cls, type) and issubclass(cls, Sampler)):
        raise ValueError(f"register({name!r}) needs a tfdml.samplers.Sampler subclass, got {cls!r}.")


#: Sampler names → :class:`Sampler` subclasses (a :class:`tfdml.registry.Registry`).
SAMPLERS = registry.Registry("sampler", check=_check_sampler_class,
                             on_register=registry.keras_serializable(), instances=Sampler)
SAMPLERS.update({
    "all": AllPairsSampler,
    "random": RandomPairSampler,
    "random_triplets": RandomTripletSampler,
    "semi_hard": SemiHardSampler,
    "hard": HardSampler,
    "distance_weighted": DistanceWeightedSampler,
    "top_k": TopKMisplacedSampler,
    "multi_similarity": MultiSimilaritySampler,
    "easy_hard": EasyHardSampler,
    "pair_margin": PairMarginSampler,
    "npair": NPairSampler,
    "hdc": HDCSampler,
})


def register(name):
    """Class decorator: make a :class:`Sampler` subclass a tfdml sampler named ``name``
    (:data:`SAMPLERS`, :func:`get`, configs' ``loss.sampler``; Keras serialisation)."""
    return SAMPLERS.register(name)


def get(identifier):
    """A sampler instance from a name, a serialized config dict or an instance.

    * a name of :data:`SAMPLERS` (``"semi_hard"``), built with default arguments;
    * a dict ``{"name": "semi_hard", **kwargs}`` (config-file form), or the dict
      of ``keras.saving.serialize_keras_object(sampler)``;
    * a :class:`Sampler` instance, returned as is; ``None`` returns ``None``.
    """
    if identifier is None or isinstance(identifier, Sampler):
        return identifier
    if isinstance(identifier, str):
        return SAMPLERS.build(identifier)
    if isinstance(identifier, dict):
        if "name" in identifier and "class_name" not in identifier:
            kwargs = dict(identifier)
            return SAMPLERS.build(kwargs.pop("name"), **kwargs)
        obj = keras.saving.deserialize_keras_object(identifier)
        if not isinstance(obj, Sampler):
            raise ValueError(f"The config {identifier!r} does not describe a tfdml sampler.")
        return obj
    raise ValueError(
        f"Cannot build a sampler from {identifier!r}: pass one of the names "
        f"{', '.join(SAMPLERS)}, a config dict or a Sampler instance."
    )


__all__ = [
    "KINDS",
    "SAMPLERS",
    "AllPairsSampler",
    "DistanceWeightedSampler",
    "EasyHardSampler",
    "GridTripletSelection",
    "HDCSampler",
    "HardSampler",
    "MultiSimilaritySampler",
    "NPairSampler",
    "PairMarginSampler",
    "PairSelection",
    "RandomPairSampler",
    "RandomTripletSampler",
    "Sampler",
    "SemiHardSampler",
    "SetSelection",
    "TopKMisplacedSampler",
    "TripletSelection",
    "distance_weighted_probabilities",
    "get",
    "log_inverse_density",
    "register",
    "split_candidates",
]
