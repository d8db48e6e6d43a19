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

Written files and directories get the modes a plain ``open()`` /
``os.makedirs`` would give them (``0o666`` / ``0o777`` less the umask, or the
mode of the file or directory they replace), not the private modes of the
temporary ones. Temporary names hold the writer's PID
(``.<name>.<pid>.<random>.tmp<ext>``), so that
:func:`remove_stale_temporaries` removes those of dead writers only.
"""

import contextlib
import errno
import json
import os
import re
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


def _human_pair(needed, free):
    """``needed`` and ``free`` as text that tells them apart: where one decimal
    rounds both to the same figure, exact byte counts."""
    a, b = _human(needed), _human(free)
    if a == b and needed != free:
        return f"{needed:,} bytes", f"{free:,} bytes"
    return a, b


def ensure_space(path, needed):
    """Raise :class:`DiskFullError` before writing ``needed`` bytes to ``path``
    when the filesystem has less free space (a write that runs out of space
    half-way fails deep inside h5py, which has crashed the process)."""
    free = free_space(path)
    if free is not None and needed and free < needed:
        needs, has = _human_pair(needed, free)
        raise DiskFullError(
            errno.ENOSPC,
            f"Not enough space on the device to write {path}: it needs about {needs}, "
            f"{has} free; free some space or choose another output_dir. Earlier files are intact",
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


def umask():
    """The process's umask (read without changing it where /proc tells it)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # pragma: no cover - systems without /proc
    os.umask(mask)
    return mask


def _plain_mode(path, default):
    """The mode ``open()`` / ``os.makedirs`` would leave ``path`` with: its own
    when it exists, else ``default`` less the umask."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        return default & ~umask()


#: A temporary name of this module: ``.<name>.<pid>.<8 random characters>.tmp<ext>``
#: (files, directories) or ``.<name>.old.<pid>.<random>`` (a directory being replaced).
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.(?:(?P<pid>[0-9]+)\.[a-z0-9_]{8}\.tmp(?:\.[^.]+)*"
                        r"|old\.(?P<old_pid>[0-9]+)\.[a-z0-9_]{8})$")


def _temporary_prefix(base, old=False):
    return f".{base}.{'old.' if old else ''}{os.getpid()}."


def _process_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's live process / not a PID
        return True
    return True


def remove_stale_temporaries(directory):
    """Remove the temporary files and directories that writers of this module
    left under ``directory`` (recursively) when they died mid-write: only names
    of this module's pattern whose PID is no live process (a live writer's are
    kept, this process's too). Call it where no other host writes (e.g. under a
    :class:`tfdml.runs.RunLock`). Returns the removed paths."""
    removed = []
    for root, dirs, names in os.walk(directory):
        for name in list(dirs) + names:
            match = _TEMPORARY.match(name)
            if match is None:
                continue
            pid = int(match["pid"] or match["old_pid"])
            if pid == os.getpid() or _process_alive(pid):
                continue
            path = os.path.join(root, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
                dirs.remove(name)
            else:
                with contextlib.suppress(OSError):
                    os.remove(path)
            removed.append(path)
    return removed


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
    mode = _plain_mode(path, 0o666)
    fd, tmp = tempfile.mkstemp(prefix=_temporary_prefix(base), suffix=f".tmp{suffix}", dir=directory)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, mode)  # mkstemp's file is private; the writer may have kept that
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
    mode = _plain_mode(path, 0o777)
    tmp = tempfile.mkdtemp(prefix=_temporary_prefix(base), suffix=".tmp", dir=directory)
    try:
        yield tmp
        os.chmod(tmp, mode)  # mkdtemp's directory is private
        old = None
        if os.path.exists(path):
            old = tempfile.mkdtemp(prefix=_temporary_prefix(base, old=True), dir=directory)
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
