"""The docs checker: every measured figure names its reproducing command or is marked as history."""
from __future__ import annotations

import os
import pathlib
import re

from tensorkiln.tools.doc_figures import check, check_page, figures_in, main, split_page

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _findings(text: str) -> list:
    return check_page("page.md", text, ROOT)


def test_figures_are_numbers_with_time_throughput_or_ratio_units():
    _, blocks = split_page("It took 1.5 ms, 20 us, 3 s and 0.4 µs; 218 GFLOP/s at 70 GB/s, 1.15x and 2× "
                           "faster. Not figures: a 3x3 conv, 2 x 2 tiles, 48 KiB of L1d, `--repeat 20 s`.\n")
    assert figures_in(blocks[0]) == ["1.5 ms", "20 us", "3 s", "0.4 µs", "218 GFLOP/s", "70 GB/s", "1.15x", "2×"]


def test_a_planted_figure_without_a_command_is_flagged():
    findings = _findings("# Page\n\nIntro.\n\n## Speed\n\nThe kernel now takes 0.25 ms with 2 threads.\n")
    assert [(f.line, f.figures) for f in findings] == [(7, ("0.25 ms",))]
    assert "names no reproducing command" in findings[0].reason


def test_a_command_in_the_same_block_accounts_for_its_figures():
    for block in ("The kernel takes 0.25 ms (`python benchmarks/kernels.py`, float32, 2 threads).",
                  "- 0.25 ms per call: `OMP_WAIT_POLICY=passive tensorkiln bench mlp --threads 2`",
                  "| kernel | ms |\n|---|---|\n| gemm | 0.25 |\n| note: 1.2x, `make bench` | |",
                  "```\n$ python benchmarks/kernels.py\ngemm 0.25 ms\n```"):
        assert _findings(f"# Page\n\n{block}\n") == [], block


def test_history_blocks_pass_and_unmarked_ones_do_not():
    assert _findings("# P\n\nHistory: the copy went from 0.25 to 0.09 ms.\n") == []
    assert _findings("# P\n\n*History:* the copy went from 0.25 to 0.09 ms.\n") == []
    assert len(_findings("# P\n\nThe copy went from 0.25 to 0.09 ms (history).\n")) == 1


def test_a_lead_in_paragraph_covers_its_list_table_and_code_block():
    lead = "Measured with `python benchmarks/kernels.py`, float32:\n\n"
    for body in ("- a: 1.0 ms\n- b: 2.0 ms\n", "| a | 1.0 ms |\n|---|---|\n", "```\na 1.0 ms\n```\n"):
        assert _findings("# P\n\n" + lead + body) == [], body
        assert len(_findings("# P\n\nMeasured somewhere:\n\n" + body)) >= 1, body
    assert _findings("# P\n\nReproduce (about 25 s):\n\n    python -m pytest -q tests/x.py\n") == []


def test_a_section_opener_covers_the_section_and_its_subsections_only():
    page = ("# P\n\n## Fast\n\nFigures in this section: `python benchmarks/kernels.py`, float32.\n\n"
            "Later 1.0 ms.\n\n### Deeper\n\n- 2.0 ms\n\n## Other\n\nHere 3.0 ms.\n")
    assert [f.figures for f in _findings(page)] == [("3.0 ms",)]
    no_claim = page.replace("Figures in this section:", "Also:")
    assert len(_findings(no_claim)) == 3
    history = "# P\n\n## Development history (not reproducible from this tree)\n\nIt went 2x faster.\n"
    assert _findings(history) == []


def test_a_wrapped_line_starting_with_a_number_continues_its_paragraph():
    _, blocks = split_page("History: the GEMM (144 x 32 x\n1024) took 0.5 ms.\n\n1. an item\n2. another\n")
    assert [(b.kind, b.line) for b in blocks] == [("paragraph", 1), ("item", 4), ("item", 5)]
    assert _findings("# P\n\nHistory: the GEMM (144 x 32 x\n1024) took 0.5 ms.\n") == []


def test_a_cited_benchmark_script_must_exist():
    findings = _findings("# P\n\n0.25 ms (`python benchmarks/no_such_script.py`).\n")
    assert [f.reason for f in findings] == ["cites benchmarks/no_such_script.py, which does not exist"]


def test_every_figure_in_this_repository_names_its_command_or_is_history():
    findings = check(ROOT)
    assert findings == [], "\n".join(map(str, findings))


def test_make_bench_runs_every_benchmark_script():
    with open(os.path.join(ROOT, "benchmarks", "run_all.py")) as f:
        run_all = f.read()
    # a script runs as a program; a helper module beside the scripts (common.py, mpi_launches.py) does not
    scripts = {path.name for path in pathlib.Path(ROOT, "benchmarks").glob("*.py") if path.name != "run_all.py"
               and 'if __name__ == "__main__":' in path.read_text()}
    registered = set(re.findall(r'"(\w+\.py)"', run_all))
    assert scripts - registered == set()


def test_command_line_reports_and_fails(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# P\n\nIt takes 4 ms.\n")
    assert main([str(tmp_path)]) == 1
    assert "docs/page.md:3: 4 ms" in capsys.readouterr().out
    (tmp_path / "docs" / "page.md").write_text("# P\n\nIt takes 4 ms (`make bench`).\n")
    assert main([str(tmp_path)]) == 0
