"""Run directories: atomic files, backups with a fallback, the lock, finished runs."""

import errno
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from tfdml import files, runs


def _model(seed=0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    model.fit(np.ones((4, 3)), np.ones((4, 2)), epochs=1, verbose=0)  # optimizer state exists
    return model


def _same_weights(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a.get_weights(), b.get_weights()))


# -- atomic files -------------------------------------------------------------------


def test_atomic_path_keeps_the_old_file_when_the_writer_fails(tmp_path):
    target = tmp_path / "metrics.json"
    files.write_json(target, {"a": 1})
    with pytest.raises(RuntimeError):
        with files.atomic_path(target) as tmp:
            with open(tmp, "w") as fh:
                fh.write('{"a": 2')  # half written
            raise RuntimeError("killed")
    assert json.loads(target.read_text()) == {"a": 1}
    assert os.listdir(tmp_path) == ["metrics.json"]  # no temporary file left


def test_disk_full_is_one_clear_error_naming_path_and_free_space(tmp_path, monkeypatch):
    target = tmp_path / "state.json"
    files.write_json(target, {"epoch": 1})

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", no_space)
    with pytest.raises(files.DiskFullError, match=r"No space left on the device while writing .*state\.json "
                                                  r"\(.* free\)"):
        files.write_json(target, {"epoch": 2})
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"epoch": 1}


def test_save_weights_is_atomic_and_keeps_the_keras_suffix(tmp_path):
    model = _model()
    path = tmp_path / "w.weights.h5"
    files.save_weights(model, path)
    other = _model(seed=1)
    other.load_weights(path)
    assert _same_weights(model, other)


# -- backups ------------------------------------------------------------------------


def test_backup_round_trip_keeps_two_epochs(tmp_path):
    backup = runs.Backup(tmp_path / "backup")
    model = _model()
    assert backup.state() is None and backup.epoch == 0
    for epoch in (1, 2, 3):
        model.layers[0].kernel.assign(np.full((3, 2), float(epoch)))
        backup.save(model, epoch, {"best": 0.1 * epoch})
    assert sorted(os.listdir(tmp_path / "backup")) == [
        "epoch-0002.weights.h5", "epoch-0003.weights.h5", "state.json"]
    restored = _model(seed=5)
    state, notes = backup.restore(restored)
    assert state["epoch"] == 3 and state["best"] == pytest.approx(0.3) and not notes
    np.testing.assert_array_equal(restored.layers[0].kernel.numpy(), 3.0)
    assert int(restored.optimizer.iterations) == int(model.optimizer.iterations)


def test_a_damaged_backup_falls_back_to_the_previous_epoch(tmp_path):
    backup = runs.Backup(tmp_path / "backup")
    model = _model()
    for epoch in (1, 2):
        model.layers[0].kernel.assign(np.full((3, 2), float(epoch)))
        backup.save(model, epoch)
    (tmp_path / "backup" / "epoch-0002.weights.h5").write_bytes(b"")  # as a kill left it
    restored = _model(seed=5)
    state, notes = backup.restore(restored)
    assert state["epoch"] == 1
    assert "backup of epoch 2" in notes[0] and "resumed from the backup of epoch 1" in notes[0]
    np.testing.assert_array_equal(restored.layers[0].kernel.numpy(), 1.0)
    (tmp_path / "backup" / "epoch-0001.weights.h5").write_bytes(b"junk")
    with pytest.raises(runs.RunError, match="No backup .* can be loaded.*--fresh"):
        backup.restore(restored)


# -- the lock -----------------------------------------------------------------------


def test_a_second_live_run_is_refused_naming_pid_and_host(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / ".lock").write_text(json.dumps({"pid": holder.pid, "host": runs.socket.gethostname()}))
        with pytest.raises(runs.RunError, match=rf"in use by another run \(PID {holder.pid} on host"):
            runs.RunLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()
    # The holder is gone: its lock is stale and taken over.
    with runs.RunLock(tmp_path) as lock:
        assert lock.held and json.loads((tmp_path / ".lock").read_text())["pid"] == os.getpid()
    assert not (tmp_path / ".lock").exists()


def test_finished_runs_are_protected(tmp_path):
    runs.check_not_finished(tmp_path)  # nothing there yet
    runs.mark_finished(tmp_path, {"finished_at": "2026-11-23 12:00:00"})
    with pytest.raises(runs.RunError, match=r"holds a finished run .*finished\.json.*--overwrite"):
        runs.check_not_finished(tmp_path)
    runs.check_not_finished(tmp_path, overwrite=True)


# -- callbacks ----------------------------------------------------------------------


def test_checkpoint_with_a_restored_best_saves_only_on_improvement(tmp_path):
    model = _model()
    path = tmp_path / "best.weights.h5"
    checkpoint = runs.AtomicCheckpoint(str(path), monitor="map@r", mode="max", best=0.4)
    checkpoint.set_model(model)
    checkpoint.on_epoch_end(2, {"map@r": 0.388})  # worse than before the resume
    assert not path.exists()
    checkpoint.on_epoch_end(3, {"map@r": 0.41})
    assert path.exists() and checkpoint.best == pytest.approx(0.41)


def test_history_csv_continues_the_backed_up_rows(tmp_path):
    path = tmp_path / "history.csv"
    history = runs.HistoryCSV(str(path), rows=[{"epoch": 1, "loss": 1.5}, {"epoch": 2, "loss": 1.25}])
    history.on_epoch_end(1, {"loss": 1.0, "map@r": 0.5})  # the second epoch replayed after a kill
    history.on_epoch_end(2, {"loss": 0.75, "map@r": 0.625})
    assert path.read_text().splitlines() == [
        "epoch,loss,map@r", "1,1.5,", "2,1.0,0.5", "3,0.75,0.625"]


def test_history_csv_counts_epochs_from_1_as_the_progress_bar_and_the_summary(tmp_path):
    """Keras calls on_epoch_end(0) after the first epoch, which its progress bar shows
    as "Epoch 1/N"; the row of that epoch is epoch 1 (the model after 1 epoch), as the
    backups (epoch-0001), the best checkpoint's epoch and the run summary count."""
    path = tmp_path / "history.csv"
    model = _model()
    history = runs.HistoryCSV(str(path))
    model.fit(np.ones((4, 3)), np.ones((4, 2)), epochs=2, verbose=0, callbacks=[history])
    assert [line.split(",")[0] for line in path.read_text().splitlines()] == ["epoch", "1", "2"]


def test_history_csv_renumbers_the_rows_of_a_backup_that_counted_from_0(tmp_path):
    """A backup written when history.csv counted epochs from 0 resumes into one numbering."""
    path = tmp_path / "history.csv"
    history = runs.HistoryCSV(str(path), rows=[{"epoch": 0, "loss": 1.5}, {"epoch": 1, "loss": 1.25}])
    history.on_epoch_end(2, {"loss": 1.0})
    assert path.read_text().splitlines() == ["epoch,loss", "1,1.5", "2,1.25", "3,1.0"]


def test_a_backup_that_cannot_fit_is_refused_before_writing(tmp_path, monkeypatch):
    """h5py running out of space half-way has crashed the process:
    the next backup's size is checked against the free space first."""
    backup = runs.Backup(tmp_path / "backup")
    model = _model()
    backup.save(model, 1)
    monkeypatch.setattr(files, "free_space", lambda path: 100)
    with pytest.raises(files.DiskFullError, match=r"Not enough space .*epoch-0002\.weights\.h5.*100 bytes free"):
        backup.save(model, 2)
    monkeypatch.undo()
    assert backup.epoch == 1
    assert sorted(os.listdir(tmp_path / "backup")) == ["epoch-0001.weights.h5", "state.json"]


def test_the_lock_file_gets_the_mode_of_a_plain_open(tmp_path):
    old = os.umask(0o002)
    try:
        with runs.RunLock(tmp_path):
            assert os.stat(tmp_path / ".lock").st_mode & 0o777 == 0o664
    finally:
        os.umask(old)


def test_the_best_checkpoint_knows_its_epoch(tmp_path):
    """best_epoch counts epochs from 1 (the model after that many), also when
    the checkpoint continues a resumed run."""
    checkpoint = runs.AtomicCheckpoint(str(tmp_path / "best.weights.h5"), monitor="map@r",
                                       best=0.5, best_epoch=2)
    checkpoint.set_model(_model())
    checkpoint.on_epoch_end(2, {"map@r": 0.4})
    assert checkpoint.best_epoch == 2
    checkpoint.on_epoch_end(3, {"map@r": 0.6})
    assert checkpoint.best_epoch == 4 and checkpoint.best == pytest.approx(0.6)
