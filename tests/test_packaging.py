"""Packaging: every install has one TensorFlow distribution, TensorFlow and Keras are
bounded by the newest versions tested, and the environment running the tests is in range."""

import configparser
import importlib.metadata
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Distributions that each install the ``tensorflow`` module: two of them in one
#: environment overwrite each other's files.
TENSORFLOW_DISTRIBUTIONS = {canonicalize_name(n) for n in (
    "tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel", "tensorflow-macos",
    "tensorflow-aarch64", "tensorflow-cpu-aws", "tensorflow-rocm", "intel-tensorflow",
    "tf-nightly", "tf-nightly-cpu", "tf-nightly-gpu", "tf-nightly-intel", "tf-nightly-macos")}


def _setup_cfg():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    return cfg


def _requirements(text):
    return [Requirement(line) for line in text.split("\n") if line.strip() and not line.strip().startswith("#")]


def _core():
    return _requirements(_setup_cfg()["options"]["install_requires"])


def _extras():
    cfg = _setup_cfg()
    return {name: _requirements(value) for name, value in cfg["options.extras_require"].items()}


def _install(extra=None):
    """The requirements of ``pip install tfdml[extra]`` (core plus the extra, with the
    extras it names of tfdml itself)."""
    extras, todo, seen, reqs = _extras(), [extra] if extra else [], set(), list(_core())
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for req in extras[name]:
            if canonicalize_name(req.name) == "tfdml":
                todo.extend(req.extras)
            else:
                reqs.append(req)
    return reqs


def _tensorflows(reqs):
    return sorted({canonicalize_name(r.name) for r in reqs} & TENSORFLOW_DISTRIBUTIONS)


def test_every_install_names_exactly_one_tensorflow_distribution():
    assert len(_tensorflows(_core())) == 1, _tensorflows(_core())
    for extra in _extras():
        found = _tensorflows(_install(extra))
        assert len(found) == 1, (
            f"pip install tfdml[{extra}] would install {found}: each writes the tensorflow module; "
            "an extra cannot remove the core one (README, 'Development': GPU install).")


def _bounded(name):
    req = next(r for r in _core() if canonicalize_name(r.name) == canonicalize_name(name))
    ops = {s.operator for s in req.specifier}
    assert ">=" in ops and "<" in ops, f"{req}: needs a lower bound and an upper bound (the newest tested + 1)"
    return req


def test_tensorflow_and_keras_are_bounded_and_installed_in_range():
    """The private Keras/TensorFlow API tfdml uses (tests/tfdml/test_models.py::
    test_private_keras_api_we_rely_on) is only known to hold between the bounds; the
    environment running the suite must be inside them, or the bounds say untested things."""
    for name in (_tensorflows(_core())[0], "keras"):
        req = _bounded(name)
        installed = importlib.metadata.version(req.name)
        assert req.specifier.contains(installed, prereleases=True), (
            f"{req.name} {installed} is installed but setup.cfg declares {req}: test this version, "
            "then move the bound in setup.cfg.")


def _pip_installs(line):
    """The requirements of each ``pip install`` in a shell line."""
    for part in line.split("&&"):
        words = shlex.split(part.split("#")[0])
        if len(words) > 1 and words[0].endswith("pip") and words[1] == "install":
            yield [Requirement(w) for w in words[2:] if not w.startswith("-") and w != "."]


def test_readme_gpu_install_names_the_core_requirements():
    """The GPU install (``tensorflow[and-cuda]``, then tfdml without its dependencies and
    then those) lists the core requirements by hand: they must be setup.cfg's, with the
    same bounds, less the CPU TensorFlow, whose bounds ``tensorflow[and-cuda]`` takes."""
    readme = open(os.path.join(ROOT, "README.md")).read()
    cuda = next(ln for ln in readme.splitlines() if "tensorflow[and-cuda]" in ln)
    rest = next(ln for ln in readme.splitlines() if "--no-deps" in ln)
    core = {canonicalize_name(r.name): r for r in _core()}
    tf_req = core.pop(_tensorflows(_core())[0])
    (gpu_tf,), = list(_pip_installs(cuda))
    assert gpu_tf.name == "tensorflow" and "and-cuda" in gpu_tf.extras and gpu_tf.specifier == tf_req.specifier, (
        f"README's GPU line installs {gpu_tf}; setup.cfg declares {tf_req}")
    listed = {canonicalize_name(r.name): r for reqs in _pip_installs(rest) for r in reqs}
    assert listed == {n: listed.get(n) for n in core} and all(
        listed[n].specifier == core[n].specifier for n in core), (
        f"README's GPU install lists {sorted(map(str, listed.values()))}, setup.cfg {sorted(map(str, core.values()))}")


def test_no_extra_brings_another_tensorflow_through_its_dependencies():
    """One level down, through the metadata of the extras' packages installed here
    (packages not installed are skipped; their own requirements are not known offline)."""
    ours = set(_tensorflows(_core()))
    for extra, reqs in _extras().items():
        for req in reqs:
            try:
                requires = importlib.metadata.requires(req.name) or []
            except importlib.metadata.PackageNotFoundError:
                continue
            deps = [Requirement(r) for r in requires]
            deps = [d for d in deps if d.marker is None or any(
                d.marker.evaluate({"extra": e}) for e in {""} | req.extras)]
            found = set(_tensorflows(deps)) - ours
            assert not found, f"tfdml[{extra}]: {req.name} requires {sorted(found)} beside {sorted(ours)}"


#: What a wheel is built from: the packages, their metadata and build files
#: (the tests, benchmarks and docs are not shipped).
WHEEL_SOURCES = ("tfdml", "pipelines", "tfdml_app", "configs", "setup.py", "setup.cfg", "pyproject.toml",
                 "MANIFEST.in", "README.md")


@pytest.fixture(scope="module")
def wheel_install(tmp_path_factory):
    """tfdml built as a wheel (offline, with this environment's setuptools) and
    installed into a folder of its own, with no repository around it."""
    tmp = tmp_path_factory.mktemp("wheel")
    for name in WHEEL_SOURCES:
        source = os.path.join(ROOT, name)
        if not os.path.exists(source):
            continue
        if os.path.isdir(source):
            shutil.copytree(source, tmp / "src" / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            os.makedirs(tmp / "src", exist_ok=True)
            shutil.copy(source, tmp / "src" / name)
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(tmp / "dist"),
                    str(tmp / "src")], check=True, cwd=tmp)
    (wheel,) = (tmp / "dist").glob("tfdml-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(tmp / "site"), str(wheel)],
                   check=True, cwd=tmp)
    shutil.rmtree(tmp / "src")
    return tmp / "site"


def _in_install(site, args):
    """Run ``args`` (a Python command line) with the installed packages of ``site``
    first on the path, from a folder with no configs/ in it."""
    home = site.parent / "elsewhere"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(site), "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run([sys.executable, *args], cwd=home, env=env, capture_output=True, text=True, timeout=300)


def test_a_wheel_install_trains_the_main_job_without_the_repository(wheel_install):
    """tfdml-train without --config trains configs/default.yaml: a wheel ships it in the
    package, built from the repository's one file."""
    found = _in_install(wheel_install, ["-c", "from tfdml_app import train_cli; print(train_cli.default_config())"])
    path = found.stdout.strip()
    assert path == str(wheel_install / "tfdml_app" / "configs" / "default.yaml"), found.stderr
    with open(path, "rb") as packaged, open(os.path.join(ROOT, "configs", "default.yaml"), "rb") as source:
        assert packaged.read() == source.read()
    # The installed command reads it: an unknown key is refused before TensorFlow is imported.
    run = _in_install(wheel_install, [str(wheel_install / "bin" / "tfdml-train"), "--set", "no_such_key=1"])
    assert run.returncode == 2 and f"training the main job ({path})" in run.stderr, run.stderr
    assert "Unknown config key 'no_such_key'" in run.stderr, run.stderr


@pytest.mark.parametrize("command", ["tfdml-train", "tfdml-evaluate", "tfdml-search"])
def test_the_installed_commands_name_themselves_in_their_help(wheel_install, command):
    run = _in_install(wheel_install, [str(wheel_install / "bin" / command), "--help"])
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"usage: {command} "), run.stdout
    assert ".py" not in run.stdout.replace("tfdml_app", ""), run.stdout
