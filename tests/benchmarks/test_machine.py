"""The machine line every benchmark prints names the CPU generation, not only its brand."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import machine  # noqa: E402

ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx avx2 fma

processor\t: 1
model name\t: Another CPU
"""
ZEN4 = ZEN3.replace("model\t\t: 1", "model\t\t: 17").replace("avx2 fma", "avx2 fma avx512f avx512_bf16")


def test_two_cpus_of_one_brand_are_told_apart_by_family_model_and_vector_isa():
    assert machine.describe_cpuinfo(ZEN3) == "AMD EPYC (family 25 model 1, AVX2)"
    assert machine.describe_cpuinfo(ZEN4) == "AMD EPYC (family 25 model 17, AVX-512-BF16, AVX-512, AVX2)"


def test_cpuinfo_without_details_gives_the_name_alone():
    assert machine.describe_cpuinfo("model name\t: Some CPU\n") == "Some CPU"


def test_the_cpu_type_is_read_back_from_a_described_machine():
    line = ("Linux x86_64, Intel(R) Xeon(R) Processor (family 6 model 167, AMX-BF16, AVX-512, AVX2), "
            "2 usable cores, load average 2.99, no GPU; Python 3.11.7, TensorFlow 2.21.0")
    assert machine.cpu_type(line) == ("Intel(R) Xeon(R) Processor", "family 6 model 167")
    # a line from before the generation was recorded: the name alone, the generation unknown
    assert machine.cpu_type("Linux x86_64, AMD EPYC, 2 usable cores, load average 1.93, no GPU") == ("AMD EPYC", None)
    assert machine.cpu_type("Linux x86_64, Some CPU (AVX2), 4 usable cores, load average 0.10") == ("Some CPU", None)
    assert machine.cpu_type("") is None and machine.cpu_type(None) is None


def test_the_cpu_type_of_this_machine_is_what_describe_printed(monkeypatch):
    monkeypatch.setattr(machine, "cpu_model", lambda: "AMD EPYC (family 25 model 17, AVX-512, AVX2)")
    assert machine.cpu_type(machine.describe()) == ("AMD EPYC", "family 25 model 17")
