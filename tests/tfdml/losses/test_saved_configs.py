"""Saved losses load: the Keras configs of losses built with every base argument set
(distance, sampler, seed, tuple_reduction, name, importance) deserialise to the same
loss and serialise back to the same dict, whichever class states those arguments."""

import inspect

import keras
import pytest

import tfdml.losses

SAVED = {'contrastive': {'module': 'tfdml.losses.contrastive',
                 'class_name': 'ContrastiveLoss',
                 'config': {'name': 'c',
                            'reduction': 'sum_over_batch_size',
                            'dtype': 'float32',
                            'distance': 'cosine',
                            'sampler': {'module': 'tfdml.samplers.hard',
                                        'class_name': 'HardSampler',
                                        'config': {},
                                        'registered_name': 'tfdml>HardSampler'},
                            'seed': 3,
                            'tuple_reduction': 'sum',
                            'importance': True,
                            'margin': 0.5,
                            'squared': False},
                 'registered_name': 'tfdml>ContrastiveLoss'},
 'triplet': {'module': 'tfdml.losses.triplet',
             'class_name': 'TripletLoss',
             'config': {'name': 't',
                        'reduction': 'sum_over_batch_size',
                        'dtype': 'float32',
                        'distance': 'euclidean',
                        'sampler': {'module': 'tfdml.samplers.hard',
                                    'class_name': 'HardSampler',
                                    'config': {},
                                    'registered_name': 'tfdml>HardSampler'},
                        'seed': 4,
                        'tuple_reduction': 'sum',
                        'importance': False,
                        'margin': 0.3,
                        'squared': False},
             'registered_name': 'tfdml>TripletLoss'},
 'margin': {'module': 'tfdml.losses.margin',
            'class_name': 'MarginLoss',
            'config': {'name': 'm',
                       'reduction': 'sum_over_batch_size',
                       'dtype': 'float32',
                       'distance': 'euclidean',
                       'sampler': {'module': 'tfdml.samplers.distance_weighted',
                                   'class_name': 'DistanceWeightedSampler',
                                   'config': {'cutoff': 0.5,
                                              'nonzero_loss_cutoff': 1.4,
                                              'lam': None,
                                              'embedding_dim': None},
                                   'registered_name': 'tfdml>DistanceWeightedSampler'},
                       'seed': 5,
                       'tuple_reduction': 'mean',
                       'importance': True,
                       'alpha': 0.1,
                       'beta0': 1.0,
                       'nu': 0.01,
                       'num_classes': 3,
                       'num_examples': 5,
                       'learn_beta0': False},
            'registered_name': 'tfdml>MarginLoss'},
 'stable_contrast': {'module': 'tfdml.losses.stable_contrast',
                     'class_name': 'StableContrastLoss',
                     'config': {'name': 's',
                                'reduction': 'sum_over_batch_size',
                                'dtype': 'float32',
                                'distance': 'euclidean',
                                'sampler': {'module': 'tfdml.samplers.semi_hard',
                                            'class_name': 'SemiHardSampler',
                                            'config': {'fallback': 'hardest_inside'},
                                            'registered_name': 'tfdml>SemiHardSampler'},
                                'seed': 6,
                                'tuple_reduction': 'mean',
                                'importance': False,
                                'alpha': 0.3,
                                'beta': 1.0},
                     'registered_name': 'tfdml>StableContrastLoss'},
 'robust_hard_contrastive': {'module': 'tfdml.losses.robust_hard_contrastive',
                             'class_name': 'RobustHardContrastiveLoss',
                             'config': {'name': 'r',
                                        'reduction': 'sum_over_batch_size',
                                        'dtype': 'float32',
                                        'distance': 'squared_euclidean',
                                        'tuple_reduction': 'sum',
                                        'importance': True,
                                        'alpha': 1.5,
                                        'beta': 0.25},
                             'registered_name': 'tfdml>RobustHardContrastiveLoss'},
 'weighted_contrastive': {'module': 'tfdml.losses.weighted_contrastive',
                          'class_name': 'WeightedContrastiveLoss',
                          'config': {'name': 'w',
                                     'reduction': 'sum_over_batch_size',
                                     'dtype': 'float32',
                                     'distance': 'euclidean',
                                     'tuple_reduction': 'mean',
                                     'importance': False,
                                     'margin': 0.7,
                                     'eta': 2.0},
                          'registered_name': 'tfdml>WeightedContrastiveLoss'},
 'balanced_contrastive': {'module': 'tfdml.losses.balanced_contrastive',
                          'class_name': 'BalancedContrastiveLoss',
                          'config': {'name': 'b',
                                     'reduction': 'sum_over_batch_size',
                                     'dtype': 'float32',
                                     'distance': 'euclidean',
                                     'tuple_reduction': 'mean',
                                     'importance': True,
                                     'margin': 0.7,
                                     'lam': 128.0,
                                     'num_classes': 4},
                          'registered_name': 'tfdml>BalancedContrastiveLoss'}}


@pytest.mark.parametrize("name", sorted(SAVED))
def test_a_saved_config_loads_and_round_trips(name):
    saved = SAVED[name]
    loss = keras.saving.deserialize_keras_object(saved)
    assert type(loss) is tfdml.losses.LOSSES[name]
    again = keras.saving.serialize_keras_object(loss)
    # An argument added since the config was saved serialises at its default.
    defaults = {k: p.default for cls in reversed(type(loss).__mro__) if "__init__" in vars(cls)
                for k, p in inspect.signature(cls.__init__).parameters.items()}
    added = {k: v for k, v in again["config"].items() if k not in saved["config"]}
    assert all(k in defaults and v == defaults[k] for k, v in added.items()), added
    assert {**again, "config": {k: v for k, v in again["config"].items() if k not in added}} == saved
