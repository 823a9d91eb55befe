"""The LAMMPS input subset: commands, variables, errors that name the line, and the `tensorkiln md` command."""
from __future__ import annotations

import pytest

from tensorkiln.md.in_lj import in_lj
from tensorkiln.md.input_script import InputScript
from tensorkiln.md.lattice import MDInputError
from tensorkiln.tools.cli import main

# LAMMPS's in.lj at 4 x 4 x 4 cells, its x size from an index variable as bench/in.lj sets it
IN_LJ = ("# 3d Lennard-Jones melt\nvariable        x index 1\nvariable        xx equal 4*$x\n"
         + in_lj(("${xx}", 4, 4), every=20, thermo=10, run=25))


def _run(text: str, **variables: str) -> tuple[list[str], InputScript]:
    lines: list[str] = []
    script = InputScript(lines.append, variables, threads=1)
    script.run_text(text, "in.test")
    return lines, script


def test_in_lj_prints_lammps_thermo_table():
    lines, script = _run(IN_LJ)
    assert lines[0] == "   Step          Temp          E_pair         E_mol          TotEng         Press     "
    # step 0 of in.lj at 4x4x4 cells, as LAMMPS prints it
    assert lines[1] == "         0   1.44          -6.7733681      0             -4.6218056     -5.0244179    "
    assert [line.split()[0] for line in lines[1:5]] == ["0", "10", "20", "25"]
    assert lines[5].startswith("Loop time of ") and lines[5].endswith(" on 1 procs for 25 steps with 256 atoms")
    assert script.state.system.atoms == 256


def test_command_line_variable_overrides_index_variable():
    lines, script = _run(IN_LJ.replace("run 25", "run 0"), x="2")
    assert script.state.system.atoms == 512  # 8 x 4 x 4 cells
    assert lines[-1].endswith("for 0 steps with 512 atoms")


def test_continued_lines_comments_and_a_second_run():
    text = IN_LJ.replace("thermo 10", "thermo 5 # every five\npair_modify &\n  shift yes")
    lines, script = _run(text + "run 5\n")
    assert [r.rows[-1].step for r in script.state.runs] == [25, 30]
    assert lines[-2].split()[0] == "30"


@pytest.mark.parametrize("line, message", [
    ("units metal", "units 'metal' is not supported"),
    ("pair_style lj/cut/coul/long 2.5", "pair_style 'lj/cut/coul/long' is not supported"),
    ("velocity all create 1.44 87287", "only `loop geom` is supported"),
    ("compute 1 all pe", "command 'compute' is not supported"),
    ("neigh_modify one 3000", "neigh_modify keyword 'one'"),
    ("region box block 0 4 0 4", "expected `region ID block"),
    ("lattice fcc", "expected `lattice fcc|bcc|sc DENSITY`"),
    ("thermo ten", "malformed command"),
    ("create_box 2 box", "only one atom type"),
    ("variable y equal foo*2", "only numbers"),
    ("region box block 0 ${nope} 0 4 0 4", "variable 'nope' is not defined"),
])
def test_bad_command_is_an_error_naming_the_line(line, message):
    lines = IN_LJ.splitlines()
    lines.insert(5, line)
    with pytest.raises(MDInputError) as caught:
        _run("\n".join(lines))
    assert "in.test:6: " + line in str(caught.value)
    assert message in str(caught.value)


def test_run_without_setup_is_an_error():
    with pytest.raises(MDInputError, match="run needs atoms"):
        _run("units lj\nrun 10\n")
    with pytest.raises(MDInputError, match="run needs the atoms' mass"):
        _run(IN_LJ.replace("mass 1 1.0\n", "").replace("velocity all create 1.44 87287 loop geom\n", ""))


def test_tensorkiln_md_command(tmp_path, capsys):
    script = tmp_path / "in.lj"
    script.write_text(IN_LJ)
    assert main(["md", str(script), "--threads", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["Step", "Temp", "E_pair", "E_mol", "TotEng", "Press"]
    assert "Loop time of" in out[5]
    # the too-small skin for `every 20 check no` at this temperature is reported, LAMMPS-style
    assert out[6].startswith("WARNING: ")
    bad = tmp_path / "in.bad"
    bad.write_text("units lj\nfix 1 all nvt temp 1 1 1\n")
    assert main(["md", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "in.bad:2: fix 1 all nvt temp 1 1 1" in err and "only `fix ID all nve`" in err
    assert main(["md", str(tmp_path / "missing")]) == 1
