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
