"""Which checks pair runs of different batch designs or data views.

A check pairs its arms by seed: the same seed gives two arms the same initial weights, and
the same batch order when they draw their batches with the same design from the same view
(the training classes and images). Where the design or the view differs (Hong's designs
against each other, γ against γ = 0, the pool against the batch), the seed still pairs the
initial weights but not the batches, so the pairing is by seed number alone.
"""

import json

import reproduction_claims as paper_claims


def setting(arm, arms, view_key):
    """What fixes an arm's batch order besides the seed: its batch design and its data view."""
    spec = arms[arm]
    return json.dumps([spec.get("design"), spec.get(view_key, {})], sort_keys=True)


def pairs_different_settings(check, arms, view_key):
    """Whether a check's arms differ in batch design or data view."""
    return len({setting(arm, arms, view_key) for arm in paper_claims.sides(check)}) > 1


def checks_of(row):
    """The checks of a claim as judged: each check at every point of ``at`` (the end by default)."""
    return [(check, at) for at in (row.get("at") or (None,)) for check in row["checks"]]


def count_different_settings(arms, view_key):
    """(checks pairing different designs or views, every check) over the tested claims."""
    checks = [check for row in paper_claims.CLAIMS if not row.get("untested") for check, _ in checks_of(row)]
    return sum(pairs_different_settings(c, arms, view_key) for c in checks), len(checks)
