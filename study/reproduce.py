"""Reproduce the papers' claims on the kanji-fonts benchmark.

    python study/reproduce.py --list
    python study/reproduce.py --claim wu_sampling --seeds 0 1 2
    python study/reproduce.py --claim wu_sampling --budget quick      # the machinery only
    python study/reproduce.py --claim wu_sampling --report            # tables, verdicts, curves
    python study/reproduce.py --wanted                                # the runs the verdicts ask for
    python study/reproduce.py --claim wu_sampling --rerun-unrecorded  # retrain results without a checksum
    python study/reproduce.py --claim wu_sampling --arm margin-dw-b80 --seeds 0 --verify-provenance
                                                                      # retrain a result of uncommitted code
    python study/reproduce.py report                                  # REPORT.md from the JSON
    python study/reproduce.py verify-floor                            # floor.json against the set here

Every claim is relative (A beats B), so each is a set of **arms** (one
training config each) and **checks** (arm A scores higher than arm B). An arm
is trained and evaluated by the user's own command, ``train.py --config``, in
a process of its own: a killed run loses one arm at most, and a rerun resumes
it from its last epoch (train.py's backup) and skips the arms already done.
Each finished (arm, seed) leaves ``<out>/arms/<arm>/seed-<s>.json`` (written
atomically): the config, the final test metrics, the per-epoch curve, the wall
time of every attempt at it (``seed-<s>.attempts`` beside it keeps them: a killed
attempt counts up to its last checkpoint), the machine and its load. An arm shared by several claims (margin with
distance weighted sampling at batch 80, say) is trained once. Several runners may
share one ``--out`` and the same claims (a small network leaves a core idle: two
runners finish sooner than one): each (arm, seed) is locked by the runner training
it (``seed-<s>.runner.lock``), and the others skip it.

The data: the kanji-fonts set of ``study/kanji_fonts.py`` (build it
first), one character per class, one font face per image, an open-set split
by class. The budget fixes a *view* of it, written once as an .npz the ``npz``
source reads: how many training classes (default: all) and a fixed sample of
test classes (chosen by the sha256 of their code points, so the same for
every arm and seed). ``--budget quick`` shrinks classes, steps and the test
sample for a check of the machinery; ``--steps`` / ``--train-classes`` /
``--test-classes`` override one figure. Results of different budgets live in
different folders (``<out>`` defaults to ``study/results/<budget>``,
where the JSON results, ``report.md`` and the curves are committed, and the
run folders and views are ignored by git), and an
existing result whose config differs from the one asked for is refused,
never mixed.

Claims and verdicts: every claim of the papers, run or not, is a row of
:mod:`reproduction_claims` (its checks, or why it is untested); every verdict
comes from one function, :func:`verdicts.judge` (paired by seed, Holm across a
claim's checks, MAP@R; its docstring states the rule). ``--report`` writes
``<out>/report.md``; ``python study/reproduce.py report`` also rewrites the
generated block of the study's report (``study/REPORT.md``) from the committed results, and the
figures its hand-written notes quote (:mod:`note_figures`).

Provenance: a result records the kanji set's checksum and the command that
builds it, the package versions and the git commit; its stored config writes the
results folder as ``$OUT``. A verdict refuses results of two data set versions.
For results older than that record, ``verify-floor`` recomputes the raw-pixel
floor from the set at hand and compares it with the stored ``floor.json`` (the
same figures: the same test images), and the report counts how many of them
were scored on as many test images as that floor. ``--rerun-unrecorded`` and
``--verify-provenance`` train such a result again (:mod:`reruns`: the new result keeps the
earlier one's figures and says whether its metrics came out the same).
"""

import argparse
import collections
import copy
import datetime
import glob
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import textwrap
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE, os.path.join(ROOT, "benchmarks")]

import kanji_fonts  # noqa: E402  (study/kanji_fonts.py)
from arm_parts import design as _design  # noqa: E402  (the parts an arm is built from)
from arm_parts import loss as _loss  # noqa: E402
from arm_parts import merge as _merge  # noqa: E402
from arm_parts import paper_config as _paper_config  # noqa: E402
import machine  # noqa: E402  (benchmarks/machine.py: the machine's description)
import note_figures  # noqa: E402
import pairing  # noqa: E402  (checks pairing different designs or views)
import reproduction_claims as paper_claims  # noqa: E402
import reruns  # noqa: E402  (training a finished run again: what the new result keeps)
import seed_tables  # noqa: E402  (the arms of the seed papers' comparison systems)
import verdicts  # noqa: E402
from reruns import SAME_FIGURES_TOLERANCE, figure_differences  # noqa: E402
from tfdml import files  # noqa: E402  (atomic writes: a temporary file of this writer's own, then a rename)
from tfdml_app.schema import OLD_DESIGN_KEYS  # noqa: E402  (the old layout of a design's parameters)

#: Budgets: steps of training, evaluation points along the way, classes used.
#: ``train_classes`` None = every training class of the set.
#: ``validation``: hold out that fraction of the training classes; each run then keeps its
#: best evaluation by the validation split's MAP@R and scores the test split once, on it.
#: ``wu_scratch`` moves towards Wu et al.'s protocol (§5.1: from scratch, 100 epochs, the best
#: epoch) without reaching it: a quarter of the epochs, not converged; 500 training classes (400 trained, 100 validate, ~19k images),
#: 6,000 steps of batch 80 (about 25 epochs), 24 evaluations.
#: ``protocol``: how the budget runs the papers' experiments, shown with each claim in place of
#: the claim's own protocol line (which describes the standard budget); ``beside_standard``: the
#: committed results of the budget are reported in REPORT.md next to the standard budget's.
BUDGETS = {
    "standard": {"steps": 2000, "evaluations": 8, "train_classes": None, "test_classes": 500},
    "quick": {"steps": 40, "evaluations": 2, "train_classes": 100, "test_classes": 40},
    "wu_scratch": {"steps": 6000, "evaluations": 24, "train_classes": 500, "test_classes": 500,
                   "validation": 0.2, "beside_standard": True,
                   "protocol": "Wu: SOP, from scratch, 100 epochs, the best epoch reported (§5.1); here: 500 "
                               "training classes of the kanji set (400 trained, 100 held out as a validation "
                               "split), 6,000 steps (about 25 epochs at batch 80: 25 epochs, not converged), "
                               "the evaluation of best "
                               "validation MAP@R scored on the test split once"},
}
#: The keys of a budget that are not figures of its runs.
BUDGET_TEXT_KEYS = ("beside_standard", "protocol")


def budget_of(out):
    """The budget whose results ``out`` holds (its folder name, as reproduce.py names it; {}: another)."""
    return BUDGETS.get(os.path.basename(os.path.normpath(out)), {})


#: An arm's key that is not config: how its view of the data differs from the budget's
#: (``imbalance``; ``train_classes``: fewer training classes, the same test classes).
VIEW_KEY = "_view"
#: An arm's key that is not config: it trains this many times the budget's steps
#: (the same number of evaluations, each after that many times the steps).
STEPS_KEY = "_steps_factor"
#: An arm's key that is not config: the cross-batch memory's warm-up as a fraction of the
#: run's steps (``loss.memory.warmup_steps`` is set from it, so every budget keeps the
#: memory off for the same share of training).
WARMUP_KEY = "_memory_warmup"
#: The figures of the raw-pixel floor.
FLOOR_METRICS = ("recall@1", "precision@5", "map@r", "nmi")


# --------------------------------------------------------------------------- arms


def _wu_arms():
    """Wu et al. 2017 §5.1: batches of m = 5 images of n classes (B = 5n), Adam."""
    arms = {}
    losses = {
        "contrastive": _loss("contrastive", margin=1.0, squared=True),
        "triplet_sq": _loss("triplet", margin=0.2, squared=True),
        "triplet": _loss("triplet", margin=0.2, squared=False),
        "margin": _loss("margin", alpha=0.2, beta0=1.2, nu=0.0),
    }
    samplers = {"random": "random", "semi_hard": "semi_hard", "dw": "distance_weighted"}
    for batch in (40, 80, 120):
        for loss, section in losses.items():
            for short, sampler in samplers.items():
                if short == "random" and loss.startswith("triplet"):
                    continue  # "not applicable for triplet losses" (Wu §5.1)
                arms[f"{loss}-{short}-b{batch}"] = _merge(_design(5, batch // 5), section,
                                                           {"loss": {"sampler": sampler}})
    for loss in ("margin", "triplet", "contrastive"):  # the budget probe of (d): 4× the steps
        arms[f"{loss}-dw-b80-x4"] = _merge(arms[f"{loss}-dw-b80"], {STEPS_KEY: 4})
    for beta in (0.8, 1.0, 1.2, 1.4):  # Table 3: a fixed β0, no class term
        arms[f"margin-dw-b80-fixed{beta}"] = _merge(
            _design(5, 16), _loss("margin", "distance_weighted", alpha=0.2, beta0=beta, nu=0.0,
                                  learn_beta0=False, num_classes=None))
    return arms


#: Training images of the fixed sample on which Hong's objective is scored (Fig. 2):
#: all 4.2 M ordered pairs of 2,048 images at every evaluation.
OBJECTIVE_SAMPLE = 2048


#: The perturbations δ of Hong et al.'s Fig. 1 run here besides δ = 1 (IS) and δ = 0 (no IS).
HONG_DELTAS = (-1.0, 0.5, 2.0)
#: λ of Hong et al.'s Fig. 4 (2^0 to 2^13 in the paper) run here besides λ = 256 (every other arm's):
#: both ends and the edges of the range 128–512 the paper finds near the maximum.
HONG_LAMBDAS = (1, 128, 512, 8192)


def _hong_arms():
    """Hong et al. §6: balanced contrastive (λ = 256, lr ×0.9 every 100 steps),
    with (IS) and without (no IS) importance weights.

    §6.1 designs (Table 1): (m, n)-group with m·n = 64 (2,016 unordered pairs per
    batch) and p-random with p = 0.9, 0.5, 0.1. Hong give p-random the same 2,016 pairs (4,032 images per
    batch, 63× the images of a group batch); at our budget p-random gets 64
    pairs (128 images), so compare p-random with and without IS, not p-random
    with group.

    §6.3 (Fig. 2): the traditional contrastive loss (Eq. 5, every pair of the batch, the
    balanced arms' margin), with and without IS, on the (4, 16)-group design, scoring the
    objective (10) on a training sample; the same with the balanced loss.

    §6.4 imbalance (Fig. 3): (4, 16)-group on a training split where each class
    keeps a fraction 1 − u_c of its images, u_c uniform on [0, γ] (at least 4
    kept, so that every class stays in the design)."""
    arms = {}
    loss = _loss("balanced_contrastive", margin=1.0, lam=256.0)
    traditional = _loss("contrastive", "by_loss", margin=1.0, squared=True)
    schedule = {"optimizer": {"schedule": "exponential_decay", "decay_rate": 0.9, "decay_steps": 100}}
    for importance in (True, False):
        tag = "is" if importance else "nois"
        options = {"loss": {"options": {"importance": importance}}}
        for m, n in ((2, 32), (4, 16), (8, 8), (16, 4), (32, 2)):
            arms[f"balanced-group{m}x{n}-{tag}"] = _merge(
                {"design": {"name": "group", "options": {"m": m, "n": n}}}, loss, options, schedule)
        for p in (0.9, 0.5, 0.1):
            arms[f"balanced-prandom{p}-{tag}"] = _merge(
                {"design": {"name": "p_random", "options": {"p": p, "pairs": 64}}}, loss, options, schedule)
        # Fig. 2: the same (4, 16)-group runs, also scoring the objective on a training sample.
        for name, section in (("balanced", loss), ("contrastive", traditional)):
            arms[f"{name}-group4x16-{tag}-fig2"] = _merge(
                {"design": {"name": "group", "options": {"m": 4, "n": 16}}}, section, options, schedule,
                {"evaluation": {"objective_sample": OBJECTIVE_SAMPLE}})
        # Investigation of (2, 32) with IS, which trails no IS on MAP@R: a smaller λ (more weight on
        # the positive pairs in Eq. 10) with the same weights.
        if importance:
            for lam in (16, 64):
                arms[f"balanced-group2x32-is-lam{lam}"] = _merge(
                    {"design": {"name": "group", "options": {"m": 2, "n": 32}}}, loss, options, schedule,
                    {"loss": {"options": {"lam": float(lam)}}})
        # Investigation of p = 0.9: 64 pairs hold 6.4 negative pairs on average (Hong: 2,016
        # pairs, about 200), so the IS estimate rests on a handful of heavily weighted pairs.
        arms[f"balanced-prandom0.9-pairs256-{tag}"] = _merge(
            {"design": {"name": "p_random", "options": {"p": 0.9, "pairs": 256}}}, loss, options, schedule)
        # §6.2, Fig. 1: the weights perturbed to W^δ (δ = 1: the IS arm, δ = 0: the no-IS arm).
        if importance:
            for m, n in ((4, 16), (32, 2)):
                for delta in HONG_DELTAS:
                    arms[f"balanced-group{m}x{n}-is-delta{delta}"] = _merge(
                        {"design": {"name": "group", "options": {"m": m, "n": n}}}, loss, options, schedule,
                        {"loss": {"options": {"importance_power": delta}}})
            # §6.5, Fig. 4: λ on the paper's (4, 16)-group design, with IS.
            for lam in HONG_LAMBDAS:
                arms[f"balanced-group4x16-is-lam{lam}"] = _merge(
                    {"design": {"name": "group", "options": {"m": 4, "n": 16}}}, loss, options, schedule,
                    {"loss": {"options": {"lam": float(lam)}}})
        for gamma in (0.5, 0.9):
            arms[f"balanced-group4x16-imbalance{gamma}-{tag}"] = _merge(
                {"design": {"name": "group", "options": {"m": 4, "n": 16}}}, loss, options, schedule,
                {VIEW_KEY: {"imbalance": gamma}})
    return arms


#: (m, n) of the pool the learned sampler picks from in Duan's setting (Duan: ~100 × 100).
POOL_DESIGN = (8, 40)


def _lu_duan_arms():
    """Lu et al. 2019: ℓ_k (k = 5, γ = 0.1, top-k misplaced sets) against the triplet
    loss with semi-hard and distance weighted sampling, all with m = 10 images of
    8 classes (ℓ_k needs more than k positives per anchor; Lu use m = 11).
    Duan et al. 2019: the triplet loss with the learned sampler (DE-DSP), at
    Wu's batch 80 (5 × 16), against the same loss's semi-hard arm and random triplets
    at the learned arm's tuples per step; the N-pair loss with and without the N-pair
    DSN (20 classes × 4)."""
    lu = _design(10, 8)
    triplet = {short: _loss("triplet", sampler, margin=0.2, squared=False) for short, sampler in (
        ("random", "random_triplets"), ("hard", "hard"), ("semi_hard", "semi_hard"), ("dw", "distance_weighted"))}
    # 20 classes × 4: two N-pair tuples per class; embeddings as configs/npair.yaml had them when
    # these arms ran (not L2-normalised; the config now normalises them: RUN_WITH).
    npair = _merge(_design(4, 20), _paper_config("npair"), RUN_WITH["npair"])
    return {
        "npair-m4": npair,
        # Duan's N-pair DSN (Fig. 2 (b)): K = 4 mini-batches of N-pair tuples drawn by the policy.
        "npair-learned-m4": _merge(npair, {"learned_sampler": {
            "minibatches": 4, "learning_rate": 0.001, "pretrain_steps": 0, "diagnostics": True}}),
        "precision_at_k-m10": _merge(lu, _loss("precision_at_k", "top_k", k=5, gamma=0.1)),
        # Lu's four baselines (§4.5): uniform (one uniform negative per positive pair, the
        # triplets per step of semi-hard and DW), hard, semi-hard and distance weighted.
        **{f"triplet-{short}-m10": _merge(lu, section) for short, section in triplet.items()},
        "triplet-learned-b80": _learned_b80(pretrain_steps=0),
        # Duan's "random" row (Table 3): uniformly drawn triplets at the learned arm's 64 tuples a step.
        "triplet-random-b80-t64": _merge(_design(5, 16), triplet["random"],
                                         {"loss": {"sampler_options": {"num_triplets": 64}}}),
        # Investigations of duan_dsn: Algorithm 1, line 2 pre-trains the DSN before the
        # loop; Duan draw 4 mini-batches of 30 tuples at batch 120, 80 tuples at batch 80.
        "triplet-learned-b80-pretrain200": _learned_b80(pretrain_steps=200),
        "triplet-learned-b80-t20": _learned_b80(pretrain_steps=0, tuples=20),
        # Duan's setting (§1, §3.2, §4.2): the policy, a conv network on the images, picks from
        # a pool larger than a mining batch (here 40 classes × 8 = 320 images), pre-trained;
        # random triplets from the same pool at the same 64 tuples a step.
        # Both record whether the policy collapses (tfdml.dsn.DIAGNOSTICS in their history).
        "triplet-learned-pool320-pretrain200": _learned_b80(pretrain_steps=200, design=POOL_DESIGN,
                                                            trunk="conv", diagnostics=True),
        # The same conv policy picking from the batch of 80: the pool against the batch.
        "triplet-learned-b80-pretrain200-conv": _learned_b80(pretrain_steps=200, trunk="conv", diagnostics=True),
        "triplet-random-pool320-t64": _merge(_design(*POOL_DESIGN), triplet["random"],
                                             {"loss": {"sampler_options": {"num_triplets": 64}}}),
    }


def _learned_b80(pretrain_steps, tuples=16, design=(5, 16), trunk=None, diagnostics=False):
    """The triplet loss with the learned sampler (DE-DSP) at batch 80 (5 × 16; or another
    ``design`` (m, n)): K = 4 DSN mini-batches of ``tuples`` tuples, ``pretrain_steps``
    pools of DSN pre-training, the DSN's ``trunk`` (None: the network's default) and,
    with ``diagnostics``, the policy's entropy and picked loss against the uniform policy
    in the run's history (``tfdml.dsn.DIAGNOSTICS``)."""
    options = {"tuples_per_minibatch": tuples, "minibatches": 4, "learning_rate": 0.001,
               "pretrain_steps": pretrain_steps}
    if trunk is not None:
        options["trunk"] = trunk
    if diagnostics:
        options["diagnostics"] = True
    return _merge(_design(*design), _loss("triplet", margin=0.2, squared=False), {"learned_sampler": options})


#: Batch of the XBM arms: the (4, 16)-group design, the one design whose batches give the
#: memory's importance weights (independent batches), for every XBM arm alike.
XBM_DESIGN = {"design": {"name": "group", "options": {"m": 4, "n": 16}}}
#: Memory sizes of the XBM arms (0: no memory), multiples of the batch (64) as the importance
#: weights need; the largest fills within the quick budget after its warm-up.
XBM_SIZES = (0, 256, 1024)
#: The memory's warm-up, a fraction of the run (Wang et al. start the memory after a warm-up:
#: the first embeddings drift fast).
XBM_WARMUP = 0.25


def _xbm_arms():
    """Wang et al. 2020 (XBM): the loss of configs/xbm_contrastive_memory.yaml (ℓ2 contrastive
    on cosine distances, margin 0.5: positives 1 − S, negatives [S − 0.5]_+, every pair) with a
    memory of K = 0, 256 and 1024 embeddings, without and with the importance weights of the
    memory (``importance: true``), and the multi-similarity loss with its miner without and
    with the largest memory. All on the (4, 16)-group design."""
    contrastive = _loss("contrastive", margin=0.5, squared=False, distance="cosine")
    contrastive["loss"]["sampler"] = "by_loss"
    losses = {"contrastive": contrastive, "contrastive-is": _merge(contrastive, {"loss": {"options": {
        "importance": True}}}), "multi_similarity": _loss("multi_similarity", "multi_similarity")}
    arms = {}
    for name, section in losses.items():
        for size in XBM_SIZES:
            if name == "multi_similarity" and size not in (0, XBM_SIZES[-1]):
                continue
            memory = {"loss": {"memory": {"size": size}}, WARMUP_KEY: XBM_WARMUP} if size else {}
            arms[f"xbm-{name}-mem{size}"] = _merge(XBM_DESIGN, section, memory)
    return arms


#: Settings an arm keeps from its paper's config as the config was when the arm's results
#: were trained, where the config has changed since: the N-pair config now L2-normalises the
#: embeddings (it did not), the lifted-structured config no longer does (it did). Rerunning
#: those arms' seeds at the configs' current settings would drop these.
RUN_WITH = {"npair": {"model": {"normalize": False}}, "lifted_structured": {"model": {"normalize": True}}}

#: The other losses of Wu et al.'s Table 4 and Lu et al.'s Table 1, each from its paper's config.
LOSS_TABLE_CONFIGS = {"histogram": "ustinova_histogram", "binomial_deviance": "binomial_deviance",
                      "lifted_structured": "song_lifted_structured", "npair": "npair",
                      "angular": "wang_angular", "proxy_nca": "proxy_nca"}


#: Training classes of the Proxy NCA comparison (CUB's 100, Lu's data set). With every training
#: class of the kanji set (3,129), the budget's 2,000 steps of 80 images are about one epoch: a
#: class, and its proxy's pull, comes up in ~5 batches, and Proxy NCA stayed near chance (MAP@R
#: 0.04, below raw pixels). With 100 classes a class comes up in ~160 batches (~33 epochs), as
#: in the papers' training of proxies; ℓ_k is trained on the same 100 classes for its check.
PROXY_TRAIN_CLASSES = 100


def _loss_table_arms():
    """The systems Wu et al.'s Table 4 (SOP) and Lu et al.'s Table 1 (CUB) compare against,
    each loss with its paper's hyper-parameters (``configs/``; :data:`LOSS_TABLE_CONFIGS`):
    Wu's at Wu's batch 80 (5 × 16; N-pair: 40 classes × 2, Sohn's N pairs), Lu's at Lu's
    10 × 8 design, beside the margin (Wu) and ℓ_k (Lu) arms they are compared with;
    Proxy NCA and ℓ_k on :data:`PROXY_TRAIN_CLASSES` training classes."""
    section = {name: _merge(_paper_config(config), RUN_WITH.get(name, {}))
               for name, config in LOSS_TABLE_CONFIGS.items()}
    arms = {}
    for name in ("histogram", "binomial_deviance", "lifted_structured", "npair"):
        design = _design(2, 40) if name == "npair" else _design(5, 16)
        arms[f"{name}-b80"] = _merge(design, section[name])
    arms["contrastive-all-m10"] = _merge(_design(10, 8), _loss("contrastive", "all", margin=1.0, squared=True))
    for name in ("lifted_structured", "npair", "angular"):
        arms[f"{name}-m10"] = _merge(_design(10, 8), section[name])
    fewer = {VIEW_KEY: {"train_classes": PROXY_TRAIN_CLASSES}}
    arms[f"proxy_nca-m10-c{PROXY_TRAIN_CLASSES}"] = _merge(_design(10, 8), section["proxy_nca"], fewer)
    arms[f"precision_at_k-m10-c{PROXY_TRAIN_CLASSES}"] = _merge(_lu_duan_arms()["precision_at_k-m10"], fewer)
    return arms


ARMS = {**_wu_arms(), **_hong_arms(), **_lu_duan_arms(), **_xbm_arms(), **_loss_table_arms()}
ARMS.update(seed_tables.arms(ARMS))  # the seed papers' comparison systems, beside the arms they meet


# --------------------------------------------------------------------------- experiments

#: Each experiment (``--claim``): the arms it trains for the claims of
#: :mod:`reproduction_claims` that name it, the paper's figures for the arms
#: (``metric``: the paper's metric, R@1 or P@5, in %), and the arms whose curves
#: are drawn thick. The checks and verdicts live in the claims table only.
CLAIMS = {
    "wu_sampling": {
        "source": "Wu et al. 2017, Table 1 (SOP, batch 80, R@1 %) and Fig. 6",
        "metric": "recall@1",
        "paper": {"contrastive-random-b80": 30.1, "margin-random-b80": 37.5,
                  "contrastive-semi_hard-b80": 49.4, "triplet_sq-semi_hard-b80": 49.7,
                  "triplet-semi_hard-b80": 47.4, "margin-semi_hard-b80": 61.0,
                  "contrastive-dw-b80": 39.2, "triplet_sq-dw-b80": 53.4, "triplet-dw-b80": 54.5,
                  "margin-dw-b80": 61.7},
        "curves": ["margin-dw-b80", "triplet-semi_hard-b80", "contrastive-random-b80"],  # Fig. 6
    },
    "wu_batch_size": {
        "source": "Wu et al. 2017, Table 2 (SOP, R@1 %)",
        "metric": "recall@1",
        "paper": {"triplet-semi_hard-b40": 44.3, "triplet-dw-b40": 52.9, "margin-random-b40": 41.9,
                  "margin-semi_hard-b40": 60.7, "margin-dw-b40": 61.1,
                  "triplet-semi_hard-b80": 47.4, "triplet-dw-b80": 54.5, "margin-random-b80": 37.5,
                  "margin-semi_hard-b80": 61.0, "margin-dw-b80": 61.7,
                  "triplet-semi_hard-b120": 48.8, "triplet-dw-b120": 54.7, "margin-random-b120": 37.7,
                  "margin-semi_hard-b120": 59.6, "margin-dw-b120": 60.5},
    },
    "wu_beta": {
        "source": "Wu et al. 2017, Table 3 (SOP, pre-trained, 8k iterations, R@1 %)",
        "metric": "recall@1",
        "paper": {"margin-dw-b80-fixed0.8": 61.3, "margin-dw-b80-fixed1.0": 70.4,
                  "margin-dw-b80-fixed1.2": 71.1, "margin-dw-b80-fixed1.4": 67.1, "margin-dw-b80": 72.7},
    },
    "hong_designs": {
        "source": "Hong et al., Table 1 (CUB200, balanced contrastive, R@1 %)",
        "metric": "recall@1",
        "paper": {"balanced-group2x32-nois": 51.55, "balanced-group2x32-is": 52.48,
                  "balanced-group4x16-nois": 49.75, "balanced-group4x16-is": 53.02,
                  "balanced-group8x8-nois": 46.00, "balanced-group8x8-is": 53.31,
                  "balanced-group32x2-nois": 31.65, "balanced-group32x2-is": 46.12,
                  "balanced-prandom0.9-nois": 18.32, "balanced-prandom0.9-is": 52.75,
                  "balanced-prandom0.1-nois": 46.32, "balanced-prandom0.1-is": 52.99},
        "curves": ["balanced-group4x16-is", "balanced-group4x16-nois"],
    },
    "hong_objective": {
        "source": "Hong et al. §6.3, Fig. 2 with the traditional contrastive loss, as the paper, and with the "
                  "balanced one ((4,16)-group, the loss (10) on a fixed sample of 2,048 training images at each "
                  "evaluation)",
        "metric": "recall@1",
        "paper": {},
        "curves": ["contrastive-group4x16-is-fig2", "contrastive-group4x16-nois-fig2",
                   "balanced-group4x16-is-fig2", "balanced-group4x16-nois-fig2"],
        "curve_metric": "train_objective",
    },
    "hong_perturbation": {
        "source": "Hong et al., Fig. 1 (CUB200, balanced contrastive with IS, the weights perturbed to W^δ, R@1 "
                  "vs δ)",
        "metric": "recall@1",
        "paper": {},
    },
    "hong_lambda": {
        "source": "Hong et al., Fig. 4 (SOP, balanced contrastive with IS, (4,16)-group, R@1 vs λ from 2^0 to "
                  "2^13)",
        "metric": "recall@1",
        "paper": {},
        "curves": ["balanced-group4x16-is"] + [f"balanced-group4x16-is-lam{lam}" for lam in HONG_LAMBDAS],
    },
    "hong_imbalance": {
        "source": "Hong et al., Fig. 3 (CUB200, balanced contrastive, (4,16)-group, R@1 vs γ)",
        "metric": "recall@1",
        "paper": {},
    },
    "lu_topk": {
        "source": "Lu et al. 2019, Table 1 (CUB200, P@5 %)",
        "metric": "precision@5",
        "paper": {"precision_at_k-m10": 55.52, "triplet-semi_hard-m10": 49.73, "triplet-dw-m10": 51.74,
                  "triplet-random-m10": 40.65, "triplet-hard-m10": 49.57},
    },
    "duan_npair": {
        "source": "Duan et al. 2019, Tables 1–2 (N-pair and DE-DSP (N-pair))",
        "metric": "recall@1",
        "paper": {},
    },
    "wu_losses": {
        "source": "Wu et al. 2017, Table 4 (SOP, R@1 %)",
        "metric": "recall@1",
        "paper": {"histogram-b80": 63.9, "binomial_deviance-b80": 65.5, "triplet-semi_hard-b80": 66.7,
                  "lifted_structured-b80": 62.5, "npair-b80": 67.7, "margin-dw-b80": 72.7},
    },
    "lu_losses": {
        "source": "Lu et al. 2019, Table 1 (CUB200, P@5 %)",
        "metric": "precision@5",
        "paper": {"contrastive-all-m10": 38.59, "lifted_structured-m10": 43.35, "npair-m10": 48.08,
                  "angular-m10": 49.44, "proxy_nca-m10-c100": 47.18, "precision_at_k-m10": 55.52,
                  "precision_at_k-m10-c100": 55.52},
    },
    "duan_dsn": {
        "source": "Duan et al. 2019, Table 3 (Cars196, triplet loss, R@1 %)",
        "metric": "recall@1",
        "paper": {"triplet-semi_hard-b80": 52.4, "triplet-learned-b80": 59.3, "triplet-random-b80-t64": 45.1},
    },
    "hong_prandom_pairs": {
        "source": "investigation of hong_t1_is: Hong et al. §6.1 (p-random with 2,016 pairs per batch; "
                  "ours has 64 at the common budget)",
        "metric": "recall@1",
        "paper": {},
    },
    "hong_lambda_2x32": {
        "source": "investigation of hong_t1_is: (2, 32)-group, where IS trails no IS on MAP@R (λ = 256 is "
                  "Hong's value, chosen on R@1, Fig. 4)",
        "metric": "recall@1",
        "paper": {},
    },
    "wu_margin_budget": {
        "source": "investigation of wu_t1_d: the three losses with distance weighted sampling at 4× the steps "
                  "(8,000)",
        "metric": "recall@1",
        "paper": {},
        "curves": ["margin-dw-b80-x4", "triplet-dw-b80-x4", "contrastive-dw-b80-x4"],
    },
    "duan_dsn_causes": {
        "source": "investigation of duan_t3_semi: Duan et al. 2019, Algorithm 1 line 2 (DSN pre-training) "
                  "and §5 (4 mini-batches of 30 tuples at batch 120)",
        "metric": "recall@1",
        "paper": {},
        "curves": ["triplet-learned-b80-pretrain200", "triplet-learned-b80-t20", "triplet-learned-b80"],
    },
    "duan_paper_setting": {
        "source": "investigation of duan_t3_random: Duan et al. 2019 §1, §4.2 (the policy picks tuples from a "
                  "pool larger than a batch) and Algorithm 1 line 2 (pre-training)",
        "metric": "recall@1",
        "paper": {},
        "curves": ["triplet-learned-pool320-pretrain200", "triplet-random-pool320-t64"],
    },
    "xbm_memory": {
        "source": "Wang et al. 2020, XBM (memory size; contrastive and multi-similarity with and without the "
                  "memory); with importance weights: tfdml.importance.memory_pair_weights",
        "metric": "recall@1",
        "paper": {},
        "curves": [f"xbm-contrastive-mem{size}" for size in XBM_SIZES],
    },
    **seed_tables.EXPERIMENTS,
}


def claim_arms(claim):
    """The arms of an experiment: the paper's, those its claims' checks read, the curves'."""
    spec = CLAIMS[claim]
    names = list(spec["paper"])
    for row in paper_claims.rows_of(claim):
        for check in row["checks"]:
            names += paper_claims.sides(check)
    names += spec.get("curves", [])
    return list(dict.fromkeys(names))


# --------------------------------------------------------------------------- data view


def _class_order(codepoints):
    """Code points sorted by sha256("U+XXXX"): a fixed, well-mixed order."""
    return sorted(codepoints, key=lambda c: hashlib.sha256(kanji_fonts.class_name(c).encode()).digest())


def data_set_checksum(data_dir):
    """The checksum of the kanji set at ``data_dir`` (its manifest's; None without a manifest)."""
    path = os.path.join(data_dir, kanji_fonts.MANIFEST_NAME)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f).get("checksum")


def kanji_set(data=None):
    """The folder of the kanji-fonts set: ``data`` (a ``--data`` argument) or kanji_fonts.py's
    cache folder; exits naming the command that builds it when the set is not there."""
    data_dir = data or kanji_fonts.default_out(32)
    if not os.path.exists(os.path.join(data_dir, kanji_fonts.NPZ_NAME)):
        sys.exit(f"No kanji-fonts set at {data_dir}; build it first: python study/kanji_fonts.py "
                 "(see its docstring for the fonts to install), or give --data.")
    return data_dir


def add_probe_arguments(parser):
    """``--data`` and ``--out`` of a script that probes a budget's results (probe_*.py)."""
    parser.add_argument("--data", help="the kanji-fonts set (default: kanji_fonts.py's cache folder)")
    parser.add_argument("--out", help="results folder of the budget (default study/results/<budget>)")


def probe_folders(args):
    """(results folder, kanji-set folder) of :func:`add_probe_arguments`' arguments and ``args.budget``."""
    out = os.path.abspath(args.out or os.path.join(HERE, "results", args.budget))
    return out, kanji_set(args.data)


def make_view(data_dir, out, train_classes, test_classes, imbalance=0.0):
    """The budget's view of the set as an .npz for the ``npz`` source (written once).

    ``imbalance`` γ > 0 (Hong et al. §6.4): each training class c keeps its
    first max(4, ceil(N_c (1 − u_c))) images, u_c uniform on [0, γ], drawn
    from a generator seeded by the class's code point (the same for every
    arm and seed). The view records the checksum of the set it was cut from
    and is not reused for another version of the set."""
    name = f"view-train{train_classes or 'all'}-test{test_classes}"
    name += f"-imbalance{imbalance}.npz" if imbalance else ".npz"
    path = os.path.join(out, name)
    checksum = data_set_checksum(data_dir)
    if os.path.exists(path):
        with np.load(path) as view:
            cut_from = str(view["data_checksum"]) if "data_checksum" in view.files else ""
        if cut_from and checksum and cut_from != checksum:
            sys.exit(f"{path} was cut from another version of the kanji set (checksum {cut_from[:12]}…; the set at "
                     f"{data_dir} has {checksum[:12]}…): results of two versions are never mixed; use another --out.")
        return path
    data = kanji_fonts.load_npz(data_dir)
    codes, test = data["codepoints"], data["test"]
    keep_test = _class_order(np.unique(codes[test]).tolist())[:test_classes]
    keep_train = np.unique(codes[~test]).tolist()
    if train_classes:
        keep_train = _class_order(keep_train)[:train_classes]
    keep = np.isin(codes, keep_train + keep_test)
    if imbalance:
        for code in keep_train:
            members = np.flatnonzero(codes == code)
            u = np.random.default_rng(int(code)).uniform(0.0, imbalance)
            keep[members[max(4, math.ceil(len(members) * (1.0 - u))):]] = False
    # Runners sharing --out may cut the same view at once: each writes its own temporary file.
    with files.atomic_path(path) as tmp:
        np.savez(tmp, images=data["images"][keep], labels=codes[keep], test=test[keep],
                 data_checksum=np.array(checksum or ""))
    return path


def view_of(arm, data_dir, out, budget):
    """The view an arm trains and is scored on: the budget's, changed by the arm's :data:`VIEW_KEY`."""
    view = {"train_classes": budget["train_classes"], **ARMS[arm].get(VIEW_KEY, {})}
    return make_view(data_dir, out, test_classes=budget["test_classes"], **view)


def evaluate_cli():
    """The evaluation of the user's ``evaluate.py`` (:mod:`tfdml_app.evaluation`: its
    scoring is the one every arm is scored with)."""
    from tfdml_app import evaluation

    return evaluation


def view_test_split(view):
    """The test split of a view (the ``npz`` source, as the arms' configs read it)."""
    from pipelines import sources

    return sources.npz(path=view, labels="labels", test="test").split("test")


def view_checksum(view):
    """The checksum of the set a view was cut from (None: not recorded)."""
    with np.load(view) as data:
        return (str(data["data_checksum"]) or None) if "data_checksum" in data.files else None


def score_raw_pixels(view):
    """The raw-pixel floor of a view: R@1, P@5, MAP@R and NMI of L2-normalised raw pixels on
    its test classes (the same images every arm is scored on), with the checksum of the set
    the view was cut from."""
    split = view_test_split(view)
    values = evaluate_cli().baseline_metrics("raw_pixels", split, ["recall", "precision@5", "map@r", "nmi"], [1],
                                       batch_size=1024)
    return {"view": os.path.basename(view), "classes": int(split.num_classes),
            "images": int(split.num_examples),
            "metrics": {k: float(values[k]) for k in FLOOR_METRICS}, "data_checksum": view_checksum(view)}


def read_floor(out):
    """``<out>/floor.json`` (None before the first run)."""
    path = os.path.join(out, "floor.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def raw_pixel_floor(view, out):
    """:func:`score_raw_pixels` of the view, cached in ``<out>/floor.json`` and not
    reused for another version of the set."""
    checksum = view_checksum(view)
    floor = read_floor(out)
    if floor is not None:
        if floor.get("data_checksum") and checksum and floor["data_checksum"] != checksum:
            sys.exit(f"{os.path.join(out, 'floor.json')} was scored on another version of the kanji set; "
                     "use another --out.")
        return floor
    floor = score_raw_pixels(view)
    _write_json(os.path.join(out, "floor.json"), floor)
    return floor


def floor_differences(stored, recomputed):
    """What differs between a stored floor and one recomputed (empty: the same test images,
    every figure within :data:`SAME_FIGURES_TOLERANCE`)."""
    differences = [f"{key} {stored.get(key)} vs {recomputed[key]}" for key in ("classes", "images")
                   if stored.get(key) != recomputed[key]]
    for metric in figure_differences(stored["metrics"], recomputed["metrics"], FLOOR_METRICS):
        differences.append(f"{metric} {stored['metrics'].get(metric)} vs {recomputed['metrics'][metric]:.9f}")
    return differences


def verify_floor(view, out):
    """Recompute the floor of ``<out>`` from the view and compare: the stored floor was scored
    on these test images when every figure matches. A floor that predates the checksum record
    and matches gets the checksum of the set it was recomputed from, with how it was verified.
    Returns the differences (empty: verified)."""
    stored = read_floor(out)
    if stored is None:
        sys.exit(f"No floor.json in {out}: nothing to verify (a run writes it).")
    recomputed = score_raw_pixels(view)
    differences = floor_differences(stored, recomputed)
    if not differences and not stored.get("data_checksum") and recomputed["data_checksum"]:
        stored["data_checksum"] = recomputed["data_checksum"]
        stored["data_checksum_verified"] = (
            f"recorded by `reproduce.py verify-floor` on {datetime.date.today():%Y-%m-%d}: the floor recomputed "
            f"from the set with this checksum, every figure within {SAME_FIGURES_TOLERANCE:g}")
        _write_json(os.path.join(out, "floor.json"), stored)
    return differences


# --------------------------------------------------------------------------- configs and runs


def arm_config(arm, seed, view, budget, run_dir):
    """The train.py config of one (arm, seed) under a budget."""
    evaluations = max(1, min(budget["evaluations"], budget["steps"]))
    steps_per_epoch = max(1, budget["steps"] // evaluations) * ARMS[arm].get(STEPS_KEY, 1)
    base = {
        "seed": seed,
        "output_dir": run_dir,
        "data": {"source": "npz", "options": {"path": view, "labels": "labels", "test": "test"}},
        "image": {"augment": False},
        # float32 on every CPU: the study's arms must not change precision with the machine.
        "model": {"backbone": "small_cnn", "embedding_dim": 128, "normalize": True, "dtype_policy": "float32"},
        "optimizer": {"name": "adam", "learning_rate": 0.001},
        "training": {"epochs": evaluations, "steps_per_epoch": steps_per_epoch},
        "evaluation": {"metrics": ["recall", "precision@5", "map@r", "nmi"], "ks": [1], "every_n_epochs": 1,
                       "batch_size": 1024},
    }
    if budget.get("validation"):
        base["data"]["validation"] = {"fraction": budget["validation"], "mode": "classes"}
    config = _merge(base, {k: v for k, v in ARMS[arm].items() if k not in (VIEW_KEY, STEPS_KEY, WARMUP_KEY)})
    if WARMUP_KEY in ARMS[arm]:
        steps = evaluations * steps_per_epoch
        config["loss"]["memory"]["warmup_steps"] = int(round(ARMS[arm][WARMUP_KEY] * steps))
    return config


def config_key(config):
    """What must match for a stored result to count. The results folder may move
    (another checkout, another machine): the output folder and the folder of the
    view do not count, the view's name (budget, classes, imbalance) does."""
    config = copy.deepcopy(config)
    config.pop("output_dir", None)
    # Results stored before the designs took their parameters under design.options hash the
    # old layout (design.m, design.n, ... beside design.name): the same settings, one key.
    # The same for the learned sampler, written as loss.sampler "learned" with its options in
    # loss.sampler_options before it had the learned_sampler section.
    design = config.get("design", {})
    if set(design.get("options", {})) <= set(OLD_DESIGN_KEYS):
        design.update(design.pop("options", {}))
    loss = config.get("loss", {})
    if "learned_sampler" in config:
        loss["sampler"], loss["sampler_options"] = "learned", config.pop("learned_sampler")
    # Results stored before the arms named their dtype policy ran float32.
    if config.get("model", {}).get("dtype_policy") == "float32":
        del config["model"]["dtype_policy"]
    options = config.get("data", {}).get("options", {})
    if "path" in options:
        options["path"] = os.path.basename(options["path"])
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def _write_json(path, value):
    files.write_json(path, value, indent=1, sort_keys=True)


def _read_history(run_dir):
    import csv

    path = os.path.join(run_dir, "history.csv")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [{k: float(v) if v not in ("", None) else None for k, v in row.items()} for row in csv.DictReader(f)]


def _last_write(folder):
    """The latest modification time of anything in ``folder`` (None when it is missing or empty)."""
    latest = None
    for here, _, names in os.walk(folder):
        for name in names:
            try:
                stamp = os.stat(os.path.join(here, name)).st_mtime
            except OSError:  # removed meanwhile
                continue
            latest = stamp if latest is None else max(latest, stamp)
    return latest


def _read_ledger(path):
    """``(key, attempts)`` of a ledger; ``(None, [])`` when there is none."""
    if not os.path.exists(path):
        return None, []
    with open(path) as f:
        ledger = json.load(f)
    return ledger.get("config_key"), ledger["attempts"]


def begin_attempt(ledger, run_dir, key, now=None):
    """Open a new attempt in the ledger of a run's attempts (``{"start", "end"}`` each),
    which belongs to one config ``key``: the attempts of another config (a run folder the
    user deleted to train another one) are dropped, not counted.

    An earlier attempt left open was killed (the machine stopped, say): it ends at the
    last write into the run folder, its last checkpoint, so the work it lost after
    that is not counted. Written atomically."""
    now = time.time() if now is None else now
    owner, attempts = _read_ledger(ledger)
    if owner != key:
        attempts = []
    if attempts and attempts[-1]["end"] is None:  # only the last can be open: each begin closes it
        start, last = attempts[-1]["start"], _last_write(run_dir)
        attempts[-1]["end"] = start if last is None else min(max(last, start), now)
    attempts.append({"start": now, "end": None})
    _write_json(ledger, {"config_key": key, "attempts": attempts})


def end_attempt(ledger, now=None):
    """Close the open attempt of the ledger (it ended now: finished, or failed)."""
    key, attempts = _read_ledger(ledger)
    if attempts and attempts[-1]["end"] is None:
        attempts[-1]["end"] = time.time() if now is None else now
    _write_json(ledger, {"config_key": key, "attempts": attempts})


def attempts_seconds(ledger, now=None):
    """``(attempts, seconds)``: the machine time of every attempt of a run, the open one until ``now``."""
    now = time.time() if now is None else now
    _, attempts = _read_ledger(ledger)
    seconds = sum((now if a["end"] is None else a["end"]) - a["start"] for a in attempts)
    return len(attempts), round(seconds, 1)


#: What a result records of the software it ran with (distribution names; missing ones are skipped).
PACKAGES = ("tfdml", "tensorflow", "tensorflow-cpu", "keras", "numpy", "pillow", "fonttools")
#: The variable a stored config writes for the results folder (configs carry no absolute path).
OUT_VARIABLE = "$OUT"


def portable_config(config, out):
    """``config`` with the results folder ``out`` written as :data:`OUT_VARIABLE`, so a stored
    config names no folder of one machine (:func:`config_key` ignores folders)."""
    prefix = os.path.abspath(out)

    def walk(value):
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str) and os.path.isabs(value) and (value + os.sep).startswith(prefix + os.sep):
            return OUT_VARIABLE + value[len(prefix):]
        return value

    return walk(config)


def kanji_build_command(manifest):
    """The ``kanji_fonts.py`` command that builds the set a manifest describes (fonts outside the
    default folder are named by the variable ``$FONTS_DIR``)."""
    settings = manifest.get("settings", {})
    fonts = [face.get("path", "") for face in manifest.get("faces", [])]
    command = (f"python study/kanji_fonts.py --size {settings.get('size')} --chars {settings.get('chars')} "
               f"--min-per-class {settings.get('min_per_class')}")
    if fonts and not all(path.startswith(kanji_fonts.DEFAULT_FONTS_DIR + os.sep) for path in fonts):
        command += " --fonts-dir $FONTS_DIR"
    return command


#: The paths (relative to the checkout) whose changes are not code behind a result: the results,
#: reports and curves the runner and ``report`` write.
NOT_CODE = ("study/results/", "study/REPORT.md")


def uncommitted_changes():
    """The paths of the checkout that differ from its commit (changed, staged, or new and not
    ignored by git), outside :data:`NOT_CODE`; None outside a git checkout."""
    try:
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT,
                                capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    paths = [line[3:].split(" -> ")[-1].strip('"') for line in status.stdout.splitlines() if line.strip()]
    return [path for path in paths if not path.startswith(NOT_CODE)]


def require_committed_tree():
    """Exit naming the uncommitted changes when the checkout has any (:func:`uncommitted_changes`):
    a result records the commit of the code that made it, and a commit plus changes names no code."""
    changed = uncommitted_changes()
    if changed:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        sys.exit(f"reproduce.py: the checkout has uncommitted changes ({shown}); a result records the git "
                 "commit of the code behind it, and with changes that commit does not identify it. Commit "
                 "or stash them (or remove the new files), then run again.")


def git_commit():
    """HEAD of the checkout that runs (``+dirty`` with uncommitted changes outside :data:`NOT_CODE`;
    None outside git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if uncommitted_changes() else "")


def package_versions():
    from importlib import metadata

    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def provenance(data_dir):
    """What a result was made from: the kanji set (the checksum of its manifest, its settings,
    the font packages and the command that builds it), package versions and the git commit."""
    path = os.path.join(data_dir, kanji_fonts.MANIFEST_NAME)
    data = {"checksum": None, "build_command": None}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
        packages = sorted({f"{face['package']}={face.get('package_version', '')}"
                           for face in manifest.get("faces", []) if face.get("package")})
        data = {"checksum": manifest.get("checksum"), "settings": manifest.get("settings"),
                "font_packages": packages, "build_command": kanji_build_command(manifest)}
    return {"data": data, "packages": package_versions(), "git_commit": git_commit(), "python": sys.version.split()[0]}


def runner_lock(out, arm, seed):
    """The lock a reproduce.py process holds on one (arm, seed) while it trains it, so that
    runners started on the same claims and ``--out`` share the runs instead of colliding (a
    dead runner's lock is taken over). Beside the run folder: train.py locks the folder itself."""
    from tfdml import runs

    return runs.RunLock(os.path.join(out, "arms", arm), name=f"seed-{seed}.runner.lock")


def run_arm(arm, seed, out, data_dir, budget, quiet=True):
    """Train one (arm, seed) with train.py unless its result exists; return the result."""
    import yaml

    view = view_of(arm, data_dir, out, budget)
    arm_dir = os.path.join(out, "arms", arm)
    result_path = os.path.join(arm_dir, f"seed-{seed}.json")
    run_dir = os.path.join(arm_dir, f"seed-{seed}")
    config = arm_config(arm, seed, view, budget, run_dir)
    key = config_key(config)
    if os.path.exists(result_path):
        with open(result_path) as f:
            done = json.load(f)
        if done.get("config_key") != key:
            sys.exit(f"{result_path} was trained with another config (budget or arm changed); "
                     f"use another --out or delete it.")
        recorded, current = data_checksum(done), data_set_checksum(data_dir)
        if recorded and current and recorded != current:
            sys.exit(f"{result_path} was trained on another version of the kanji set (checksum {recorded[:12]}…; "
                     f"the set at {data_dir} has {current[:12]}…): results of two versions are never mixed; "
                     f"use another --out.")
        return done
    os.makedirs(arm_dir, exist_ok=True)
    # The run folder belongs to one config: a rerun resumes it only with the same one.
    key_path = os.path.join(arm_dir, f"seed-{seed}.key")
    if os.path.isdir(run_dir):
        owner = open(key_path).read().strip() if os.path.exists(key_path) else None
        if owner != key:
            sys.exit(f"{run_dir} holds a run of another config (budget or arm changed); "
                     f"delete it (and {key_path}) or use another --out.")
    files.write_text(key_path, key + "\n")
    config_path = os.path.join(arm_dir, f"seed-{seed}.yaml")
    files.write_text(config_path, yaml.safe_dump(config, sort_keys=False))
    load = os.getloadavg()[0]
    # every attempt at this run, so that a resumed run's cost counts its earlier attempts too
    ledger = os.path.join(arm_dir, f"seed-{seed}.attempts")
    begin_attempt(ledger, run_dir, key)
    if not os.path.exists(os.path.join(run_dir, "finished.json")):
        command = [sys.executable, os.path.join(ROOT, "train.py"), "--config", config_path]
        if quiet:
            command.append("--quiet")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        done = subprocess.run(command, cwd=ROOT, env=env)
        if done.returncode != 0:
            end_attempt(ledger)
            sys.exit(f"arm {arm} seed {seed} failed (exit {done.returncode}); rerun to resume it: "
                     f"{' '.join(command)}")
    with open(os.path.join(run_dir, "metrics.json")) as f:
        record = json.load(f)
    metrics = record["metrics"]
    end_attempt(ledger)
    attempts, seconds = attempts_seconds(ledger)
    result = {
        "arm": arm, "seed": seed, "config_key": key, "config": portable_config(config, out),
        "provenance": provenance(data_dir),
        "metrics": metrics, "history": _read_history(run_dir),
        # which evaluation the test metrics are of (with a validation split: the best one)
        "kept": (record.get("info") or {}).get("model"),
        # wall time of every attempt (a killed one up to its last checkpoint)
        "seconds": seconds, "attempts": attempts, "load_average_at_start": round(load, 2),
        "machine": machine.describe(), "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    }
    replaces = reruns.take_replaced(arm_dir, seed, metrics)  # set aside to train again (reruns.py)
    if replaces:
        result["replaces"] = replaces
    _write_json(result_path, result)
    reruns.drop_replaced(arm_dir, seed)
    return result


#: Why a finished result is trained again (:data:`reruns.REASONS`), and the test of a result
#: that asks for it.
NEEDS_RERUN = {reruns.UNRECORDED: lambda result: not data_checksum(result),
               reruns.UNCOMMITTED: reruns.from_uncommitted_code}


def set_aside(arm, seed, out, reason):
    """Make (arm, seed) of ``out`` train again when its result needs it for ``reason``
    (:data:`NEEDS_RERUN`): :func:`reruns.set_aside`. Returns whether it did."""
    return reruns.set_aside(os.path.join(out, "arms", arm), seed, reason, NEEDS_RERUN[reason])


# --------------------------------------------------------------------------- report


#: The metric of every verdict (:mod:`verdicts`): MAP@R, declared before any
#: result. On this benchmark R@1 is near its ceiling already for raw pixels
#: (93 % on the standard view: each character has dozens of renderings, some
#: nearly identical), so R@1 compresses differences; MAP@R ranks all R
#: same-class images. R@1 and the paper's own metric are reported beside it.
VERDICT_METRIC = verdicts.PRIMARY_METRIC

#: Figures read from the training history rather than the test metrics; lower is
#: better. ``train_objective``: ``evaluation.objective_sample``, the loss without
#: importance weights on a fixed training sample (Hong Fig. 2).
TRAINING_FIGURES = ("train_objective",)


def _metric(result, metric, at=None):
    """A final test metric, or with ``at`` (a fraction of the budget) the
    per-epoch test figure of the history at that point of training. A
    :data:`TRAINING_FIGURES` name is read from the history (its last row
    without ``at``)."""
    training = metric in TRAINING_FIGURES
    if at is None and not training:
        return result["metrics"].get(metric)
    history = result.get("history") or []
    if not history:
        return None
    row = history[-1] if at is None else history[max(0, min(len(history), round(at * len(history))) - 1)]
    return row.get(metric) if training else curve_value(row, metric)


def curve_value(row, metric):
    """The per-evaluation figure of a history row: the test split's, or with a validation
    split (a budget's ``validation``: the test split is scored once, at the end) the
    validation split's."""
    value = row.get(f"test_{metric}")
    return row.get(f"val_{metric}") if value is None else value


def summarise(values):
    """(mean, sample std or None, n)."""
    values = [v for v in values if v is not None]
    if not values:
        return None, None, 0
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None), len(values)


def load_results(out, arm):
    arm_dir = os.path.join(out, "arms", arm)
    if not os.path.isdir(arm_dir):
        return []
    results = []
    for name in sorted(os.listdir(arm_dir)):
        if name.startswith("seed-") and name.endswith(".json"):
            with open(os.path.join(arm_dir, name)) as f:
                results.append(json.load(f))
    return results


def has_results(claim, out):
    """Whether any arm of ``claim`` has a finished run in ``out``."""
    return any(load_results(out, arm) for arm in claim_arms(claim))


#: The folder, in a results folder, that records the experiments started there: one file per
#: experiment, written when ``--claim`` starts it. Experiments share arms (margin-dw-b80 is an
#: arm of five), so a run of one does not make the others experiments of that folder.
STARTED_DIR = "started"


def mark_started(out, claims):
    """Record that the experiments ``claims`` were started in ``out`` (kept if already there)."""
    folder = os.path.join(out, STARTED_DIR)
    os.makedirs(folder, exist_ok=True)
    name = os.path.basename(os.path.normpath(out))
    for claim in claims:
        path = os.path.join(folder, claim)
        if not os.path.exists(path):
            files.write_text(path, f"python study/reproduce.py --claim {claim} --budget {name}\n")


def experiments_in(out):
    """The experiments started in ``out`` (:func:`mark_started`) that have results there, in the
    order of :data:`CLAIMS`."""
    return [c for c in CLAIMS if os.path.exists(os.path.join(out, STARTED_DIR, c)) and has_results(c, out)]


def _scale(metric):
    """(factor, format) of a figure in the tables: metrics in % with one decimal, training
    figures (losses, which fall by orders of magnitude) as they are, to 3 significant digits."""
    return (1.0, ".3g") if metric in TRAINING_FIGURES else (100.0, ".1f")


def _fmt(mean, std, n, scale=100.0, spec=".1f"):
    if mean is None:
        return "–"
    text = f"{scale * mean:{spec}}"
    return text + (f" ± {scale * std:{spec}}" if std is not None else "") + (f" (n={n})" if n else "")


# ---- provenance of the results a verdict reads


class MixedDataVersions(ValueError):
    """Results of two versions of the data set in one verdict."""


def data_checksum(result):
    """The checksum of the kanji set a result was trained on (None: the result predates the record)."""
    return ((result.get("provenance") or {}).get("data") or {}).get("checksum")


def check_one_data_version(results, what):
    """Refuse results of two data set versions in one verdict; return the checksums (None: not recorded)."""
    known = sorted({c for c in map(data_checksum, results) if c is not None})
    if len(known) > 1:
        raise MixedDataVersions(
            f"{what} mixes results of {len(known)} versions of the kanji set (checksums "
            f"{', '.join(c[:12] for c in known)}); rerun its arms on one version, into another --out")
    return known


def gave_the_earlier_figures(result, reason=reruns.UNRECORDED):
    """Whether a rerun's metrics equal those of the result it replaced for ``reason``
    (:func:`reruns.replaced_for`), metric by metric (every numeric metric both record, within
    :data:`SAME_FIGURES_TOLERANCE`: a seed fixes a run to the bit on one CPU type, so only
    rounding in the metrics' sums is left)."""
    earlier = reruns.replaced_for(result, reason) or {}
    return reruns.compare_figures(earlier.get("metrics"), result.get("metrics"))["outcome"] in (
        reruns.IDENTICAL, reruns.WITHIN_TOLERANCE)


def rerun_pairs(results, reason):
    """``[(result, the record it replaced for reason)]`` of the results trained again for
    ``reason`` whose two runs both record the verdicts' metric."""
    pairs = [(r, reruns.replaced_for(r, reason)) for r in results]
    return [(r, earlier) for r, earlier in pairs if earlier and (earlier.get("metrics") or {}).get(VERDICT_METRIC)
            is not None and r.get("metrics", {}).get(VERDICT_METRIC) is not None]


def _moved(pairs, metric=VERDICT_METRIC):
    """Median and largest distance, in points, between the reruns' ``metric`` and the earlier runs'."""
    moved = [100 * abs(r["metrics"][metric] - earlier["metrics"][metric]) for r, earlier in pairs]
    return statistics.median(moved), max(moved)


def verified_text(pairs):
    """What the reruns of results trained with uncommitted code gave (``--verify-provenance``)."""
    outcomes = [reruns.compare_figures(earlier["metrics"], r["metrics"])["outcome"] for r, earlier in pairs]
    counts = collections.Counter(outcomes)
    same_cpu = sum(machine.cpu_type(r.get("machine")) is not None
                   and machine.cpu_type(r.get("machine")) == machine.cpu_type(earlier.get("machine"))
                   for r, earlier in pairs)
    text = (f"{len(pairs)} of them trained again from a committed checkout (`--verify-provenance`: the earlier "
            f"run's checkout had uncommitted changes; {same_cpu} of them on the earlier run's CPU type): "
            f"{counts[reruns.IDENTICAL]} gave bit-identical metrics, {counts[reruns.WITHIN_TOLERANCE]} every "
            f"metric within {SAME_FIGURES_TOLERANCE:g}, {counts[reruns.DIFFER]} differ")
    differ = [pair for pair, outcome in zip(pairs, outcomes) if outcome == reruns.DIFFER]
    if differ:
        median, largest = _moved(differ)
        text += f" ({VERDICT_METRIC.upper()} by {median:.2f} points, median; at most {largest:.2f})"
    return text


def data_line(results, floor=None):
    """One line: which data set version the results record. For results that predate the
    record, how many were scored on as many test images as ``floor`` (floor.json's sample):
    the one figure of their data they do record."""
    known = check_one_data_version(results, "these results")
    missing = [r for r in results if data_checksum(r) is None]
    parts = []
    if known:
        parts.append(f"kanji set checksum {known[0][:12]}… ({len(results) - len(missing)} runs)")
    if missing:
        text = (f"kanji set checksum not recorded ({len(missing)} of {len(results)} runs), so which version "
                "of the set they were trained on is not known")
        if floor and floor.get("images"):
            same = sum(r.get("metrics", {}).get("num_queries") == floor["images"] for r in missing)
            version = f" (kanji set checksum {floor['data_checksum'][:12]}…)" if floor.get("data_checksum") else ""
            text += (f"; {same} of them were scored on {floor['images']:,} test images, as many as floor.json's "
                     f"sample{version}: a count another font set would change, though the images themselves "
                     "are not recorded")
        parts.append(text)
    unrecorded = rerun_pairs(results, reruns.UNRECORDED)
    if unrecorded:
        median, largest = _moved(unrecorded)
        text = (f"{len(unrecorded)} of them trained again once the checksum was recorded (`--rerun-unrecorded`): "
                f"their {VERDICT_METRIC.upper()} differs from the earlier run's by {median:.2f} "
                f"points (median; at most {largest:.2f})")
        again = sum(gave_the_earlier_figures(r) for r, _ in unrecorded)
        if again:
            text += (f", and {again} of them gave the earlier run's figures again (every metric within "
                     f"{SAME_FIGURES_TOLERANCE:g}), so those earlier runs were trained on the same data")
        parts.append(text)
    verified = rerun_pairs(results, reruns.UNCOMMITTED)
    if verified:
        parts.append(verified_text(verified))
    return "Data: " + "; ".join(parts) + "." if parts else ""


def machines_line(results):
    """One line: the CPU types the results ran on (each result's ``machine``), most runs first. A
    seed fixes a run on one CPU type; on another the kernels round differently."""
    known, vague, unnamed = collections.Counter(), collections.Counter(), 0
    for result in results:
        cpu = machine.cpu_type(result.get("machine"))
        if cpu is None:
            unnamed += 1
        elif cpu[1] is None:
            vague[cpu[0]] += 1
        else:
            known[cpu] += 1
    if not results:
        return ""

    def runs(n):
        return f"{n} run{'s' if n != 1 else ''}"

    text = f"Machines: {len(known)} CPU type{'s' if len(known) != 1 else ''} by the results' `machine`"
    if known:
        text += ": " + ", ".join(f"{name} {generation} ({runs(n)})" for (name, generation), n in known.most_common())
    for name, n in vague.most_common():
        text += f"; {runs(n)} recorded the model name alone ({name}), not its generation"
    if unnamed:
        text += f"; {runs(unnamed)} recorded no machine"
    return text + "."


# ---- claims and their verdicts


def seed_values(out, side, metric, at=None):
    """{seed: value} of one side of a check: an arm, or a contrast ``(a, b)`` (a − b per seed). A
    training figure (lower is better) is negated, so that "better > worse" reads the same way."""
    if isinstance(side, tuple):
        a, b = (seed_values(out, s, metric, at) for s in side)
        return {s: a[s] - b[s] for s in a if s in b and a[s] is not None and b[s] is not None}
    sign = -1.0 if metric in TRAINING_FIGURES else 1.0
    values = {}
    for result in load_results(out, side):
        value = _metric(result, metric, at)
        values[result["seed"]] = None if value is None else sign * value
    return values


def _side_label(side):
    return f"({side[0]} − {side[1]})" if isinstance(side, tuple) else side


def check_label(check, at=None, kind="better"):
    relation = ">" if kind == "better" else f"not worse than (margin {verdicts.NON_INFERIORITY_MARGIN:g})"
    label = f"{_side_label(check[0])} {relation} {_side_label(check[1])}"
    return label if at is None else f"{label}, after {at:.1%} of the steps"


def row_arms(row):
    return list(dict.fromkeys(a for check in row.get("checks", ()) for a in paper_claims.sides(check)))


def is_investigation(row):
    """Whether a row is one of the study's own investigations, not a claim of a paper."""
    return row["paper"] == "investigation"


def paper_metric(row):
    """The paper's own metric of a claim (its experiment's: R@1, P@5 for Lu), judged beside
    :data:`VERDICT_METRIC`; None for a claim that reads another figure (a training figure)."""
    if row.get("untested") or row.get("metric", VERDICT_METRIC) != VERDICT_METRIC:
        return None
    return CLAIMS[row["experiment"]]["metric"]


#: How the report names a metric it judges on.
METRIC_NAMES = {"map@r": "MAP@R", "recall@1": "R@1", "precision@5": "P@5", "train_objective": "training loss"}


def claim_specs(row, out, metric):
    """The checks of a claim, as :func:`verdicts.judge` takes them, on ``metric``."""
    return [{"check": check, "at": at, "kind": row.get("kind", "better"),
             "better": seed_values(out, check[0], metric, at), "worse": seed_values(out, check[1], metric, at)}
            for at in (row.get("at") or (None,)) for check in row["checks"]]


def judge_claim(row, out, metric=None):
    """The verdict of one claim of :mod:`reproduction_claims` from the results in ``out``,
    through :func:`verdicts.judge` (the one verdict function; Holm's family: the claim's
    checks), on ``metric`` (default: the claim's, :data:`VERDICT_METRIC` unless it names
    another). Returns a dict: verdict, reason (untested), metric, checks (the judged rows,
    each with its label, check and at) and results (every result read). Refuses results of
    two data set versions."""
    if row.get("untested"):
        return {"verdict": verdicts.UNTESTED, "reason": row["untested"], "checks": [], "results": [],
                "metric": None}
    metric = metric or row.get("metric", VERDICT_METRIC)
    results = [r for arm in row_arms(row) for r in load_results(out, arm)]
    check_one_data_version(results, f"claim {row['id']}")
    specs = claim_specs(row, out, metric)
    judged, verdict = verdicts.judge(specs, investigation=is_investigation(row))
    for spec, checked in zip(specs, judged):
        checked.update(check=spec["check"], at=spec["at"], label=check_label(spec["check"], spec["at"], spec["kind"]))
    reason = "arms or seeds missing" if verdict == verdicts.UNTESTED else None
    return {"verdict": verdict, "reason": reason, "metric": metric, "checks": judged, "results": results}


def judge_paper(paper, out):
    """``{claim id: judged}`` of the claims of ``paper`` that ``out`` has started, each on its own
    metric (:func:`judge_claim`'s) with Holm's correction across every check of them (one family
    per paper); judged: a dict of verdict and checks."""
    started = experiments_in(out)
    rows = [row for row in paper_claims.CLAIMS
            if row["paper"] == paper and not row.get("untested") and row["experiment"] in started]
    together = verdicts.judge_together([claim_specs(row, out, row.get("metric", VERDICT_METRIC)) for row in rows])
    return {row["id"]: {"verdict": verdict, "checks": checks} for row, (checks, verdict) in zip(rows, together)}


def judged_three_ways(row, out, papers=None):
    """A claim's verdicts: on its metric (Holm per claim), on the paper's metric (Holm per claim;
    None when :func:`paper_metric` is None) and on its metric with Holm per paper (None for an
    investigation). ``papers``: a dict that keeps :func:`judge_paper` results across calls."""
    papers = {} if papers is None else papers
    own = judge_claim(row, out)
    metric = paper_metric(row)
    theirs = judge_claim(row, out, metric) if metric else None
    per_paper = None
    if not is_investigation(row):
        if row["paper"] not in papers:
            papers[row["paper"]] = judge_paper(row["paper"], out)
        per_paper = papers[row["paper"]].get(row["id"])
    return own, theirs, per_paper


def paired_summary(out, check, metric, at=None):
    """(paired mean difference, its SE or None, n) of a check on a reported (not judged) metric."""
    seeds, diffs = verdicts.paired(seed_values(out, check[0], metric, at), seed_values(out, check[1], metric, at))
    if not diffs:
        return None, None, 0
    if len(diffs) == 1:
        return diffs[0], None, 1
    mean, se, _, _ = verdicts.paired_t_test(diffs)
    return mean, se, len(diffs)


def _diff_cell(mean, se, metric):
    if mean is None:
        return "–"
    scale, spec = _scale(metric)
    return f"{scale * mean:+{spec}}" + ("" if se is None else f" ± {scale * se:{spec}}")


def _p(p):
    return "–" if p is None else (f"{p:.2g}" if p >= 0.001 else f"{p:.1e}")


def outcome_counts(judged):
    """'k of m hold, r reversed' of a claim's checks."""
    outcomes = [c["outcome"] for c in judged["checks"]]
    held = sum(o == verdicts.HOLDS for o in outcomes)
    reversed_ = sum(o == verdicts.REVERSED for o in outcomes)
    return f"{held} of {len(outcomes)} hold, {reversed_} reversed"


def claim_detail(row, out, papers=None):
    """Markdown of one claim: its checks with the statistics and the verdict, then its verdicts on
    the paper's metric and with Holm per paper (:func:`judged_three_ways`; ``papers`` as there)."""
    judged = judge_claim(row, out)
    spec = CLAIMS[row["experiment"]]
    metric = judged["metric"]
    reported = [m for m in dict.fromkeys([spec["metric"], "recall@1"]) if m != metric]
    lines = [f"#### {row['id']} ({row['paper']}, {row['where']}): **{judged['verdict']}**", "",
             f"Claim: {row['claim']}.", ""]
    protocol = budget_of(out).get("protocol") or row.get("protocol")
    if protocol:
        lines += [f"Protocol: {protocol}.", ""]
    if row.get("caveat"):
        lines += [f"Caveat: {row['caveat']}.", ""]
    lines += ["| check | paper Δ | seeds | Δ " + metric + " ± SE (paired) | t | p | p Holm | p sign-flip "
              "| p unpaired | " + " | ".join(f"Δ {m} ± SE" for m in reported) + " | outcome |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(reported) + "---|"]
    for checked in judged["checks"]:
        check, at = checked["check"], checked["at"]
        pb, pw = (spec["paper"].get(s) if isinstance(s, str) else None for s in check)
        paper = f"{pb - pw:+.1f}" if pb is not None and pw is not None and at is None else "–"
        unpaired = checked["unpaired"][-1] if checked["unpaired"] else None
        t = "–" if checked["t"] is None else f"{checked['t']:.2f}"
        cells = [checked["label"], paper, str(checked["n"]), _diff_cell(checked["diff"], checked["se"], metric), t,
                 _p(checked["p"]), _p(checked["p_holm"]), _p(checked["p_sign_flip"]), _p(unpaired)]
        cells += [_diff_cell(*paired_summary(out, check, m, at)[:2], m) for m in reported]
        lines.append("| " + " | ".join(cells + [checked["outcome"]]) + " |")
    counts = outcome_counts(judged)
    mixed = [c["label"] for c in judged["checks"] if pairing.pairs_different_settings(c["check"], ARMS, VIEW_KEY)]
    if mixed:
        lines += ["", "Paired by seed number alone (the arms differ in batch design or data view, so a seed gives "
                      "them the same initial weights but not the same batches): " + "; ".join(mixed) + "."]
    if budget_of(out).get("validation") and any(c["at"] is not None for c in judged["checks"]):
        lines += ["", "A check after a fraction of the steps reads the validation split's curve: the test split "
                      "is scored once, at the end."]
    lines += ["", f"Verdict: **{judged['verdict']}** ({counts}; {metric}"
              + (", lower is better: Δ is B − A" if metric in TRAINING_FIGURES else "") + ")."]
    _, theirs, per_paper = judged_three_ways(row, out, papers)
    beside = []
    if theirs is not None:
        beside.append(f"on the paper's metric, {METRIC_NAMES.get(theirs['metric'], theirs['metric'])}: "
                      f"**{theirs['verdict']}** ({outcome_counts(theirs)})")
    if per_paper is not None:
        beside.append(f"with Holm's correction across every check of {row['paper']} judged here: "
                      f"**{per_paper['verdict']}** ({outcome_counts(per_paper)})")
    if beside:
        lines += ["", "Beside it, by the same rule: " + "; ".join(beside) + "."]
    return "\n".join(lines + [""])


def rule_text():
    """The verdict rule, from :mod:`verdicts`' constants (the REPORT.md and report.md preamble)."""
    words = "; ".join(f"**{w}**: {meaning}" for w, meaning in verdicts.VERDICT_WORDS.items())
    different, checks = pairing.count_different_settings(ARMS, VIEW_KEY)
    return (f"Every verdict is computed by one function (`study/verdicts.py`), the same for every claim "
            f"and fixed before any further run; the committed runs were made before it was written, so for "
            f"them it is not a pre-registered rule. A check \"A > B\" is judged on {VERDICT_METRIC.upper()}, "
            f"and, by the same rule beside it, on the paper's own metric (R@1; P@5 for Lu), from the "
            f"**paired** differences "
            f"A_s − B_s over the seeds both arms ran (the same seed gives both the same initial weights, and "
            f"the same batch order where they share the batch design and the data view; {different} of "
            f"{checks} checks pair arms of different designs or views, marked in the detail, where the seed "
            f"pairs the initial weights alone): a paired t-test, two-sided, with **Holm's correction across the checks of the "
            f"claim** at α = {verdicts.ALPHA}; the family is a choice, so the verdict with Holm across every "
            f"check of the paper's claims judged here (one family per paper) is shown beside it. It holds "
            f"(or is reversed) when significant after Holm; a "
            f"check whose difference is under {verdicts.RESOLVE_SE:g} standard errors needs at least "
            f"{verdicts.MIN_SEEDS} seeds to be decided (else \"{verdicts.NEEDS_SEEDS}\"). The exact sign-flip "
            f"permutation p is shown as a distribution-free cross-check: its floor is 2^(1−n), 0.25 with 3 "
            f"seeds, so with 3 seeds no check can be significant on it. The unpaired (Welch) p is shown for "
            f"comparison. Only a claim that is itself \"not worse\" (Hong's Fig. 4: \"not sensitive to "
            f"λ\"; the draft's thesis: the contrastive loss is enough) has not-worse checks: the same test on "
            f"A − B + δ, δ = {verdicts.NON_INFERIORITY_MARGIN:g} of {VERDICT_METRIC.upper()}, declared before "
            f"Hong's Fig. 4 runs and after the draft's (its arms are Wu's). Verdicts: {words}. An investigation (the "
            f"study's own probe, not a paper's claim) is "
            + ", ".join(f"**{w}**" for w in verdicts.INVESTIGATION_WORDS.values())
            + " in place of the first three.")


def illustrations_line():
    """One line: the seed papers' figures and tables that state no claim (no row of their own)."""
    parts = "; ".join(f"{paper} {where} ({what})" for paper, where, what in paper_claims.ILLUSTRATIONS)
    return f"Not rows, as they state no claim to test: {parts}."


def claims_table(out):
    """Markdown: every claim of :mod:`reproduction_claims`, run or not, with its verdicts: on its
    metric, on the paper's metric, and with Holm across the paper's checks
    (:func:`judged_three_ways`)."""
    lines = [f"| claim | paper | figure / table | the paper's claim | verdict, {METRIC_NAMES[VERDICT_METRIC]} "
             "(Holm: the claim's checks) | checks | verdict, the paper's metric (Holm: the claim's checks) | checks "
             f"| verdict, {METRIC_NAMES[VERDICT_METRIC]} (Holm: every check of the paper) | checks "
             "| how to run / why untested |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    started, papers = experiments_in(out), {}

    def cells(judged, name=None):
        if judged is None:
            return "– | –"
        word = f"**{judged['verdict']}**" + (f" ({name})" if name else "")
        return f"{word} | {outcome_counts(judged) if judged.get('checks') else '–'}"

    for row in paper_claims.CLAIMS:
        if row.get("untested"):
            judged, how = judge_claim(row, out), row["untested"]
            columns = [cells(judged), cells(None), cells(None)]
        elif row["experiment"] not in started:  # its arms may hold runs of other experiments: not judged
            how = f"`--claim {row['experiment']}` (not started in this folder)"
            columns = [cells({"verdict": verdicts.UNTESTED}), cells(None), cells(None)]
        else:
            judged, theirs, per_paper = judged_three_ways(row, out, papers)
            how = f"`--claim {row['experiment']}`"
            if judged["reason"]:
                how += f" ({judged['reason']})"
            name = METRIC_NAMES.get(theirs["metric"]) if theirs else None
            columns = [cells(judged), cells(theirs, name), cells(per_paper)]
        if row.get("caveat"):
            how += f"; caveat: {row['caveat']}"
        lines.append(f"| {row['id']} | {row['paper']} | {row['where']} | {row['claim']} | " + " | ".join(columns)
                     + f" | {how} |")
    return "\n".join(lines)


def run_cost(results):
    """(runs, minutes in all, median minutes per run) of finished runs."""
    seconds = [r.get("seconds", 0.0) for r in results]
    return len(seconds), sum(seconds) / 60, statistics.median(seconds) / 60 if seconds else 0.0


#: The outcomes of a check that more seeds could decide.
OPEN_OUTCOMES = (verdicts.UNRESOLVED, verdicts.NEEDS_SEEDS, verdicts.TOO_FEW, verdicts.MISSING)


def seeds_wanted(out):
    """The runs the verdicts still ask for: ``{experiment: (seeds to add, open checks, runs to
    add, median minutes per run so far)}`` for each experiment of ``out`` (:func:`experiments_in`: a
    budget runs the experiments it was started on) and a check left open (an outcome of
    :data:`OPEN_OUTCOMES`) on fewer than ``verdicts.MIN_SEEDS`` paired seeds. The
    seeds to add are those below ``MIN_SEEDS`` that some arm of the experiment lacks; the
    runs to add count the (arm, seed) pairs not done, a run shared with another experiment
    once."""
    wanted, counted = {}, set()
    for experiment in experiments_in(out):
        rows = [row for row in paper_claims.rows_of(experiment) if not row.get("untested")]
        open_checks = sum(c["outcome"] in OPEN_OUTCOMES and c["n"] < verdicts.MIN_SEEDS
                          for row in rows for c in judge_claim(row, out)["checks"])
        if not open_checks:
            continue
        done = {arm: {r["seed"] for r in load_results(out, arm)} for arm in claim_arms(experiment)}
        seeds = [s for s in range(verdicts.MIN_SEEDS) if any(s not in d for d in done.values())]
        missing = {(arm, s) for arm, d in done.items() for s in seeds if s not in d} - counted
        counted |= missing
        results = [r for arm in claim_arms(experiment) for r in load_results(out, arm)]
        wanted[experiment] = (seeds, open_checks, len(missing), run_cost(results)[2] if results else None)
    return wanted


def unrecorded_runs(out):
    """``{experiment: [results]}``: the results of the experiments of ``out`` that record no data
    set checksum, each under the first experiment that has its arm."""
    runs, seen = {}, set()
    for experiment in experiments_in(out):
        for arm in claim_arms(experiment):
            for result in load_results(out, arm):
                if not data_checksum(result) and (arm, result["seed"]) not in seen:
                    seen.add((arm, result["seed"]))
                    runs.setdefault(experiment, []).append(result)
    return runs


def unverified_arms(out):
    """``{experiment: [(arm, seed)]}``: the arms of ``out`` with results trained from uncommitted
    code (:func:`reruns.from_uncommitted_code`) none of whose seeds was trained again from a
    committed checkout (``--verify-provenance``), each under the first experiment that has it,
    with its cheapest such seed (the shortest run)."""
    arms, seen = {}, set()
    for experiment in experiments_in(out):
        for arm in claim_arms(experiment):
            if arm in seen:
                continue
            seen.add(arm)
            results = load_results(out, arm)
            if any(reruns.replaced_for(r, reruns.UNCOMMITTED) for r in results):
                continue
            dirty = [r for r in results if reruns.from_uncommitted_code(r)]
            if dirty:
                cheapest = min(dirty, key=lambda r: (r.get("seconds") or 0.0, r["seed"]))
                arms.setdefault(experiment, []).append((arm, cheapest["seed"]))
    return arms


#: The key of a probe file (``probes/<claim>-test<N>.json``, probe_reproduction.py) that holds
#: ``{arm: {seed: finished}}``: the time each result it scored finished, which ties its scores to
#: those runs.
PROBE_RUNS_KEY = "runs"


def stale_probes(out):
    """``[(claim, test classes, ks, reason)]``: the probes of ``out`` that re-scored runs trained
    again since (a result's ``finished`` differs from the one the probe records), or that record no
    runs, so cannot be tied to the results now there."""
    stale = []
    for path in sorted(glob.glob(os.path.join(out, "probes", "*-test*.json"))):
        with open(path, encoding="utf-8") as f:
            found = json.load(f)
        if not {"claim", "test_classes", "ks", "scores"} <= set(found):
            continue  # another script's probe
        scored = [(arm, seed) for arm, seeds in found["scores"].items() for seed in seeds]
        recorded = found.get(PROBE_RUNS_KEY)
        if recorded is None:
            reason = f"it records no runs, so its {len(scored)} scores cannot be tied to the results now there"
        else:
            now = {(arm, str(r["seed"])): r.get("finished") for arm in found["scores"] for r in load_results(out, arm)}
            again = sum(now.get(run) != recorded.get(run[0], {}).get(run[1]) for run in scored)
            if not again:
                continue
            reason = f"{again} of the {len(scored)} runs it scored were trained again since"
        stale.append((found["claim"], found["test_classes"], found["ks"], reason))
    return stale


def wanted_text(out):
    """The commands that add the seeds :func:`seeds_wanted` asks for, with their cost so far,
    the one that trains again the results without a data set checksum
    (:func:`unrecorded_runs`), with their own run times, one seed of each arm trained only from
    uncommitted code (:func:`unverified_arms`), and those that score again the probes
    of runs trained again since (:func:`stale_probes`)."""
    wanted, unrecorded, probes = seeds_wanted(out), unrecorded_runs(out), stale_probes(out)
    unverified = unverified_arms(out)
    if not experiments_in(out):
        return f"No experiment has results in {out} yet: start one with --claim."
    if not wanted and not unrecorded and not probes and not unverified:
        return (f"Every check of the experiments in {out} is decided or has {verdicts.MIN_SEEDS} seeds, every "
                "result records its data set, and every probe scored the runs now there: no run is wanted.")
    name = os.path.basename(os.path.normpath(out))
    # the budget a folder of reproduce.py's naming holds; any other folder by its path (a run
    # of another budget there is refused: its stored configs differ)
    where = "" if name == "standard" else f" --budget {name}" if name in BUDGETS else f" --out {out}"
    lines, minutes = [], 0.0
    for experiment, (seeds, open_checks, runs, median) in wanted.items():
        cost = f"~{runs * median / 60:.1f} h" if median is not None else "cost unknown"
        minutes += runs * (median or 0.0)
        lines.append(f"python study/reproduce.py --claim {experiment}{where} --seeds {' '.join(map(str, seeds))}"
                     f"   # {open_checks} open check(s), {runs} run(s) to add, {cost} of one runner")
    if unrecorded:
        results = [r for rs in unrecorded.values() for r in rs]
        seeds = sorted({r["seed"] for r in results})
        rerun_minutes = run_cost(results)[1]
        minutes += rerun_minutes
        claims = " ".join(f"--claim {c}" for c in unrecorded)
        lines.append(f"python study/reproduce.py {claims}{where} --seeds {' '.join(map(str, seeds))} "
                     f"--rerun-unrecorded   # {len(results)} result(s) without a data set checksum, "
                     f"~{rerun_minutes / 60:.1f} h of one runner (their own run times)")
    for experiment, arms in unverified.items():
        for arm, seed in arms:
            lines.append(f"python study/reproduce.py --claim {experiment}{where} --arm {arm} --seeds {seed} "
                         f"--verify-provenance   # its results were trained from uncommitted code")
    for claim, test_classes, ks, reason in probes:
        lines.append(f"python study/probe_reproduction.py --claim {claim}{where} --test-classes {test_classes} "
                     f"--ks {' '.join(map(str, ks))}   # re-score (after the runs above, on the machine that "
                     f"trained them: it reads their models): {reason}")
    lines.append(f"# in all ~{minutes / 60:.1f} h of one runner (each experiment's median run so far)")
    return "\n".join(lines)


def distinct_results(claims, out):
    """The results of the experiments ``claims``, a run two of them share once."""
    distinct = {}
    for claim in claims:
        distinct.update(((r["arm"], r["seed"]), r) for arm in claim_arms(claim) for r in load_results(out, arm))
    return list(distinct.values())


def total_cost_line(claims, out):
    runs, minutes, median = run_cost(distinct_results(claims, out))
    return (f"Total: {runs} distinct runs (arm × seed), {minutes / 60:.1f} hours of this machine, "
            f"{median:.1f} min per run (median; shared runs counted once).")


def summary(claims, out):
    """Markdown: the rule, every claim's verdict, each experiment's cost, the total over distinct
    runs (an arm that two experiments share ran once and counts once)."""
    lines = ["## Summary", "", rule_text(), "", claims_table(out), "",
             "| experiment | source | runs | minutes |", "|---|---|---:|---:|"]
    for claim in claims:
        results = [r for arm in claim_arms(claim) for r in load_results(out, arm)]
        runs, minutes, _ = run_cost(results)
        lines.append(f"| {claim} | {CLAIMS[claim]['source']} | {runs} | {minutes:.0f} |")
    lines += ["", total_cost_line(claims, out), ""]
    return "\n".join(lines)


def report(claim, out, draw=True):
    """Markdown of one experiment: its arms (ours vs paper), the claims it tests with their checks
    and verdicts, the data version, its cost; writes the curves PNG (``draw``; else names the one
    that exists)."""
    spec = CLAIMS[claim]
    paper_metric = spec["metric"]
    shown = list(dict.fromkeys([paper_metric, VERDICT_METRIC, "recall@1", "nmi"]))
    name = os.path.basename(os.path.normpath(out))
    suffix = f" — budget `{name}`" if budget_of(out) and name != "standard" else ""
    lines = [f"### {claim}: {spec['source']}{suffix}", ""]
    lines += ["| arm | paper " + paper_metric + " | " + " | ".join(f"ours {m}" for m in shown) + " |",
              "|---|---:|" + "---:|" * len(shown)]
    floor = (read_floor(out) or {}).get("metrics")
    if floor is not None:
        lines.append("| raw pixels (floor) | | " + " | ".join(_fmt(floor.get(m), None, None) for m in shown) + " |")
    for arm in claim_arms(claim):
        results = load_results(out, arm)
        paper = spec["paper"].get(arm)
        lines.append(f"| {arm} | {paper if paper is not None else '–'} | "
                     + " | ".join(_fmt(*summarise([_metric(r, m) for r in results]), *_scale(m)) for m in shown)
                     + " |")
    lines += ["", "Figures in %, mean ± sample std over seeds (n seeds).", ""]
    done = [r for arm in claim_arms(claim) for r in load_results(out, arm)]
    if done:
        lines += [data_line(done, read_floor(out)), ""]
    papers = {}
    for row in paper_claims.rows_of(claim):
        lines.append(claim_detail(row, out, papers))
    lines += policy_diagnostics(claim, out)
    if done:
        runs, minutes, median = run_cost(done)
        seeds = sorted({r["seed"] for r in done})
        lines += [f"Cost: {runs} runs (arms × seeds {seeds}) took {minutes:.0f} min on "
                  f"this machine, {median:.1f} min per run (median; "
                  f"load average at their starts {min(r.get('load_average_at_start', 0) for r in done):.1f}–"
                  f"{max(r.get('load_average_at_start', 0) for r in done):.1f}).", ""]
    if draw:
        png = plot_curves(claim, out, spec.get("curves", ()), spec.get("curve_metric", VERDICT_METRIC))
    else:
        png = os.path.join(out, f"{claim}-curves.png")
        png = png if os.path.exists(png) else None
    if png:
        lines += [f"Curves: `{os.path.basename(png)}`.", ""]
    return "\n".join(lines)


def policy_diagnostics(claim, out):
    """Markdown lines: whether the learned policy of the claim's arms collapsed, from the
    ``tfdml.dsn.DIAGNOSTICS`` their runs recorded (none: no lines). Per arm, means over its
    seeds of the first and the last epoch's means: the policy's entropy against the
    uniform policy's over the same candidates, and the mean loss of the tuples it picked
    over that of uniform ones (1: no harder than chance)."""
    rows = []
    for arm in claim_arms(claim):
        runs = [r["history"] for r in load_results(out, arm)
                if r.get("history") and "dsn_entropy" in r["history"][0]]
        if not runs:
            continue

        def mean(key, at):
            return statistics.mean(h[at][key] for h in runs)

        def ratio(at):
            values = [h[at]["dsn_picked_loss"] / h[at]["dsn_uniform_loss"] for h in runs
                      if h[at]["dsn_uniform_loss"] > 0]
            return f"{statistics.mean(values):.2f}" if values else "–"

        rows.append(f"| {arm} | {len(runs)} | {mean('dsn_entropy', 0):.2f} → {mean('dsn_entropy', -1):.2f} "
                    f"| {mean('dsn_uniform_entropy', -1):.2f} | {ratio(0)} → {ratio(-1)} |")
    if not rows:
        return []
    return ["Whether the learned policy collapsed (`tfdml.dsn` diagnostics: the first and the last epoch's "
            "means, averaged over seeds):", "",
            "| arm | seeds | policy entropy, nats | uniform policy's entropy | picked / uniform tuples' loss |",
            "|---|---:|---:|---:|---:|", *rows, "", *policy_per_seed(claim, out)]


def policy_per_seed(claim, out):
    """Markdown lines: per seed of each arm with ``tfdml.dsn`` diagnostics, the policy's entropy at
    the last epoch against the outcome: the run's MAP@R and, for each check of the claim's rows
    that reads the arm, the paired difference of that seed (the arm's side first)."""
    checks = list(dict.fromkeys(check for row in paper_claims.rows_of(claim) for check in row["checks"]
                                if all(isinstance(side, str) for side in check)))
    rows = []
    for arm in claim_arms(claim):
        results = sorted((r for r in load_results(out, arm) if r.get("history") and "dsn_entropy" in r["history"][0]),
                         key=lambda r: r["seed"])
        for result in results:
            last = result["history"][-1]
            ratio = (f"{last['dsn_picked_loss'] / last['dsn_uniform_loss']:.2f}" if last["dsn_uniform_loss"] > 0
                     else "–")
            cells = []
            for check in (c for c in checks if arm in c):
                other = check[1] if check[0] == arm else check[0]
                theirs = {r["seed"]: _metric(r, VERDICT_METRIC) for r in load_results(out, other)}
                if result["seed"] in theirs:
                    diff = 100 * (_metric(result, VERDICT_METRIC) - theirs[result["seed"]])
                    cells.append(f"{diff:+.1f} against {other}")
            rows.append(f"| {arm} | {result['seed']} | {last['dsn_entropy']:.2f} | {ratio} "
                        f"| {100 * _metric(result, VERDICT_METRIC):.1f} | {'; '.join(cells) or '–'} |")
    return ["Per seed, the policy's entropy at the last epoch against the outcome:", "",
            f"| arm | seed | policy entropy, nats | picked / uniform tuples' loss | {METRIC_NAMES[VERDICT_METRIC]} "
            f"| Δ {METRIC_NAMES[VERDICT_METRIC]} of that seed: this arm − the other arm of a check |",
            "|---|---:|---:|---:|---:|---|", *rows, ""]


#: The block of REPORT.md that ``reproduce.py report`` writes (between these lines).
RESULTS_BEGIN = ("<!-- generated by `python study/reproduce.py report` from the committed results: "
                 "edit reproduce.py, reproduction_claims.py or verdicts.py, not this block -->")
RESULTS_END = "<!-- end of the generated block -->"
RESULTS_PATH = os.path.join(HERE, "REPORT.md")


def budget_text(out):
    """The setting of the results in ``out`` (budget, model, view), read from a stored config and floor.json."""
    results = next((r for c in CLAIMS for a in claim_arms(c) for r in load_results(out, a)
                    if {"model", "optimizer", "training"} <= set(r.get("config", {}))), None)
    if results is None:
        return ""
    config = results["config"]
    seeds = sorted({r["seed"] for c in CLAIMS for a in claim_arms(c) for r in load_results(out, a)})
    longer = {c: max(ARMS[arm].get(STEPS_KEY, 1) for arm in claim_arms(c)) for c in experiments_in(out)}
    longer = ", ".join(f"{factor}× in `{c}`" for c, factor in longer.items() if factor > 1)
    training, model = config["training"], config["model"]
    steps = training["epochs"] * training["steps_per_epoch"] // ARMS[results["arm"]].get(STEPS_KEY, 1)
    text = (f"Setting: `{os.path.basename(os.path.normpath(out))}` budget, a `{model['backbone']}` "
            f"({model['embedding_dim']}-d, L2-normalised), {config['optimizer']['name']} "
            f"{config['optimizer']['learning_rate']:g}, no augmentation, **{steps:,} steps** per run"
            + (f" ({longer})" if longer else "")
            + f", {training['epochs']} evaluations on the way, one `train.py` process "
            f"per (arm, seed), seeds {', '.join(map(str, seeds))}; from scratch, ")
    validation = (config.get("data") or {}).get("validation")
    train_classes = budget_of(out).get("train_classes")
    if validation:
        text += (f"{train_classes or 'all the'} training classes, {validation['fraction']:.0%} of them held out as "
                 "a validation split; each run keeps its evaluation of best validation MAP@R and scores the test "
                 "split once, on it.")
    else:
        text += "the final step reported."
    floor = read_floor(out)
    if floor is not None:
        text += (f" Scored on a fixed sample of {floor['classes']} test classes ({floor['images']:,} images, the "
                 f"same for every arm and seed); raw pixels reach MAP@R {100 * floor['metrics']['map@r']:.1f} % "
                 f"and R@1 {100 * floor['metrics']['recall@1']:.1f} % there (`floor.json`, "
                 + (f"kanji set checksum {floor['data_checksum'][:12]}…"
                    + (", recorded when `reproduce.py verify-floor` recomputed it from that set)."
                       if floor.get("data_checksum_verified") else ").")
                    if floor.get("data_checksum") else "kanji set checksum not recorded)."))
    return text


def results_block(out):
    """The generated block of REPORT.md: setting, rule, every claim with its verdict,
    the total cost, then each experiment's detail (the same text as report.md)."""
    experiments = experiments_in(out)
    results = distinct_results(experiments, out)
    where = os.path.relpath(out, ROOT)
    lines = [RESULTS_BEGIN, "", budget_text(out), "", rule_text(), "",
             "**Every table and figure claim of the five seed papers** (Wu, Hong, Lu, Duan and the Deep "
             "Embeddings draft), and the memory-size claims of Wang et al. 2020 (XBM), run or "
             "not (the verdict of each row is the verdict function's "
             "on its checks; an investigation is a probe of a failed claim, not a claim of a paper):", "",
             claims_table(out), "", illustrations_line(), "", total_cost_line(experiments, out), "",
             data_line(results, read_floor(out)), "",
             machines_line(results), "",
             f"Every run is reproduced by one command per experiment, `python study/reproduce.py --claim "
             f"<experiment> --seeds <its seeds>` (each experiment's cost line names them; resumable: one JSON per arm "
             f"and seed under `{where}/arms/`); "
             f"`python study/reproduce.py report` rewrites this block from those JSON files "
             f"(`--check` fails when it is stale); `python study/reproduce.py --wanted` lists the runs the "
             f"verdicts still ask for (checks open on fewer than {verdicts.MIN_SEEDS} seeds) and the results to "
             f"train again because they record no data set checksum, as commands, with their cost, and the "
             f"probes (`probe_reproduction.py`) to score again because a run they scored was trained again since. "
             f"The detail "
             f"of every experiment follows.", ""]
    beside = beside_outs(out)
    for other in beside:
        lines += [beside_summary(out, other), ""]
    if beside:
        lines += [study_cost_line([out] + beside), ""]
    lines += [report(c, out, draw=False) for c in experiments]
    for other in beside:
        lines += [beside_detail(other)]
    lines += [RESULTS_END]
    return "\n".join(lines)


def study_cost_line(folders):
    """One line: the runs and hours of every budget's results, in all and per budget."""
    costs = [(os.path.basename(os.path.normpath(f)), *run_cost(distinct_results(experiments_in(f), f))[:2])
             for f in folders]
    parts = ", ".join(f"`{name}` {runs} runs, {minutes / 60:.1f} h" for name, runs, minutes in costs)
    return (f"The whole study: {sum(c[1] for c in costs)} runs, {sum(c[2] for c in costs) / 60:.1f} hours of this "
            f"machine ({parts}).")


def beside_outs(out):
    """The results folders, next to ``out``, of the budgets reported beside the standard one
    (``beside_standard``) that hold results."""
    parent = os.path.dirname(os.path.normpath(out))
    folders = [os.path.join(parent, name) for name, budget in BUDGETS.items() if budget.get("beside_standard")]
    return [folder for folder in folders if experiments_in(folder)]


def beside_summary(out, other):
    """Markdown: the claims the budget of ``other`` reran, each with its verdict there and in ``out``."""
    name, here = (os.path.basename(os.path.normpath(folder)) for folder in (other, out))
    experiments = experiments_in(other)
    lines = [f"**Under `{name}`** ({budget_of(other).get('protocol', 'another budget')}): the claims it reran, "
             f"with their verdicts under `{here}` beside them (the detail under `{name}` follows the "
             f"`{here}` detail):", "",
             f"| claim | figure / table | the paper's claim | verdict, `{here}` | checks | verdict, `{name}` | checks |",
             "|---|---|---|---|---|---|---|"]
    for row in paper_claims.CLAIMS:
        if row.get("untested") or row["experiment"] not in experiments:
            continue
        judged = [judge_claim(row, folder) for folder in (out, other)]
        cells = [f"**{j['verdict']}** | {outcome_counts(j) if j['checks'] else '–'}" for j in judged]
        lines.append(f"| {row['id']} | {row['where']} | {row['claim']} | {cells[0]} | {cells[1]} |")
    results = distinct_results(experiments, other)
    lines += ["", total_cost_line(experiments, other), "", data_line(results, read_floor(other)), "",
              machines_line(results)]
    return "\n".join(lines)


def beside_detail(other):
    """Markdown: the setting of the budget of ``other`` and the detail of each experiment it ran."""
    name = os.path.basename(os.path.normpath(other))
    experiments = experiments_in(other)
    lines = [f"### The experiments under `{name}`", "", budget_text(other), "",
             f"Each run: `python study/reproduce.py --claim <experiment> --budget {name} --seeds <its seeds>` "
             f"(each experiment's cost line names them; one JSON per arm and seed under "
             f"`{os.path.relpath(other, ROOT)}/arms/`).", ""]
    lines += [report(c, other, draw=False) for c in experiments]
    return "\n".join(lines)


class NoteFigureSource:
    """The results :class:`note_figures.Figures` reads: ``out`` and, by budget name, the
    results folders beside it."""

    def __init__(self, out):
        self.out = out
        self._loaded = {}  # (folder, arm) → its results: a report's notes quote many arms more than once

    def folder(self, budget):
        if budget is None:
            return self.out
        if budget not in BUDGETS:
            raise note_figures.NoteFigureError(f"note figure: unknown budget {budget!r} "
                                               f"(known: {', '.join(sorted(BUDGETS))})")
        return os.path.join(os.path.dirname(os.path.normpath(self.out)), budget)

    def results(self, budget, arm):
        key = (self.folder(budget), arm)
        if key not in self._loaded:
            self._loaded[key] = load_results(*key)
        return self._loaded[key]

    def values(self, budget, arm, metric, at):
        return {r["seed"]: _metric(r, metric, at) for r in self.results(budget, arm)}

    def arms(self, budget):
        return [arm for arm in ARMS if self.results(budget, arm)]

    def scale(self, metric):
        return _scale(metric)


def write_results(out, path=RESULTS_PATH, check=False):
    """Replace the generated block of ``path`` with :func:`results_block` and rewrite the note
    figures outside it (:mod:`note_figures`); with ``check``, only say whether it is current.
    Returns True when the file is (or now is) current."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if RESULTS_BEGIN not in text or RESULTS_END not in text:
        raise SystemExit(f"{path} has no generated reproduction block (the lines {RESULTS_BEGIN!r} ... "
                         f"{RESULTS_END!r}); add them under its title.")
    head, rest = text.split(RESULTS_BEGIN, 1)
    _, tail = rest.split(RESULTS_END, 1)
    figures = note_figures.Figures(NoteFigureSource(out))
    new = figures.fill(head) + results_block(out) + figures.fill(tail)
    if check:
        return new == text
    if new != text:
        files.write_text(path, new)
    return True


def write_report_md(out, draw=True):
    """report.md of ``out``: the summary, then every experiment started there with results."""
    reports = {c: report(c, out, draw) for c in experiments_in(out)}
    path = os.path.join(out, "report.md")
    files.write_text(path, "\n".join([summary(list(reports), out)] + list(reports.values())) + "\n")
    return reports


def curve_styles(count):
    """``count`` distinct (colour, line style) pairs: the 10 strong colours of matplotlib's
    tab20 drawn solid, then their light shades dashed, then dotted and dash-dotted. The default
    colour cycle has 10 colours, so with more arms (wu_batch_size has 15) two lines shared one."""
    import matplotlib

    palette = matplotlib.colormaps["tab20"].colors
    colours = palette[0::2] + palette[1::2]
    styles = ("-", "--", ":", "-.")
    return [(colours[i % len(colours)], styles[(i // 10) % len(styles)]) for i in range(count)]


def plot_curves(claim, out, highlight, metric):
    """Test-split ``metric`` after each evaluation for every arm of the claim:
    mean over seeds, a band of ± one std where there are several; the arms in
    ``highlight`` (the paper's figure) drawn thick; the raw-pixel floor dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    training = metric in TRAINING_FIGURES
    value = (lambda row: row.get(metric)) if training else (lambda row: curve_value(row, metric))
    scale = _scale(metric)[0]
    fig, ax = plt.subplots(figsize=(8, 5))
    drawn = 0
    with_history = {arm: [r for r in load_results(out, arm) if r.get("history")] for arm in claim_arms(claim)}
    arms = [(arm, results) for arm, results in with_history.items() if results]
    for (arm, results), (colour, style) in zip(arms, curve_styles(len(arms))):
        steps_per_epoch = results[0]["config"]["training"]["steps_per_epoch"]
        length = min(len(r["history"]) for r in results)
        ys = scale * np.array([[value(row) if value(row) is not None else np.nan
                              for row in r["history"][:length]] for r in results], dtype=float)
        xs = (np.arange(length) + 1) * steps_per_epoch
        thick = arm in highlight
        line, = ax.plot(xs, np.nanmean(ys, axis=0), marker="o" if thick else None, color=colour,
                        linestyle=style, linewidth=2.2 if thick else 1.0, alpha=1.0 if thick else 0.75,
                        label=f"{arm} (n={len(results)})")
        if len(results) > 1:
            std = np.nanstd(ys, axis=0, ddof=1)
            ax.fill_between(xs, np.nanmean(ys, axis=0) - std, np.nanmean(ys, axis=0) + std,
                            color=line.get_color(), alpha=0.15 if thick else 0.07, linewidth=0)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    floor = ((read_floor(out) or {}).get("metrics") or {}).get(metric)
    if floor is not None:
        ax.axhline(100 * floor, color="grey", linestyle="--", linewidth=1, label="raw pixels")
    if training:
        ax.set_yscale("log")  # a loss falls by orders of magnitude
    ax.set_xlabel("training steps")
    split = "validation" if any(f"val_{metric}" in row for _, results in arms for r in results
                                for row in r["history"]) else "test"
    ax.set_ylabel(f"{metric} (training sample, lower is better), mean over seeds" if training
                  else f"{split} {metric} (%), mean over seeds")
    ax.set_title("\n".join(textwrap.wrap(f"{claim}: {CLAIMS[claim]['source']}", 110)), fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    path = os.path.join(out, f"{claim}-curves.png")
    fig.tight_layout()
    fig.savefig(path + ".tmp.png", dpi=110)
    plt.close(fig)
    os.replace(path + ".tmp.png", path)
    return path


# --------------------------------------------------------------------------- CLI


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--claim", action="append", choices=sorted(CLAIMS),
                   help="experiment(s) to run, each testing the claims that name it (repeatable)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--budget", choices=sorted(BUDGETS), default="standard")
    p.add_argument("--steps", type=int, help="training steps per arm (overrides the budget)")
    p.add_argument("--train-classes", type=int, help="training classes (overrides the budget)")
    p.add_argument("--test-classes", type=int, help="test classes evaluated (overrides the budget)")
    p.add_argument("--data", help="the kanji-fonts set (default: kanji_fonts.py's cache folder)")
    p.add_argument("--out", help="results folder (default study/results/<budget>: the JSON "
                                 "results, reports and curves are committed; run folders and views are not)")
    p.add_argument("--report", action="store_true", help="only write the report of what is done")
    p.add_argument("--list", action="store_true", help="list the claims and their arms")
    p.add_argument("--wanted", action="store_true",
                   help="list the runs the verdicts still ask for (checks open on fewer than "
                        f"{verdicts.MIN_SEEDS} seeds), the results without a data set checksum and the "
                        "probes of runs trained again since, as commands, with their cost")
    p.add_argument("--rerun-unrecorded", action="store_true",
                   help="train again the runs whose result records no data set checksum (made before "
                        "provenance was recorded); the new result keeps the earlier one's figures as 'replaces'")
    p.add_argument("--verify-provenance", action="store_true",
                   help="train again the runs whose result records a git commit ending in '+dirty' (trained "
                        "with uncommitted changes) from this committed checkout; the new result keeps the "
                        "earlier one's figures as 'replaces', and 'replaces.figures' says whether the metrics "
                        f"came out bit-identical, within {SAME_FIGURES_TOLERANCE:g}, or differ")
    p.add_argument("--arm", action="append",
                   help="train only this arm of the --claim experiments (repeatable; default: all their arms)")
    p.add_argument("--verbose", action="store_true", help="show train.py's full output")
    return p


def build_report_parser():
    p = argparse.ArgumentParser(prog="reproduce.py report",
                                description="Rewrite REPORT.md's generated block and report.md from the "
                                            "committed results, through the verdict function.")
    p.add_argument("--out", default=os.path.join(HERE, "results", "standard"), help="results folder")
    p.add_argument("--results", default=RESULTS_PATH, help="the REPORT.md to rewrite")
    p.add_argument("--check", action="store_true", help="write nothing; fail when the block is stale")
    return p


def report_main(argv):
    args = build_report_parser().parse_args(argv)
    out = os.path.abspath(args.out)
    try:
        if args.check:
            if not write_results(out, args.results, check=True):
                print(f"{args.results}: the reproduction block is stale; run python study/reproduce.py report",
                      file=sys.stderr)
                return 1
            return 0
        for folder in [out] + beside_outs(out):
            write_report_md(folder)
        write_results(out, args.results)
    except (MixedDataVersions, note_figures.NoteFigureError) as err:
        sys.exit(f"reproduce.py: {err}")
    print(f"wrote {args.results} and {os.path.join(out, 'report.md')}")
    return 0


def verify_floor_main(argv):
    p = argparse.ArgumentParser(prog="reproduce.py verify-floor",
                                description="Recompute the raw-pixel floor of a budget's results from the kanji "
                                            "set and compare it with their floor.json: the same figures, the same "
                                            "test images. A floor that predates the checksum record and matches "
                                            "gets the set's checksum.")
    p.add_argument("--budget", choices=sorted(BUDGETS), default="standard")
    add_probe_arguments(p)
    args = p.parse_args(argv)
    out, data_dir = probe_folders(args)
    budget = BUDGETS[args.budget]
    view = make_view(data_dir, out, budget["train_classes"], budget["test_classes"])
    differences = verify_floor(view, out)
    checksum = (view_checksum(view) or "not recorded")[:12]
    if differences:
        print(f"{os.path.join(out, 'floor.json')} was not scored on the test images of the set at {data_dir} "
              f"(checksum {checksum}…): {'; '.join(differences)}. Its results are of another version of the set: "
              "keep new runs apart from them (another --out).", file=sys.stderr)
        return 1
    print(f"{os.path.join(out, 'floor.json')} matches the floor recomputed from {data_dir} (checksum {checksum}…): "
          "the same test images.")
    return 0


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["report"]:
        return report_main(argv[1:])
    if argv[:1] == ["verify-floor"]:
        return verify_floor_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.list:
        for claim, spec in CLAIMS.items():
            tested = ", ".join(row["id"] for row in paper_claims.rows_of(claim))
            print(f"{claim}: {spec['source']}\n  claims: {tested}\n  arms: {', '.join(claim_arms(claim))}")
        untested = [row["id"] for row in paper_claims.CLAIMS if row.get("untested")]
        print(f"untested claims (reasons in study/REPORT.md): {', '.join(untested)}")
        return 0
    if args.wanted:
        budget_name = args.budget + ("-custom" if any(getattr(args, k) is not None
                                                      for k in ("steps", "train_classes", "test_classes")) else "")
        print(wanted_text(os.path.abspath(args.out or os.path.join(HERE, "results", budget_name))))
        return 0
    if not args.claim:
        build_parser().error("give --claim (or --list, --wanted)")
    from tfdml.runs import RunError
    budget = dict(BUDGETS[args.budget])
    for key in ("steps", "train_classes", "test_classes"):
        if getattr(args, key) is not None:
            budget[key] = getattr(args, key)
    custom = any(getattr(args, k) is not None for k in ("steps", "train_classes", "test_classes"))
    out = os.path.abspath(args.out or os.path.join(HERE, "results", args.budget + ("-custom" if custom else "")))
    if not args.report:
        require_committed_tree()
        data_dir = kanji_set(args.data)
        view = make_view(data_dir, out, budget["train_classes"], budget["test_classes"])
        floor = raw_pixel_floor(view, out)["metrics"]
        print("raw-pixel floor on the test classes: " + ", ".join(f"{k} {v:.4f}" for k, v in floor.items()))
        arms = list(dict.fromkeys(a for c in args.claim for a in claim_arms(c)))
        if args.arm:
            unknown = [a for a in args.arm if a not in arms]
            if unknown:
                sys.exit(f"reproduce.py: --arm {', '.join(unknown)} is not an arm of {', '.join(args.claim)}; "
                         f"their arms: {', '.join(arms)}")
            arms = [a for a in arms if a in args.arm]
        mark_started(out, args.claim)
        figures = {k: v for k, v in budget.items() if k not in BUDGET_TEXT_KEYS}
        print(f"{len(arms)} arms × {len(args.seeds)} seeds, budget {figures}, results in {out}", flush=True)
        for seed in args.seeds:  # every arm of seed 0 first: a verdict needs all arms
            for arm in arms:
                result_path = os.path.join(out, "arms", arm, f"seed-{seed}.json")
                rerun = None  # the reason to train a finished run again (reruns.REASONS)
                if os.path.exists(result_path):
                    done = run_arm(arm, seed, out, data_dir, budget)  # checks the stored config
                    asked = [(args.rerun_unrecorded, reruns.UNRECORDED), (args.verify_provenance, reruns.UNCOMMITTED)]
                    rerun = next((why for flag, why in asked if flag and NEEDS_RERUN[why](done)), None)
                    if not rerun:
                        continue
                lock = runner_lock(out, arm, seed)
                try:
                    lock.acquire()
                except RunError:
                    holder = lock.holder() or {}
                    print(f"[{datetime.datetime.now():%H:%M:%S}] {arm} seed {seed}: taken by another runner "
                          f"(PID {holder.get('pid')}); skipped", flush=True)
                    continue
                try:
                    if rerun and os.path.exists(result_path) and not set_aside(arm, seed, out, rerun):
                        continue  # another runner reran it meanwhile
                    print(f"[{datetime.datetime.now():%H:%M:%S}] {arm} seed {seed}"
                          + (f" (rerun: its result was of {rerun})" if rerun else ""), flush=True)
                    result = run_arm(arm, seed, out, data_dir, budget, quiet=not args.verbose)
                finally:
                    lock.release()
                figures = (result.get("replaces") or {}).get("figures") or {}
                print(f"    R@1 {result['metrics'].get('recall@1', float('nan')):.4f} in {result['seconds']:.0f} s"
                      + (f"; metrics against the run it replaces: {figures['outcome']}" if figures else ""),
                      flush=True)
    try:
        # report.md holds every experiment started in the folder, not only the ones of this command
        reports = write_report_md(out)
    except MixedDataVersions as err:
        sys.exit(f"reproduce.py: {err}")
    print("\n".join(reports.get(c) or report(c, out) for c in args.claim))
    return 0


if __name__ == "__main__":
    sys.exit(main())
