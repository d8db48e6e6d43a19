"""One description of the machine a benchmark ran on, printed by every script."""

import os
import platform
import re


#: The vector instruction sets that change TensorFlow's CPU speed, as /proc/cpuinfo flags and
#: as printed (the widest first). A cloud "AMD EPYC" names several generations of CPU.
VECTOR_FLAGS = (("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX-512-BF16"), ("avx512f", "AVX-512"),
                ("avx2", "AVX2"))


def describe_cpuinfo(text):
    """"model name (family F model M, ISA, ...)" from the text of /proc/cpuinfo (its first CPU)."""
    fields = {}
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or platform.processor() or "unknown CPU"
    flags = set(fields.get("flags", "").split())
    detail = [f"family {fields['cpu family']} model {fields['model']}"] if "cpu family" in fields else []
    detail += [shown for flag, shown in VECTOR_FLAGS if flag in flags]
    return f"{name} ({', '.join(detail)})" if detail else name


#: A :func:`describe` line up to its core count: the CPU model between the platform and the cores.
DESCRIBED_CPU = re.compile(r"^[^,]*, (?P<name>.*?)(?: \((?P<detail>[^()]*)\))?, \d+ usable cores")


def cpu_type(description):
    """The CPU of a :func:`describe` line as (model name, "family F model M"): the generation is
    None when the line records none (a cloud "AMD EPYC" then names several); None when the line
    names no CPU."""
    found = DESCRIBED_CPU.match(description or "")
    if not found:
        return None
    generation = re.search(r"family \d+ model \d+", found["detail"] or "")
    return found["name"], generation[0] if generation else None


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return describe_cpuinfo(f.read())
    except OSError:
        return platform.processor() or "unknown CPU"


def describe():
    """Platform, CPU model, usable cores, load average, GPUs and library versions."""
    import keras
    import numpy as np
    import tensorflow as tf

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "?"
    gpus = tf.config.list_physical_devices("GPU")
    gpu = f"GPU: {', '.join(g.name for g in gpus)}" if gpus else "no GPU"
    return (
        f"{platform.system()} {platform.machine()}, {cpu_model()}, {cores} usable cores, "
        f"load average {load}, {gpu}; Python {platform.python_version()}, "
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}, NumPy {np.__version__}"
    )
