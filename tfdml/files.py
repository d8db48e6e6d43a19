"""Files that are either complete or absent: atomic writes for everything a run keeps.

A process can be killed at any moment, also while it writes; a disk can
fill. Every file tfdml writes for a run (backups, checkpoints, metrics,
history, configs) goes through :func:`atomic_path`: the content is written to
a temporary file in the same directory, flushed to disk (``fsync``), then
renamed over the target, which POSIX makes atomic. A reader sees the old
file or the new one, never a half-written one, and a failed write leaves the
old file in place.

A full disk becomes :class:`DiskFullError`, an ``OSError`` whose message
names the path and the free space, so that the command lines can print it
as one line.
"""

import contextlib
import errno
import json
import os
import shutil
import tempfile


class DiskFullError(OSError):
    """No space left (or quota exceeded) while writing ``path``."""


def free_space(path):
    """Free bytes on the filesystem holding ``path`` (or its nearest existing parent)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def _human(num):
    if num is None:
        return "unknown"
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if num < 1024 or unit == "TB":
            return f"{num:.0f} {unit}" if unit == "bytes" else f"{num:.1f} {unit}"
        num /= 1024.0
    return f"{num:.1f} TB"


def ensure_space(path, needed):
    """Raise :class:`DiskFullError` before writing ``needed`` bytes to ``path``
    when the filesystem has less free space (a write that runs out of space
    half-way fails deep inside h5py, which has crashed the process)."""
    free = free_space(path)
    if free is not None and needed and free < needed:
        raise DiskFullError(
            errno.ENOSPC,
            f"Not enough space on the device to write {path}: it needs about {_human(needed)}, "
            f"{_human(free)} free; free some space or choose another output_dir. Earlier files are intact",
        )


def _fsync_dir(directory):
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - not every platform opens directories
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _raise_if_disk_full(err, path, directory):
    """Raise :class:`DiskFullError` naming ``path`` and the free space when
    ``err`` says the disk is full; return otherwise."""
    if _is_disk_full(err):
        raise DiskFullError(
            errno.ENOSPC,
            f"No space left on the device while writing {path} "
            f"({_human(free_space(directory))} free); free some space or choose another "
            "output_dir. Earlier files are intact",
        ) from None


def _is_disk_full(err):
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(err)
    return "No space left on device" in text or "Disk quota exceeded" in text


@contextlib.contextmanager
def atomic_path(path, suffix=None):
    """Yield a temporary path next to ``path``; on success it replaces ``path`` atomically.

    The caller writes the temporary file by any means (``h5py``, Keras'
    ``save_weights``, ``open``). On an exception the temporary file is removed
    and ``path`` is left as it was; a full disk is raised as
    :class:`DiskFullError` naming ``path`` and the free space.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    base = os.path.basename(path)
    # Keep the target's extension: some writers (Keras) insist on it.
    suffix = suffix if suffix is not None else "".join(_extensions(base))
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=f".tmp{suffix}", dir=directory)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(directory)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        _raise_if_disk_full(err, path, directory)
        raise


@contextlib.contextmanager
def atomic_directory(path):
    """Yield a temporary directory next to ``path``; on success it becomes ``path``.

    For writers that produce a directory (a SavedModel). The new directory is
    complete before it is renamed into place; an existing ``path`` is first
    renamed aside and removed only after the new one is in place, so a kill
    leaves the old directory, the new one, or (between the two renames) the
    old one under a ``.<name>.old.*`` name, never a half-written ``path``.
    """
    path = os.fspath(path).rstrip(os.sep) or os.sep
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    base = os.path.basename(path)
    tmp = tempfile.mkdtemp(prefix=f".{base}.", suffix=".tmp", dir=directory)
    try:
        yield tmp
        old = None
        if os.path.exists(path):
            old = tempfile.mkdtemp(prefix=f".{base}.old.", dir=directory)
            os.rmdir(old)
            os.replace(path, old)
        os.replace(tmp, path)
        _fsync_dir(directory)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        _raise_if_disk_full(err, path, directory)
        raise


def _extensions(name):
    """``"a.weights.h5"`` -> ``[".weights", ".h5"]`` (Keras checks the full suffix)."""
    parts = name.split(".")
    return ["." + p for p in parts[1:]] if len(parts) > 1 else []


def write_text(path, text):
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)


def write_json(path, value, **kwargs):
    """Write ``value`` as JSON to ``path`` atomically."""
    write_text(path, json.dumps(value, **{"indent": 2, **kwargs}))


def save_weights(model, path):
    """``model.save_weights(path)``, atomically (a kill leaves the old file)."""
    with atomic_path(path) as tmp:
        model.save_weights(tmp)


def save_model(model, path):
    """``model.save(path)`` for a ``.keras`` file, atomically."""
    with atomic_path(path) as tmp:
        model.save(tmp)
