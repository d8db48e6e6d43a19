"""The parts an arm of the reproduction study is built from: a batch design, a loss section,
the loss section of a shipped config, and the merge of such parts into one train.py config."""

import copy
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def design(m, n):
    """The m-per-class design: ``m`` images of each of ``n`` classes a batch."""
    return {"design": {"name": "m_per_class", "options": {"m": m, "n": n}}}


def loss(name, sampler=None, **options):
    """A ``loss`` section: the loss ``name`` with ``options``, and its sampler when given."""
    section = {"name": name, "options": options}
    if sampler is not None:
        section["sampler"] = sampler
    return {"loss": section}


def merge(*parts):
    """The parts merged into one config (later parts win; sections merge key by key)."""
    out = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merge(out[key], value)
            else:
                out[key] = copy.deepcopy(value)
    return out


def shipped_config(name):
    """``configs/<name>.yaml``, the library's config of that paper's setting, as a dict."""
    import yaml

    with open(os.path.join(ROOT, "configs", f"{name}.yaml"), encoding="utf-8") as f:
        return yaml.safe_load(f)


def paper_config(name):
    """The ``loss`` section of ``configs/<name>.yaml`` (its hyper-parameters and sampler) and
    its ``model.normalize``."""
    cfg = shipped_config(name)
    return {"loss": cfg["loss"], "model": {"normalize": cfg["model"]["normalize"]}}
