"""How benchmark figures name the CPU: model name, family and model, vector ISA and caches."""
from __future__ import annotations

import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tensorkiln.kernels.target import cpu_description, cpu_family_model, cpu_model_name, cpu_target  # noqa: E402


def test_family_and_model_come_from_the_first_processor(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
                    "model name\t: AMD EPYC\n\nprocessor\t: 1\ncpu family\t: 6\nmodel\t\t: 143\n")
    assert cpu_family_model(str(info)) == "family 25 model 17"


def test_no_family_where_cpuinfo_says_none(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Some CPU\n")
    assert cpu_family_model(str(info)) == ""
    assert cpu_family_model(str(tmp_path / "missing")) == ""


def test_description_names_the_isa_and_caches_the_kernels_use():
    text = cpu_description()
    target = cpu_target()
    assert text.startswith(cpu_model_name())
    isa = text.split(", ")[1]
    assert isa.split("+")[0] == {64: "avx512", 32: "avx2"}.get(target.vector_bytes, "sse")
    assert ("vnni" in isa.split("+")) == (target.int8_dot == "vnni")
    assert (f"fma at {target.fma_bytes * 8} bits" in isa.split("+")) == (target.fma_bytes < target.vector_bytes)
    sizes = dict(re.findall(r"(L1d|L2|L3) (\d+ [KM]iB)", text))
    scale = {"KiB": 1 << 10, "MiB": 1 << 20}
    for level, size in (("L1d", target.l1d), ("L2", target.l2), ("L3", target.l3)):
        number, unit = sizes[level].split()
        assert int(number) * scale[unit] == size


def test_cache_sizes_and_l2_ways_from_one_sysfs_walk(tmp_path):
    """sysfs's cache entries: sizes of the data and unified caches by level, the L2's ways; an instruction
    cache and unreadable fields are skipped, and a missing directory gives the defaults."""
    from tensorkiln.kernels.target import DEFAULT_CACHES, DEFAULT_L2_WAYS, l2_ways, read_cache_sizes
    for index, (level, kind, size, ways) in enumerate([(1, "Data", "48K", "12"), (1, "Instruction", "32K", "8"),
                                                       (2, "Unified", "1024K", "16"), (3, "Unified", "32768K", None)]):
        entry = tmp_path / f"index{index}"
        entry.mkdir()
        for name, value in (("level", level), ("type", kind), ("size", size), ("ways_of_associativity", ways)):
            if value is not None:
                (entry / name).write_text(f"{value}\n")
    assert read_cache_sizes(str(tmp_path)) == {1: 48 << 10, 2: 1 << 20, 3: 32 << 20}
    assert l2_ways(str(tmp_path)) == 16
    assert read_cache_sizes(str(tmp_path / "none")) == DEFAULT_CACHES
    assert l2_ways(str(tmp_path / "none")) == DEFAULT_L2_WAYS
