"""One description of the machine a benchmark ran on, printed by every script."""

import os
import platform


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
