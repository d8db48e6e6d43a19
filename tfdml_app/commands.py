"""The names of the command lines, as the user invoked them: the installed
commands (``tfdml-train``, setup.cfg's console_scripts) or the scripts at the
repository's root (``train.py``). Their usage lines, help and error messages
name the command the user typed, and the other commands in the same form."""

import os
import sys

#: ``{tool: (installed command, script)}``.
COMMANDS = {
    "train": ("tfdml-train", "train.py"),
    "evaluate": ("tfdml-evaluate", "evaluate.py"),
    "search": ("tfdml-search", "search.py"),
}


def invoked_as_script():
    """Whether the running program is one of the repository's scripts (``python
    train.py``), from ``sys.argv[0]``; else an installed command (or Python
    code calling a ``main``: those are named as installed)."""
    argv0 = sys.argv[0] if sys.argv else ""
    return os.path.basename(argv0 or "") in {script for _, script in COMMANDS.values()}


def name(tool):
    """How the user calls ``tool`` ("train", "evaluate", "search") the way the
    running command was called: ``train.py`` from a script, else ``tfdml-train``."""
    installed, script = COMMANDS[tool]
    return script if invoked_as_script() else installed
