"""Smart mining in a run: the :class:`tfdml.mining.SmartMiningRefresh` callback of a design
whose batches read a mined table (``SmartMiningDesign``), built from the design's schedule,
with its controller's state kept in the run's backup."""

from tfdml_app.errors import ExperimentError

#: The key of the controller's state in the backup's state.
STATE_KEY = "smart_mining"


def refresh_callback(cfg, design, train_split, state):
    """The refresh callback of ``design`` (None for a design without a mined table), its
    controller restored from ``state`` (a resumed run's backup state, or None)."""
    if not getattr(design, "mined_table", False):
        return None
    if cfg["strategy"] == "multi_worker":
        raise ExperimentError(
            f"design.name = {cfg['design']['name']!r} refreshes its table from a model.fit "
            "callback, which the multi-worker loop does not run; use strategy: default or mirrored.")
    from tfdml import mining
    from tfdml_app import data as data_lib

    params = {"backend": "faiss", "approximate": design.approximate} if design.approximate else {}
    # The neighbours' order: squared and plain euclidean rank alike; cosine as the evaluation's.
    params["distance"] = "cosine" if cfg["evaluation"]["distance"] == "cosine" else "euclidean"
    controller = mining.HardnessController(design.hard_fraction, step=design.step)
    if state and state.get(STATE_KEY):
        controller.restore(state[STATE_KEY])
    return mining.SmartMiningRefresh(
        data_lib.eval_dataset(cfg, train_split), train_split.labels, design.neighbours,
        refresh_every=design.refresh_every, controller=controller, verbose=0, **params)


def backup_state(callback):
    """What the backup keeps of ``callback`` (its controller's state), or {}."""
    if callback is None or callback.controller is None:
        return {}
    return {STATE_KEY: callback.controller.state()}
