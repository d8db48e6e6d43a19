"""The shipped configs on the bundled data, each at its full budget, next to raw pixels.

    python benchmarks/shipped_configs.py                      # every config on bundled data
    python benchmarks/shipped_configs.py --configs npair      # some of them (the others kept)
    python benchmarks/shipped_configs.py --write              # and its table into RESULTS.md
    python benchmarks/shipped_configs.py --report --write     # the table from the results, no run

Each config runs as a user runs it, ``train.py --config configs/NAME.yaml`` in a subprocess
(its own seed and budget; only ``output_dir`` is set, to a temporary folder), and its
``metrics.json`` gives the held-out figures of the model and of the raw-pixel baseline that
the config scores (``evaluation.baseline: raw_pixels``) on the same queries. The figures go
to ``benchmarks/shipped_configs.json`` (written atomically; a run of some configs keeps the
others), and its table, ``benchmarks/tables/shipped_configs.md`` (and so its section of
``RESULTS.md``, :mod:`results_tables`), is rendered from that file alone.

A config beats raw pixels when every figure of :data:`COLUMNS` is higher; one that does not
says at the end of its header, from a line ``# Demonstrates: ...`` on, what it shows instead
(``tests/benchmarks/test_shipped_configs.py`` holds both to it). Per-run figures depend on
the CPU's kernels (the README's main-job note): the table names the machine.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import readme_figures  # noqa: E402 (after the path set-up)
import results_tables  # noqa: E402

RESULTS_FILE = os.path.join(HERE, "shipped_configs.json")
#: The figures compared with raw pixels: the README's main-job columns.
COLUMNS = readme_figures.COLUMNS
#: Sources that the package or scikit-learn ship: the configs that run offline on any machine.
BUNDLED_SOURCES = ("mnist5k", "digits")
#: The header line of a config that does not beat raw pixels and says what it shows instead.
DEMONSTRATES = "# Demonstrates:"


def configs_on_bundled_data():
    """The names of the shipped configs whose data is bundled, sorted."""
    from tfdml_app import config

    names = sorted(name[:-5] for name in os.listdir(os.path.join(ROOT, "configs")) if name.endswith(".yaml"))
    return [name for name in names
            if config.read(config_path(name))["data"]["source"] in BUNDLED_SOURCES]


def config_path(name):
    return os.path.join(ROOT, "configs", f"{name}.yaml")


def config_digest(name):
    """SHA-256 of the config as validated (comments and layout left out): the results of a
    config hold it, so a config changed since its run is seen."""
    import hashlib

    from tfdml_app import config

    text = json.dumps(config.load(config_path(name)), sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def demonstrates(name):
    """What the config's header says it demonstrates instead of beating raw pixels (its
    ``# Demonstrates:`` line and the comment lines after it, up to the header's end), or None."""
    said = None
    with open(config_path(name), encoding="utf-8") as f:
        for line in f:
            if not line.startswith("#"):
                break
            if line.startswith(DEMONSTRATES):
                said = [line[len(DEMONSTRATES):].strip()]
            elif said is not None:
                said.append(line[1:].strip())
    return " ".join(said) if said else None


def losing_figures(run):
    """The figures of :data:`COLUMNS` on which raw pixels are at least as good as the model."""
    return [key for _, key in COLUMNS if run["metrics"][key] <= run["baseline"][key]]


def run_config(name):
    """``{"seed", "metrics", "baseline", "seconds"}`` of the config as shipped."""
    from tfdml_app import config

    seed = config.load(config_path(name))["seed"]
    figures = readme_figures.run_seed(seed, config_path(name))
    keys = [key for _, key in COLUMNS] + ["num_queries"]
    return {"seed": seed, "seconds": round(figures["seconds"], 1), "config_sha256": config_digest(name),
            "metrics": {key: figures["metrics"][key] for key in keys if key in figures["metrics"]},
            "baseline": {key: figures["baseline"][key] for _, key in COLUMNS}}


def render(results):
    """The recorded table (``benchmarks/tables/shipped_configs.md``) from the contents of :data:`RESULTS_FILE`."""
    runs = results["runs"]
    lines = [
        f"Each config on the bundled data as shipped (`python train.py --config configs/NAME.yaml`: "
        f"its seed and full budget), held-out on the unseen digits 5–9, each figure as *model / raw "
        f"pixels* on the same queries. {results['machine']}. Regenerate with "
        "`python benchmarks/shipped_configs.py --write`.",
        "",
        "| config | " + " | ".join(title for title, _ in COLUMNS) + " | beats raw pixels |",
        "|---" * (len(COLUMNS) + 2) + "|",
    ]
    for name in sorted(runs):
        run = runs[name]
        cells = [f"{run['metrics'][key]:.3f} / {run['baseline'][key]:.3f}" for _, key in COLUMNS]
        lines.append(f"| `{name}` | " + " | ".join(cells) + f" | {verdict(name, run)} |")
    return "\n".join(lines)


def verdict(name, run):
    """The last cell of a config's row: "on every figure", or the figures it loses on and
    what its header says it demonstrates instead (in the cell, so that the table takes one
    line a config; a ``|`` of the header escaped)."""
    losing = losing_figures(run)
    if not losing:
        return "on every figure"
    cell = "not on " + ", ".join(losing)
    said = demonstrates(name)
    if said:
        cell += "; it demonstrates " + said.replace("|", r"\|")
    return cell


def load_results(path=RESULTS_FILE):
    if not os.path.exists(path):
        return {"machine": "", "runs": {}}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", help="the configs to run (default: every config on bundled data)")
    parser.add_argument("--report", action="store_true",
                        help="train nothing: the table from benchmarks/shipped_configs.json")
    parser.add_argument("--write", action="store_true", help="record the table (benchmarks/tables/, RESULTS.md)")
    args = parser.parse_args(argv)
    import machine
    from tfdml import files

    names = configs_on_bundled_data()
    unknown = sorted(set(args.configs or ()) - set(names))
    if unknown:
        parser.error(f"not a shipped config on bundled data: {', '.join(unknown)}; choose from {', '.join(names)}")
    described = machine.describe()
    print(described, flush=True)
    machine_line = f"Measured on {described.split(', TensorFlow')[0]}"
    for name in [] if args.report else args.configs or names:
        run = run_config(name)
        results = load_results()  # as on disk now: another run of this script may have added to it
        results["machine"] = machine_line
        results["runs"][name] = run
        losing = losing_figures(run)
        print(f"{name}: " + ", ".join(f"{key} {run['metrics'][key]:.4f} / {run['baseline'][key]:.4f}"
                                      for _, key in COLUMNS)
              + (f"; raw pixels win on {', '.join(losing)}" if losing else "") + f" ({run['seconds']:.0f} s)",
              flush=True)
        files.write_text(RESULTS_FILE, json.dumps(results, indent=1, sort_keys=True) + "\n")
    block = render(load_results())
    print(block)
    if args.write:
        results_tables.record("shipped_configs", block)
        print(f"Wrote {results_tables.tables_path('shipped_configs')} and {results_tables.RESULTS_PATH}")


if __name__ == "__main__":
    main()
