"""Run directories that never lose work and never mix two runs.

A training run writes into one ``output_dir``. This module keeps that
directory consistent whatever happens to the process:

* :class:`Backup` — the per-epoch backup of the whole training state
  (weights, optimizer, the loss's learned parameters and sampler seed, the
  best checkpoint value, the history rows and the resolved config). Each
  backup is written atomically (:mod:`tfdml.files`) and the previous one is
  kept until the new one is complete, so a kill while writing leaves the
  last good backup; a damaged backup falls back to the one before.
* :class:`RunLock` — one live run per directory: a second run fails at once,
  naming the process and host that holds the directory; a lock left by a dead
  process is taken over.
* :func:`check_not_finished` / :func:`mark_finished` — a finished run is not
  overwritten unless asked (``finished.json`` marks it).
* :class:`BackupCallback`, :class:`AtomicCheckpoint`, :class:`HistoryCSV` —
  the Keras callbacks that write those files atomically.
"""

import json
import os
import shutil
import socket

import keras

from tfdml import files


class RunError(RuntimeError):
    """A problem with the run directory, with a message naming the fix."""


# -- finished runs ------------------------------------------------------------------

FINISHED = "finished.json"


def finished_marker(output_dir):
    return os.path.join(output_dir, FINISHED)


def check_not_finished(output_dir, overwrite=False):
    """Refuse to train into a directory that holds a finished run, unless ``overwrite``."""
    marker = finished_marker(output_dir)
    if overwrite or not os.path.exists(marker):
        return
    when = ""
    try:
        with open(marker) as fh:
            when = f" on {json.load(fh).get('finished_at', '?')}"
    except (OSError, ValueError):
        pass
    raise RunError(
        f"{output_dir} holds a finished run (marked by {marker}, finished{when}). Pass --overwrite "
        f"to train it again from scratch, or set another output_dir (--set output_dir=...)."
    )


def mark_finished(output_dir, record):
    files.write_json(finished_marker(output_dir), record)


def clear_finished(output_dir):
    marker = finished_marker(output_dir)
    if os.path.exists(marker):
        os.remove(marker)


# -- one live run per directory -----------------------------------------------------


def _process_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - another user's live process
        return True
    return True


class RunLock:
    """An exclusive lock on ``output_dir`` (a ``.lock`` file holding PID and host;
    ``name``: another file name, for several locks in one directory).

    ``acquire`` fails with :class:`RunError` naming the holder when another
    live process holds the directory. A lock whose process is gone (same
    host, PID not running) is stale and taken over.
    """

    def __init__(self, output_dir, name=".lock"):
        self.path = os.path.join(output_dir, name)
        self.held = False

    def holder(self):
        """{"pid", "host"} of the process holding the lock (None: no lock, or unreadable)."""
        try:
            with open(self.path) as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return None

    def acquire(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        me = {"pid": os.getpid(), "host": socket.gethostname()}
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            except FileExistsError:
                holder = self.holder()
                if holder and holder.get("pid") == me["pid"] and holder.get("host") == me["host"]:
                    self.held = True  # re-entrant within one process
                    return self
                stale = holder is None or (
                    holder.get("host") == me["host"] and not _process_alive(int(holder.get("pid", -1)))
                )
                if not stale:
                    raise RunError(
                        f"{os.path.dirname(self.path)} is in use by another run (PID {holder.get('pid')} "
                        f"on host {holder.get('host')}, lock {self.path}). Wait for it to finish, or set "
                        "another output_dir; if that process is gone, delete the lock file."
                    ) from None
                os.remove(self.path)  # a dead process's lock
                continue
            with os.fdopen(fd, "w") as fh:
                json.dump(me, fh)
            self.held = True
            return self
        raise RunError(f"Could not take the lock {self.path}; delete it if no run uses the directory.")

    def release(self):
        if self.held and self.holder() == {"pid": os.getpid(), "host": socket.gethostname()}:
            os.remove(self.path)
        self.held = False

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


# -- backups ------------------------------------------------------------------------


class Backup:
    """The per-epoch backup of a run: ``backup/state.json`` naming the weights
    file of the last completed epoch (``epoch-NNNN.weights.h5``) and the one
    before, plus whatever the run needs to continue exactly (``extra``: the
    best checkpoint value, the history rows, the resolved config).

    ``save`` writes the new weights file, then replaces ``state.json``
    atomically, then removes weights older than the previous epoch: at every
    moment the directory holds a complete backup.
    """

    STATE = "state.json"

    def __init__(self, directory):
        self.directory = directory
        self.state_path = os.path.join(directory, self.STATE)

    def state(self):
        """The saved state dict, or None when there is no backup."""
        if not os.path.exists(self.state_path):
            return None
        try:
            with open(self.state_path) as fh:
                return json.load(fh)
        except (OSError, ValueError) as err:
            raise RunError(
                f"The backup state {self.state_path} cannot be read ({err}); rerun with --fresh "
                "to start over."
            ) from None

    @property
    def epoch(self):
        state = self.state()
        return 0 if state is None else int(state["epoch"])

    def describe(self):
        """'<dir> (after epoch N)' or 'none yet (no epoch completed)' for messages."""
        epoch = self.epoch
        return f"{self.directory} (after epoch {epoch})" if epoch else "none yet (no epoch completed)"

    def save(self, model, epoch, extra=None):
        os.makedirs(self.directory, exist_ok=True)
        name = f"epoch-{epoch:04d}.weights.h5"
        old = self.state()
        if old is not None:  # the new backup is about as large as the last one
            last = os.path.join(self.directory, old["weights"])
            if os.path.exists(last):
                files.ensure_space(os.path.join(self.directory, name), int(1.1 * os.path.getsize(last)))
        files.save_weights(model, os.path.join(self.directory, name))
        entry = {"epoch": int(epoch), "weights": name, **(extra or {})}
        previous = None
        if old is not None and old.get("weights") != name:
            previous = {k: v for k, v in old.items() if k != "previous"}
        files.write_json(self.state_path, {**entry, "previous": previous})
        keep = {name} | ({previous["weights"]} if previous else set())
        for stale in os.listdir(self.directory):
            if stale.endswith(".weights.h5") and stale not in keep:
                os.remove(os.path.join(self.directory, stale))

    def restore(self, model):
        """Load the last good backup into ``model``.

        Returns ``(state, notes)``: the state of the epoch restored (None
        without a backup) and messages for the user (a damaged backup that was
        skipped). Raises :class:`RunError` when no backup can be loaded.
        """
        state = self.state()
        if state is None:
            return None, []
        notes = []
        for candidate in (state, state.get("previous")):
            if not candidate:
                continue
            path = os.path.join(self.directory, candidate["weights"])
            try:
                load_training_state(model, path)
            except (OSError, ValueError) as err:
                notes.append(
                    f"the backup of epoch {candidate['epoch']} ({path}) is damaged "
                    f"({str(err).splitlines()[0] if str(err) else type(err).__name__})"
                )
                continue
            if notes:
                notes[-1] += f"; resumed from the backup of epoch {candidate['epoch']} instead."
            return candidate, notes
        raise RunError(
            f"No backup in {self.directory} can be loaded: {'; '.join(notes)}. Rerun with --fresh to "
            "start over."
        )

    def remove(self):
        shutil.rmtree(self.directory, ignore_errors=True)


def load_training_state(model, path):
    """Load a weights file of :meth:`Backup.save` or :class:`AtomicCheckpoint`
    (the weights and the optimizer state) into ``model``."""
    if not os.path.exists(path):
        raise OSError(f"{path} is missing")
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and not optimizer.built:
        optimizer.build(model.trainable_variables)
    model.load_weights(path)


# -- callbacks ----------------------------------------------------------------------


class BackupCallback(keras.callbacks.Callback):
    """Saves a :class:`Backup` at the end of every epoch.

    ``extra``: a function ``epoch -> dict`` of what else the backup keeps
    (JSON-serialisable). Put this callback **last**: the files the other
    callbacks write for an epoch then exist before the backup says the epoch
    is complete, and a run killed in between replays that epoch identically.
    """

    def __init__(self, backup, extra=None):
        super().__init__()
        self.backup = backup
        self.extra = extra

    def on_epoch_end(self, epoch, logs=None):
        self.backup.save(self.model, epoch + 1, self.extra(epoch) if self.extra else None)


class AtomicCheckpoint(keras.callbacks.Callback):
    """Saves the weights to ``path`` after every epoch, or only when ``monitor``
    improves (``mode`` "max" or "min"), atomically.

    ``best`` / ``best_epoch``: the best value so far and the epoch it was
    reached at (counted from 1: the model after that many epochs), e.g.
    restored from a backup, so that a resumed run saves exactly what an
    uninterrupted one would and knows which epoch the file holds.
    """

    def __init__(self, path, monitor=None, mode="max", best=None, best_epoch=None):
        super().__init__()
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}.")
        self.path = path
        self.monitor = monitor
        self.mode = mode
        self.best = best
        self.best_epoch = best_epoch

    def _improves(self, value):
        if self.best is None:
            return True
        return value > self.best if self.mode == "max" else value < self.best

    def on_epoch_end(self, epoch, logs=None):
        if self.monitor is not None:
            value = (logs or {}).get(self.monitor)
            if value is None or not self._improves(float(value)):
                return
            self.best = float(value)
        files.save_weights(self.model, self.path)
        self.best_epoch = epoch + 1


class HistoryCSV(keras.callbacks.Callback):
    """``history.csv``: one row per epoch, the whole file rewritten atomically
    after every epoch (an append cut by a kill would leave half a row).

    The ``epoch`` column counts from 1: the row of Keras' ``on_epoch_end(0)`` is
    epoch 1, the model after one epoch, as Keras' progress bar ("Epoch 1/N"),
    the backups (``epoch-0001``) and :class:`AtomicCheckpoint`'s ``best_epoch`` count.

    ``rows``: the rows of earlier epochs (from a backup) to continue from. Rows
    numbered from 0 (a backup of a tfdml whose history.csv counted epochs from 0:
    its first row was epoch 0) are renumbered from 1.
    """

    def __init__(self, path, rows=None):
        super().__init__()
        self.path = path
        self.rows = [dict(r) for r in rows or []]
        if any(r.get("epoch") == 0 for r in self.rows):
            for row in self.rows:
                row["epoch"] += 1

    def on_epoch_end(self, epoch, logs=None):
        row = {"epoch": epoch + 1}
        for key, value in (logs or {}).items():
            try:
                row[key] = float(value)
            except (TypeError, ValueError):
                continue
        self.rows = [r for r in self.rows if r.get("epoch") != row["epoch"]] + [row]
        self.write()

    def write(self):
        columns = []
        for row in self.rows:
            columns += [k for k in row if k not in columns]
        lines = [",".join(columns)]
        for row in self.rows:
            lines.append(",".join(_csv_value(row.get(c)) for c in columns))
        files.write_text(self.path, "\n".join(lines) + "\n")


def _csv_value(value):
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)
