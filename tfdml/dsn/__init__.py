"""Learned sampling policy: the deep sampler network of DE-DSP (Duan et al. 2019).

==================================  ===========================================
:mod:`tfdml.dsn.policy`             sampler networks (softmax policy, Eq. 4),
                                    chained selection (Eq. 5, Fig. 2)
:mod:`tfdml.dsn.network`            their input, shared trunk and pairwise
                                    heads (§3.2, §4.2)
:mod:`tfdml.dsn.pool`               a pool's class structure, Gumbel-max
                                    draws
:mod:`tfdml.dsn.reinforce`          REINFORCE objective (Eq. 6–8, footnote 1),
                                    per-tuple scores S = L_emb (Eq. 2, Eq. 9)
:mod:`tfdml.dsn.scoring`            the embedding loss on the selected tuples:
                                    the loss of each kind, per-tuple terms, L_emb
:mod:`tfdml.dsn.model`              :class:`DSNEmbeddingModel`: Algorithm 1 as
                                    a Keras ``train_step`` (``model.fit``)
==================================  ===========================================

Usage::

    from pipelines import designs, sources
    from tfdml import dsn, losses, models

    split = sources.get_source("mnist5k").split("train")
    pools = designs.MPerClassDesign(m=20, classes_per_batch=5).batches(split, seed=0)
    encoder = models.build_encoder(models.small_cnn((28, 28, 1)), embedding_dim=64)
    model = dsn.DSNEmbeddingModel(encoder, sampler="triplet", tuples_per_minibatch=16,
                                  minibatches=4, seed=0)
    model.compile(optimizer="adam", loss=losses.TripletLoss(margin=0.2), dsn_optimizer="adam")
    model.fit(pools, steps_per_epoch=100, epochs=3)
"""

from tfdml.dsn.model import DIAGNOSTICS, DSNEmbeddingModel
from tfdml.dsn.network import SamplerNetwork, cheap_features
from tfdml.dsn.policy import KINDS, NPairChoice, NPairSamplerNetwork, TripletChoice, TripletSamplerNetwork
from tfdml.dsn.pool import pool_structure
from tfdml.dsn.reinforce import reinforce_loss
from tfdml.dsn.scoring import kind_for_loss

__all__ = [
    "DIAGNOSTICS",
    "DSNEmbeddingModel",
    "KINDS",
    "NPairChoice",
    "NPairSamplerNetwork",
    "SamplerNetwork",
    "TripletChoice",
    "TripletSamplerNetwork",
    "cheap_features",
    "kind_for_loss",
    "pool_structure",
    "reinforce_loss",
]
