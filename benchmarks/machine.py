"""One description of the machine a benchmark ran on, printed by every script."""

import os
import platform


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
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
