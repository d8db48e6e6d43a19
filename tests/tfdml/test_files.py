"""tfdml.files: atomic writes give the modes a plain open() / os.makedirs would,
and stale temporaries of dead writers are recognised."""

import os
import stat

import pytest

from tfdml import files


@pytest.fixture(params=[0o022, 0o077, 0o002])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_atomic_files_get_the_mode_of_a_plain_open(tmp_path, umask):
    plain = tmp_path / "plain.txt"
    with open(plain, "w") as fh:
        fh.write("x")
    files.write_text(tmp_path / "new.txt", "x")
    files.write_json(tmp_path / "sub" / "new.json", {"a": 1})
    with files.atomic_path(tmp_path / "any.weights.h5") as tmp:
        with open(tmp, "wb") as fh:  # a writer that keeps the temporary file's mode
            fh.write(b"\0")
    assert _mode(tmp_path / "new.txt") == _mode(plain) == 0o666 & ~umask
    assert _mode(tmp_path / "sub" / "new.json") == 0o666 & ~umask
    assert _mode(tmp_path / "any.weights.h5") == 0o666 & ~umask
    os.makedirs(tmp_path / "made")
    assert _mode(tmp_path / "sub") == _mode(tmp_path / "made") == 0o777 & ~umask


def test_an_existing_file_keeps_its_mode_as_with_open(tmp_path, umask):
    target = tmp_path / "kept.txt"
    target.write_text("old")
    os.chmod(target, 0o640)
    files.write_text(target, "new")
    assert target.read_text() == "new" and _mode(target) == 0o640


def test_atomic_directories_get_the_mode_of_makedirs(tmp_path, umask):
    with files.atomic_directory(tmp_path / "lookup") as tmp:
        os.makedirs(os.path.join(tmp, "variables"))
        with open(os.path.join(tmp, "saved_model.pb"), "w") as fh:
            fh.write("x")
    os.makedirs(tmp_path / "made")
    assert _mode(tmp_path / "lookup") == _mode(tmp_path / "made") == 0o777 & ~umask
    os.chmod(tmp_path / "lookup", 0o750)  # replaced again: keeps its mode, as an existing folder
    with files.atomic_directory(tmp_path / "lookup") as tmp:
        pass
    assert _mode(tmp_path / "lookup") == 0o750


def _dead_pid():
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_temporaries_of_dead_writers_are_removed_only(tmp_path):
    dead, live = _dead_pid(), os.getppid()
    (tmp_path / "checkpoints").mkdir()
    stale = [tmp_path / "checkpoints" / f".best.weights.h5.{dead}.ab_cd123.tmp.weights.h5",
             tmp_path / f".metrics.json.{dead}.zzzzzzzz.tmp.json",
             tmp_path / f".lookup.{dead}.a1b2c3d4.tmp",
             tmp_path / f".lookup.old.{dead}.a1b2c3d4"]
    kept = [tmp_path / f".metrics.json.{live}.zzzzzzzz.tmp.json",  # a live writer's
            tmp_path / f".metrics.json.{os.getpid()}.zzzzzzzz.tmp.json",  # this process's
            tmp_path / ".hidden", tmp_path / "notes.tmp", tmp_path / f".x.{dead}.short.tmp",
            tmp_path / "model.keras"]
    for path in stale[:2] + kept:
        path.write_text("x")
    for path in stale[2:]:
        (path / "variables").mkdir(parents=True)
    with files.atomic_path(tmp_path / "live.txt") as tmp:  # a write in progress here
        removed = files.remove_stale_temporaries(tmp_path)
        assert os.path.exists(tmp)
    assert sorted(removed) == sorted(map(str, stale))
    assert not any(p.exists() for p in stale) and all(p.exists() for p in kept)


def test_a_refused_write_shows_two_different_sizes(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "free_space", lambda path: 1_363_148)
    with pytest.raises(files.DiskFullError) as err:
        files.ensure_space(tmp_path / "x", 1_363_200)  # both "1.3 MB"
    message = str(err.value)
    assert "1,363,200 bytes" in message and "1,363,148 bytes free" in message
    monkeypatch.setattr(files, "free_space", lambda path: 100)
    with pytest.raises(files.DiskFullError, match=r"about 1\.3 MB, 100 bytes free"):
        files.ensure_space(tmp_path / "x", 1_363_200)
