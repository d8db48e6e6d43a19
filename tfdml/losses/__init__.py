"""Losses of deep metric learning, as serialisable ``keras.losses.Loss`` subclasses.

Every loss takes ``y_true`` as plain integer labels or as the batch-contract
dict (:mod:`tfdml.targets`), ``y_pred`` as the [B, d] embeddings, and returns
the scalar loss of the batch; see :mod:`tfdml.losses.base` and
:mod:`tfdml.losses.reductions` for what they share.

==============================  ==============================================
:class:`ContrastiveLoss`        Hadsell / Wu et al. 2017 §3; ℓ2 form draft Eq. 18
:class:`TripletLoss`            FaceNet ℓ2² and Wu et al. 2017 §4 ℓ2
:class:`MarginLoss`             Wu et al. 2017 §4, learned β (MarginParameters)
:class:`WeightedContrastiveLoss`  Hong et al. Eq. 10 / 23 with importance weights
:class:`BalancedContrastiveLoss`  Hong et al. Eq. 15 / 23
:class:`NPairLoss`              Sohn; Duan et al. 2019 Eq. 9
:class:`PrecisionAtKLoss`       Lu et al. 2019 ℓ_k, Eq. 4–10
:class:`StableContrastLoss`     deep-embeddings draft Eq. 16
:class:`RobustHardContrastiveLoss`  deep-embeddings draft Eq. 22
:class:`HistogramLoss`          Ustinova & Lempitsky 2016, Eq. 1–4
:class:`AngularLoss`            Wang et al. 2017, Eq. 8 (N-pair form); Eq. 9 option
:class:`LiftedStructuredLoss`   Song et al. 2016 Eq. 4; Hermans et al. 2017
:class:`BinomialDevianceLoss`   Yi et al. 2014; Ustinova & Lempitsky 2016 §4
:class:`MultiSimilarityLoss`    Wang et al. 2019, L_MS with its pair mining
:class:`CircleLoss`             Sun et al. 2020, Eq. 6 with Eq. 5 / 8 (pairs)
:class:`FacilityLocationLoss`   Song et al. 2017 §3.1–3.4 (clustering, NMI margin)
:class:`DDMLLoss`               Hu, Lu, Tan 2014 (DDML), Eq. 6 / 7
:class:`DAMLLoss`               Duan et al. 2018 (DAML), learned hard negative generator
:class:`ProxyNCALoss`           Movshovitz-Attias et al. 2017 §3 (proxies)
:class:`ProxyAnchorLoss`        Kim et al. 2020 Eq. 4 (proxies)
:class:`WeightedSumLoss`        Σ_t w_t L_t: several losses on one batch (PML's MultipleLosses)
:class:`HDCLoss`                Yuan et al. 2017: a pair loss per cascade level on its hard pairs
:class:`NTXentLoss`             Chen et al. 2020 Eq. 1 (SimCLR; two views)
:class:`SupConLoss`             Khosla et al. 2020 Eq. 2, L^sup_out
:class:`VICRegLoss`             Bardes et al. 2022 §3.1 (two views)
:class:`BarlowTwinsLoss`        Zbontar et al. 2021 Eq. 1 (two views)
:class:`NormalizedSoftmaxLoss`  Zhai & Wu 2019 §3 (class weights)
:class:`CosFaceLoss`            Wang et al. 2018 Eq. 4 (class weights)
:class:`ArcFaceLoss`            Deng et al. 2019 Eq. 3 (class weights)
:class:`SubCenterArcFaceLoss`   Deng et al. 2020 §3, K sub-centres (class weights)
:class:`SoftTripleLoss`         Qian et al. 2019 §3, K centres (class weights)
:class:`FastAPLoss`             Cakir et al. 2019 §3, histogram-binned AP
:class:`PDDMLoss`               Huang, Loy & Tang 2016 (learned PDDM similarity, quadruplets)
:class:`GlobalLoss`             Kumar B G et al. 2016 global loss (Harwood et al. 2017's second term)
==============================  ==============================================
"""

import keras

from tfdml import registry
from tfdml.losses.angular import AngularLoss
from tfdml.losses.balanced_contrastive import BalancedContrastiveLoss
from tfdml.losses.barlow_twins import BarlowTwinsLoss
from tfdml.losses.base import MetricLoss
from tfdml.losses.batch import select_pairs, triplets_to_pairs
from tfdml.losses.seeds import SeedState
from tfdml.input_checks import InputCheck
from tfdml.losses.binomial_deviance import BinomialDevianceLoss
from tfdml.losses.circle import CircleLoss
from tfdml.losses.classification import ArcFaceLoss, CosFaceLoss, NormalizedSoftmaxLoss, SubCenterArcFaceLoss
from tfdml.losses.contrastive import ContrastiveLoss
from tfdml.losses.daml import DAMLLoss, HardNegativeGenerator
from tfdml.losses.ddml import DDMLLoss
from tfdml.losses.facility_location import FacilityLocationLoss
from tfdml.losses.fast_ap import FastAPLoss
from tfdml.losses.global_loss import GlobalLoss
from tfdml.losses.hdc import HDCLoss
from tfdml.losses.histogram import HistogramLoss
from tfdml.losses.lifted_structured import LiftedStructuredLoss
from tfdml.losses.margin import MarginLoss, MarginParameters
from tfdml.losses.multi_similarity import MultiSimilarityLoss
from tfdml.losses.npair import NPairLoss
from tfdml.losses.pddm import PDDMLoss
from tfdml.losses.nt_xent import NTXentLoss
from tfdml.losses.precision_at_k import PrecisionAtKLoss
from tfdml.losses.proxies import Proxies
from tfdml.losses.proxy_anchor import ProxyAnchorLoss
from tfdml.losses.proxy_nca import ProxyNCALoss
from tfdml.losses.reductions import REDUCTIONS, reduce_tuples
from tfdml.losses.robust_hard_contrastive import RobustHardContrastiveLoss
from tfdml.losses.soft_triple import SoftTripleLoss
from tfdml.losses.stable_contrast import StableContrastLoss
from tfdml.losses.supcon import SupConLoss
from tfdml.losses.triplet import TripletLoss
from tfdml.losses.vicreg import VICRegLoss
from tfdml.losses.weighted_contrastive import WeightedContrastiveLoss
from tfdml.losses.weighted_sum import WeightedSumLoss


def _check_loss_class(name, cls):
    if not (isinstance(cls, type) and issubclass(cls, MetricLoss)):
        raise ValueError(f"register({name!r}) needs a tfdml.losses.MetricLoss subclass, got {cls!r}.")


#: Loss names → :class:`MetricLoss` subclasses (a :class:`tfdml.registry.Registry`).
LOSSES = registry.Registry("loss", check=_check_loss_class, on_register=registry.keras_serializable(),
                           instances=keras.losses.Loss)
LOSSES.update({
    "contrastive": ContrastiveLoss,
    "triplet": TripletLoss,
    "margin": MarginLoss,
    "weighted_contrastive": WeightedContrastiveLoss,
    "balanced_contrastive": BalancedContrastiveLoss,
    "npair": NPairLoss,
    "precision_at_k": PrecisionAtKLoss,
    "stable_contrast": StableContrastLoss,
    "robust_hard_contrastive": RobustHardContrastiveLoss,
    "histogram": HistogramLoss,
    "angular": AngularLoss,
    "lifted_structured": LiftedStructuredLoss,
    "binomial_deviance": BinomialDevianceLoss,
    "multi_similarity": MultiSimilarityLoss,
    "circle": CircleLoss,
    "facility_location": FacilityLocationLoss,
    "ddml": DDMLLoss,
    "daml": DAMLLoss,
    "proxy_nca": ProxyNCALoss,
    "proxy_anchor": ProxyAnchorLoss,
    "nt_xent": NTXentLoss,
    "supcon": SupConLoss,
    "vicreg": VICRegLoss,
    "barlow_twins": BarlowTwinsLoss,
    "normalized_softmax": NormalizedSoftmaxLoss,
    "cosface": CosFaceLoss,
    "arcface": ArcFaceLoss,
    "sub_center_arcface": SubCenterArcFaceLoss,
    "soft_triple": SoftTripleLoss,
    "fast_ap": FastAPLoss,
    "pddm": PDDMLoss,
    "hdc": HDCLoss,
    "global": GlobalLoss,
})


def register(name):
    """Class decorator: make a :class:`MetricLoss` subclass a tfdml loss named ``name``.

    It joins :data:`LOSSES` (so ``get(name)``, configs' ``loss.name``, their
    option and sampler checks and ``train.py`` find it) and Keras'
    serialisation registry (so a saved model that uses it loads). Adding a
    loss is then one file with one decorated class::

        @tfdml.losses.register("my_loss")
        class MyLoss(tfdml.losses.MetricLoss):
            def compute(self, targets, embeddings): ...
    """
    return LOSSES.register(name)


def get(identifier, **kwargs):
    """A loss from a short name (:data:`LOSSES`) with ``kwargs``, a serialised
    config dict, or a loss object (returned as is)."""
    if isinstance(identifier, dict):
        return keras.saving.deserialize_keras_object(identifier)
    return LOSSES.build(identifier, **kwargs)


__all__ = [
    "AngularLoss",
    "ArcFaceLoss",
    "BalancedContrastiveLoss",
    "BarlowTwinsLoss",
    "BinomialDevianceLoss",
    "CircleLoss",
    "ContrastiveLoss",
    "CosFaceLoss",
    "DAMLLoss",
    "DDMLLoss",
    "FacilityLocationLoss",
    "FastAPLoss",
    "GlobalLoss",
    "HDCLoss",
    "HardNegativeGenerator",
    "HistogramLoss",
    "InputCheck",
    "LOSSES",
    "LiftedStructuredLoss",
    "MarginLoss",
    "MarginParameters",
    "MetricLoss",
    "MultiSimilarityLoss",
    "NPairLoss",
    "NTXentLoss",
    "NormalizedSoftmaxLoss",
    "PDDMLoss",
    "PrecisionAtKLoss",
    "Proxies",
    "ProxyAnchorLoss",
    "ProxyNCALoss",
    "REDUCTIONS",
    "RobustHardContrastiveLoss",
    "SeedState",
    "SoftTripleLoss",
    "StableContrastLoss",
    "SubCenterArcFaceLoss",
    "SupConLoss",
    "TripletLoss",
    "VICRegLoss",
    "WeightedContrastiveLoss",
    "WeightedSumLoss",
    "get",
    "reduce_tuples",
    "register",
    "select_pairs",
    "triplets_to_pairs",
]
