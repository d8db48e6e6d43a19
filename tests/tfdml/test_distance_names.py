"""tfdml.distance_names: one table of names, one meaning of each, one check."""

import pytest

from tfdml import distance_names, distances
from tfdml.losses import base as loss_base
from tfdml.metrics import knn
from tfdml.search import entries


def test_every_part_checks_names_with_the_one_check():
    checks = [
        ("distance", distances.get, distance_names.DISTANCES),
        ("distance", loss_base.check_distance, distance_names.DISTANCES),
        ("retrieval distance", knn.check_distance, knn.RETRIEVAL_DISTANCES),
        ("index distance", entries.check_distance, entries.DISTANCES),
    ]
    for what, check, choices in checks:
        assert set(choices) <= set(distance_names.DISTANCES)
        with pytest.raises(ValueError, match=rf"^Unknown {what} 'cosin' \(did you mean 'cosine'\?\); "
                                             rf"choose one of {', '.join(choices)}"):
            check("cosin")
    assert loss_base.check_distance("cosine") == "cosine" == entries.check_distance("cosine")
    with pytest.raises(ValueError, match="so that the loss can be saved"):
        loss_base.check_distance(distances.pairwise_euclidean)


def test_each_name_has_one_measure_and_each_part_says_what_it_reports():
    assert set(distance_names.MEASURES) == set(distance_names.DISTANCES)
    for part, reported in distance_names.REPORTED.items():
        assert set(reported) <= set(distance_names.DISTANCES), part
        for name, formula in reported.items():
            # a distance is reported as measured; a similarity as itself or as 1 - it
            assert formula == "m" or distance_names.is_similarity(name), (part, name)
    assert set(distance_names.REPORTED["search (tfdml.search)"]) == set(entries.DISTANCES)
    assert set(distance_names.REPORTED["retrieval metrics, verification, plots"]) == set(knn.RETRIEVAL_DISTANCES)
