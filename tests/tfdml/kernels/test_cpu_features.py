"""Entries of the kernels table that need CPU instruction-set flags: how the flags are read,
and that such an entry is chosen only on a CPU that has every one of them (the conftest
makes every test see a CPU without flags unless it gives some)."""

import pytest

from tfdml import kernels

X86 = """processor\t: 0
vendor_id\t: AuthenticAMD
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile
bugs\t\t: sysret_ss_attrs

processor\t: 1
flags\t\t: fpu sse2
"""
ARM = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd bf16 sve
CPU implementer\t: 0x41
"""


@pytest.mark.parametrize("text, expected", [
    (X86, {"fpu", "sse2", "avx2", "avx512f", "avx512_bf16", "amx_tile"}),  # the first processor's
    (ARM, {"fp", "asimd", "bf16", "sve"}),
    ("processor\t: 0\nmodel name\t: something\n", set()),
])
def test_read_cpu_features_takes_the_first_processor_s_flags(tmp_path, text, expected):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    assert kernels.read_cpu_features(str(path)) == frozenset(expected)


def test_read_cpu_features_of_a_missing_file_is_empty(tmp_path):
    assert kernels.read_cpu_features(str(tmp_path / "absent")) == frozenset()


def test_an_entry_that_requires_flags_is_chosen_only_where_all_of_them_are(monkeypatch):
    needs = kernels.Choice("fast", {"block": 8}, requires=("avx512_bf16", "amx_tile"))
    monkeypatch.setitem(kernels.CHOICES["CPU"], "probe", {"graph": needs})
    for flags, chosen in [(set(), False), ({"avx512_bf16"}, False), ({"avx2", "avx512_bf16", "amx_tile"}, True)]:
        monkeypatch.setattr(kernels, "cpu_features", lambda flags=flags: frozenset(flags))
        choice = kernels.choose("probe", mode="graph", device="CPU")
        assert choice == (needs if chosen else kernels.Choice()), flags
        assert kernels.choose("probe", mode="xla", device="CPU").is_reference
    with kernels.forced():
        assert kernels.choose("probe", mode="graph", device="CPU").is_reference


def test_the_dtype_policy_entry_is_bfloat16_outside_xla_on_a_cpu_with_bfloat16(monkeypatch):
    monkeypatch.setattr(kernels, "cpu_features", lambda: frozenset({"avx512_bf16"}))
    assert kernels.choose("dtype_policy", mode="graph", device="CPU").form == "mixed_bfloat16"
    assert kernels.choose("dtype_policy", mode="xla", device="CPU").is_reference
    for device in ("GPU", "TPU"):
        assert kernels.choose("dtype_policy", mode="graph", device=device).is_reference
    monkeypatch.setattr(kernels, "cpu_features", lambda: frozenset({"avx2", "avx512f"}))
    assert kernels.choose("dtype_policy", mode="graph", device="CPU").is_reference
