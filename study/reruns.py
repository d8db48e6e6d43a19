"""Training a finished (arm, seed) of the reproduction again, and what the new result keeps of
the one it replaces.

A result is trained again for one of :data:`REASONS`: it records no data set checksum (made
before provenance was recorded: ``reproduce.py --rerun-unrecorded``), or its git commit ends in
``+dirty`` (trained in a checkout with uncommitted changes, so no commit names its code:
``reproduce.py --verify-provenance``). The runner first sets the result aside
(:func:`set_aside`: a copy ``seed-<s>.replaced`` that names the reason), then trains the seed from
the start; the new result keeps the earlier one's :data:`KEPT_KEYS` as ``replaces``, with the
reason and :func:`compare_figures` of the two runs' metrics. A result replaced twice keeps the
chain (``replaces`` inside ``replaces``).
"""

import json
import os
import shutil

from tfdml import files

UNRECORDED = "no data set checksum"
UNCOMMITTED = "uncommitted code"
#: Why a result is trained again (the value of ``replaces["because"]``).
REASONS = (UNRECORDED, UNCOMMITTED)
#: The key of the copy set aside (and of ``replaces``) that names the reason; a copy or a
#: ``replaces`` without it predates the record and was set aside for :data:`UNRECORDED`.
REASON_KEY = "because"
#: The suffix of the copy of a result kept while it is trained again.
SUFFIX = ".replaced"
#: What the new result keeps of the one it replaces.
KEPT_KEYS = ("metrics", "finished", "seconds", "machine", "provenance", "replaces")

#: How far a figure scored again may sit from the stored one and still be the same: a recomputed
#: floor on the same images, a rerun of the same run on the same data and CPU type (float
#: rounding of the summation order; a different image or label moves the figures far more).
SAME_FIGURES_TOLERANCE = 1e-6

#: The outcomes of :func:`compare_figures`.
IDENTICAL, WITHIN_TOLERANCE, DIFFER = "identical", "within tolerance", "differ"


def figure_differences(stored, now, keys):
    """The keys of ``keys`` whose figure in ``now`` is missing from ``stored`` or further from it
    than :data:`SAME_FIGURES_TOLERANCE`."""
    return [k for k in keys if stored.get(k) is None or abs(stored[k] - now[k]) > SAME_FIGURES_TOLERANCE]


def _numeric(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def compare_figures(earlier, now):
    """How a rerun's metrics ``now`` compare with the ``earlier`` run's, over the numeric metrics
    both record: ``outcome`` :data:`IDENTICAL` (every one bit-identical: the same float64),
    :data:`WITHIN_TOLERANCE` (none further than ``tolerance``, :data:`SAME_FIGURES_TOLERANCE`) or
    :data:`DIFFER`; ``differences``: ``now − earlier`` of each metric that is not bit-identical;
    ``compared``: how many metrics. No metric in common: outcome None."""
    shared = sorted(k for k, v in (earlier or {}).items() if _numeric(v) and _numeric((now or {}).get(k)))
    differences = {k: now[k] - earlier[k] for k in shared if now[k] != earlier[k]}
    if not shared:
        outcome = None
    elif not differences:
        outcome = IDENTICAL
    elif figure_differences(earlier, now, shared):
        outcome = DIFFER
    else:
        outcome = WITHIN_TOLERANCE
    return {"outcome": outcome, "tolerance": SAME_FIGURES_TOLERANCE, "compared": len(shared),
            "differences": differences}


def from_uncommitted_code(result):
    """Whether a result was trained in a checkout with uncommitted changes (its recorded git
    commit ends in ``+dirty``)."""
    commit = (result.get("provenance") or {}).get("git_commit") or ""
    return commit.endswith("+dirty")


def reason_of(record):
    """Why the result a ``replaces`` record (or a set-aside copy) kept was trained again."""
    return record.get(REASON_KEY, UNRECORDED)


def replaced_for(result, reason):
    """The most recent ``replaces`` record of ``result``'s chain set aside for ``reason`` (None:
    none was)."""
    record = result.get("replaces")
    while record:
        if reason_of(record) == reason:
            return record
        record = record.get("replaces")
    return None


def set_aside(arm_dir, seed, reason, needs_rerun):
    """Make ``seed`` of the arm folder ``arm_dir`` train again when ``needs_rerun(result)``: keep
    the result in ``seed-<s>.replaced`` with its ``reason``, then remove it, its run folder and
    its attempts ledger, so the rerun trains from the start and counts only its own time. Returns
    whether it did. A cut at any point is safe to redo: the copy is written first and once, the
    result removed last."""
    if reason not in REASONS:
        raise ValueError(f"unknown reason to train a result again: {reason!r}; one of {REASONS}")
    result_path = os.path.join(arm_dir, f"seed-{seed}.json")
    with open(result_path) as f:
        done = json.load(f)
    if not needs_rerun(done):
        return False
    replaced = os.path.join(arm_dir, f"seed-{seed}{SUFFIX}")
    if not os.path.exists(replaced):
        files.write_json(replaced, {**done, REASON_KEY: reason}, indent=1, sort_keys=True)
    ledger = os.path.join(arm_dir, f"seed-{seed}.attempts")
    if os.path.exists(ledger):
        os.remove(ledger)
    shutil.rmtree(os.path.join(arm_dir, f"seed-{seed}"), ignore_errors=True)
    os.remove(result_path)
    return True


def take_replaced(arm_dir, seed, metrics):
    """The ``replaces`` record of the result of ``seed`` trained now with ``metrics``, from the
    copy :func:`set_aside` kept (None: no copy, the seed was not set aside). The caller removes
    the copy (:func:`drop_replaced`) once the new result is written."""
    path = os.path.join(arm_dir, f"seed-{seed}{SUFFIX}")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        earlier = json.load(f)
    record = {k: earlier[k] for k in KEPT_KEYS if k in earlier}
    record[REASON_KEY] = reason_of(earlier)
    record["figures"] = compare_figures(earlier.get("metrics"), metrics)
    return record


def drop_replaced(arm_dir, seed):
    path = os.path.join(arm_dir, f"seed-{seed}{SUFFIX}")
    if os.path.exists(path):
        os.remove(path)
