"""Every measured figure in the docs names the command that reproduces it, or says it is history.

    python -m tensorkiln.tools.doc_figures [ROOT]      # lists what it flags; exit status 1 if anything

The rules, kept simple on purpose:

1. The pages are README.md and docs/*.md. A page splits into blocks: a paragraph
   (lines up to a blank line), a list item (with its continuation lines; as in CommonMark, only
   a numbered marker "1." interrupts a paragraph), a table (consecutive lines starting with `|`),
   a code block (fenced, or indented by four spaces under a paragraph). Headings split sections.
2. A *figure* is a number followed by a unit of time, throughput or bandwidth
   (ns, us, µs, ms, s, GFLOP/s, TFLOP/s, GOP/s, GB/s, ...) or a ratio written `1.15x` / `1.15×`.
   Numbers inside inline code (`--repeat 20`) do not count, nor do sizes (KiB, MiB): a size in
   these pages is a configuration (a cache, an SRAM, a buffer), not something timed.
3. A *command* is inline code (or a line of a fenced block) that starts with
   `python benchmarks/SCRIPT.py`, `python -m tensorkiln...`, `python -m pytest`, `tensorkiln WORD`
   or `make WORD`, optionally after `NAME=value` environment settings. A cited benchmark script
   must exist.
4. A block holding a figure passes if any of these holds:
   - it names a command itself;
   - it is history: its text starts with `History:` (emphasis allowed);
   - it is a list item, table or code block and its lead-in (the nearest paragraph above it,
     with only lists, tables and code blocks between) names a command or is history;
   - it is a paragraph ending with `:` and the code block right after it names a command
     ("Reproduce (about 25 s):" above the command);
   - its section is covered: the section's first paragraph (its *opener*) names a command and
     says it covers "this section", or is history and says "this section"; or the heading itself
     says "history". Coverage reaches down into subsections.

History marks a figure whose "before" no longer exists in this tree: the engineering reasoning
stays, and the reader knows it is not a current, reproducible figure.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass

_NUMBER = r"(?<![\w.])[~≈]?\d+(?:,\d{3})*(?:\.\d+)?"
_UNITS = ("ns", "us", "µs", "μs", "ms", "s", "sec", "seconds", "GFLOP/s", "TFLOP/s", "GFLOPS", "TFLOPS",
          "GOP/s", "TOP/s", "GB/s", "MB/s", "TB/s", "GiB/s", "MiB/s")
FIGURE = re.compile(_NUMBER + r"\s?(?:" + "|".join(re.escape(u) for u in _UNITS) + r")(?![\w/])"
                    + "|" + _NUMBER + r"\s?×|" + _NUMBER + r"x(?!\w)")
COMMAND = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S+\s+)*"  # environment settings
                     r"(?:python3?\s+(?:benchmarks/(?P<script>[\w./-]+\.py)|-m\s+(?:tensorkiln|pytest))"
                     r"|tensorkiln\s+[a-z]|make\s+[a-z])")
INLINE_CODE = re.compile(r"`([^`]+)`")
HISTORY = re.compile(r"^[*_\s]*History:", re.IGNORECASE)
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")
NUMBERED = re.compile(r"^\s*(\d+)[.)]\s")
HEADING = re.compile(r"^(#{1,6})\s+(.*)")


@dataclass
class Block:
    """One paragraph, list item, table or code block of a page, with the line it starts on."""
    kind: str                      # "paragraph" | "item" | "table" | "code"
    line: int
    lines: list[str]
    section: int                   # index of the heading it sits under in Page.headings (-1: before any)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@dataclass
class Heading:
    level: int
    title: str
    line: int
    parent: int                    # enclosing heading's index, -1 at the top


@dataclass(frozen=True)
class Finding:
    """A block that holds figures but names no command and is not history."""
    path: str
    line: int
    figures: tuple[str, ...]
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {', '.join(self.figures)}: {self.reason}"


def split_page(text: str) -> tuple[list[Heading], list[Block]]:
    """The page's headings and blocks, in order."""
    headings: list[Heading] = []
    blocks: list[Block] = []
    current: Block | None = None
    fence: Block | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        section = len(headings) - 1
        if fence is not None:
            fence.lines.append(line)
            if line.lstrip().startswith("```"):
                fence = None
            continue
        if line.lstrip().startswith("```"):
            fence = Block("code", number, [line], section)
            blocks.append(fence)
            current = None
            continue
        heading = HEADING.match(line)
        if heading:
            level = len(heading.group(1))
            parent = section
            while parent >= 0 and headings[parent].level >= level:
                parent = headings[parent].parent
            headings.append(Heading(level, heading.group(2).strip(), number, parent))
            current = None
        elif not line.strip():
            current = None
        elif line.lstrip().startswith("|"):
            if current is None or current.kind != "table":
                current = Block("table", number, [], section)
                blocks.append(current)
            current.lines.append(line)
        elif current is None and line.startswith("    ") and blocks and blocks[-1].kind == "paragraph":
            current = Block("code", number, [line], section)
            blocks.append(current)
        elif LIST_ITEM.match(line) and _starts_item(line, current):
            current = Block("item", number, [line], section)
            blocks.append(current)
        elif current is None or current.kind == "table":
            current = Block("paragraph", number, [line], section)
            blocks.append(current)
        else:
            current.lines.append(line)
    return headings, blocks


def _starts_item(line: str, current: Block | None) -> bool:
    """Whether a line that looks like a list marker starts an item: a numbered marker other than 1 does not
    interrupt a paragraph (as in CommonMark: a wrapped line may begin "1024) is ...")."""
    numbered = NUMBERED.match(line)
    return numbered is None or current is None or current.kind != "paragraph" or numbered.group(1) == "1"


def figures_in(block: Block) -> list[str]:
    """The figures a block states (inline code left out)."""
    if block.kind == "code":
        text = "\n".join(line for line in block.lines if not COMMAND.match(line.strip().removeprefix("$ ")))
    else:
        text = INLINE_CODE.sub(" ", block.text)
    return [match.group(0).strip() for match in FIGURE.finditer(text)]


def commands_in(block: Block) -> list[re.Match]:
    """The commands a block names."""
    if block.kind == "code":
        candidates = [line.strip().removeprefix("$ ") for line in block.lines]
    else:
        candidates = [code.strip() for code in INLINE_CODE.findall(block.text)]
    return [match for match in map(COMMAND.match, candidates) if match]


def is_history(block: Block) -> bool:
    return bool(HISTORY.match(block.text))


def _accounts_for(block: Block) -> bool:
    return bool(commands_in(block)) or is_history(block)


def _lead_in(blocks: list[Block], index: int) -> Block | None:
    """The paragraph that introduces a list item, table or code block: the nearest paragraph above it
    in its section with only list items, tables and code blocks between."""
    at = index - 1
    while at >= 0 and blocks[at].kind in ("item", "table", "code") and blocks[at].section == blocks[index].section:
        at -= 1
    if at >= 0 and blocks[at].kind == "paragraph" and blocks[at].section == blocks[index].section:
        return blocks[at]
    return None


def _introduces_command(blocks: list[Block], index: int) -> bool:
    """A paragraph ending with ':' right above a code block that names a command."""
    block = blocks[index]
    after = blocks[index + 1] if index + 1 < len(blocks) else None
    return (block.kind == "paragraph" and block.text.rstrip().endswith(":") and after is not None
            and after.kind == "code" and bool(commands_in(after)))


def covered_sections(headings: list[Heading], blocks: list[Block]) -> set[int]:
    """Headings whose section (subsections included) is covered by an opener or marked as history."""
    own = set()
    openers: dict[int, Block] = {}
    for block in blocks:
        if block.section >= 0 and block.kind == "paragraph":
            openers.setdefault(block.section, block)
    for index, heading in enumerate(headings):
        opener = openers.get(index)
        if "history" in heading.title.lower():
            own.add(index)
        elif opener is not None and "this section" in " ".join(opener.text.lower().split()) \
                and _accounts_for(opener):
            own.add(index)
    covered = set()
    for index, heading in enumerate(headings):
        at = index
        while at >= 0:
            if at in own:
                covered.add(index)
                break
            at = headings[at].parent
    return covered


def check_page(path: str, text: str, root: str) -> list[Finding]:
    """Every block of one page that states figures without a command or a history mark, and every cited
    benchmark script that does not exist."""
    headings, blocks = split_page(text)
    covered = covered_sections(headings, blocks)
    findings = []
    for index, block in enumerate(blocks):
        for match in commands_in(block):
            script = match.group("script")
            if script and not os.path.isfile(os.path.join(root, "benchmarks", script)):
                findings.append(Finding(path, block.line, (), f"cites benchmarks/{script}, which does not exist"))
        figures = figures_in(block)
        if not figures or _accounts_for(block) or block.section in covered:
            continue
        lead_in = _lead_in(blocks, index) if block.kind in ("item", "table", "code") else None
        if lead_in is not None and _accounts_for(lead_in):
            continue
        if _introduces_command(blocks, index):
            continue
        findings.append(Finding(path, block.line, tuple(figures),
                                f"{block.kind} names no reproducing command and is not marked History:"))
    return findings


def doc_pages(root: str) -> list[str]:
    """README.md and docs/*.md under the repository root, as paths relative to it."""
    pages = ["README.md"] if os.path.isfile(os.path.join(root, "README.md")) else []
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        pages += sorted(os.path.join("docs", name) for name in os.listdir(docs) if name.endswith(".md"))
    return pages


def check(root: str) -> list[Finding]:
    """Every finding over the repository's docs."""
    findings = []
    for page in doc_pages(root):
        with open(os.path.join(root, page), encoding="utf-8") as f:
            findings += check_page(page, f.read(), root)
    return findings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), help="the repository root (default: this checkout)")
    args = parser.parse_args(argv)
    findings = check(args.root)
    for finding in findings:
        print(finding)
    print(f"{len(findings)} block(s) with figures that name no command" if findings
          else "every figure names its command or is marked as history")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
