#!/usr/bin/env python3
"""The grain of the chapters: how small their exported pieces are and how short their prose, measured on `nbs/`.

Usage: python tools/grain.py [NBS] [--json]   (NBS defaults to the repository's nbs/)

Prints one row per figure; `tests/test_grain.py` holds the bars. Counted as a reader meets them:
- an export cell is a code cell whose directives include `#| export`; its lines leave out the directive lines;
- a top-level name is a public `def`/`class` (a name not starting with `_`) at the cell's top level;
- a prose paragraph is a markdown block between blank lines that is not a heading, list, table or code fence;
- an outside reference names a file a clone of the repository does not have (the spec folder, its `.md` files).
"""

import argparse, ast, json, re, statistics, sys
from pathlib import Path

import nbformat

from shopdistill.reproduce.driver import is_export  # the driver's rule: what goes into the library

ROOT = Path(__file__).resolve().parents[1]
# files and folders that lie beside the repository, never in it
OUTSIDE = re.compile(
    r"\.\./shared|shared/spec|\b(?:training|design|shoppingbench|arena|notebooks|chapter-style)\.md\b"
)
NOT_PROSE = ("#", "|", "```", "-", "*", ">", "<")
LONG_LINE = 100
LONG_PARAGRAPH = 120


def code_lines(source: str) -> list[str]:
    "A code cell's lines without its `#|` directives."
    return [line for line in source.splitlines() if not line.startswith("#|")]


def python_tree(source: str) -> ast.Module:
    "A code cell's syntax tree, its IPython lines (`!cmd`, `%magic`) blanked; an empty one where it is no Python."
    try:
        return ast.parse(re.sub(r"^\s*[!%].*$", "", source, flags=re.M))
    except SyntaxError:
        return ast.Module(body=[], type_ignores=[])


def public_names(source: str) -> list[str]:
    "The public functions and classes a cell defines at its top level."
    tree = python_tree(source)
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [n.name for n in tree.body if isinstance(n, defs) and not n.name.startswith("_")]


def paragraphs(markdown: str) -> list[str]:
    "The prose paragraphs of a markdown cell: blocks between blank lines, headings, lists, tables and code left out."
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)
    blocks = (b.strip() for b in re.split(r"\n\s*\n", text))
    return [b for b in blocks if b and not b.startswith(NOT_PROSE) and not re.match(r"\d+\.\s", b)]


def shows_a_value(source: str) -> bool:
    "Does a demonstration show something: does it end in an expression (a value, `show_doc`, a plot), not a check?"
    body = python_tree(source).body
    last = body[-1] if body else None
    if not isinstance(last, ast.Expr):
        return False
    call = last.value.func if isinstance(last.value, ast.Call) else None
    # fastcore's test_eq and friends check a value; they show none
    return not (isinstance(call, ast.Name) and call.id.startswith("test_"))


def measure(nbs: Path) -> dict:
    "The grain figures of every notebook under `nbs`."
    export_lines, multi, shown, words, outside, long, lines = [], 0, 0, [], 0, 0, 0
    for path in sorted(nbs.rglob("*.ipynb")):
        if ".ipynb_checkpoints" in path.parts:
            continue
        cells = nbformat.read(path, as_version=4).cells
        for i, cell in enumerate(cells):
            src = cell.source
            outside += len(OUTSIDE.findall(src))
            if cell.cell_type == "markdown":
                words += [len(p.split()) for p in paragraphs(src)]
                continue
            if cell.cell_type != "code":
                continue
            body = code_lines(src)
            lines += len(body)
            long += sum(len(line) > LONG_LINE for line in body)
            if not is_export(src):
                continue
            export_lines.append(len(body))
            multi += len(public_names(src)) > 1
            after = next((c for c in cells[i + 1 :] if c.cell_type == "code"), None)
            shown += (
                after is not None and not is_export(after.source) and shows_a_value(after.source)
            )
    n = max(len(export_lines), 1)
    return {
        "export cells": len(export_lines),
        "mean lines per export cell": round(statistics.mean(export_lines), 1)
        if export_lines
        else 0.0,
        "export cells defining more than one top-level name": round(multi / n, 3),
        "export cells followed by a demonstration that shows a value": round(shown / n, 3),
        "median prose paragraph (words)": statistics.median(words) if words else 0,
        f"prose paragraphs over {LONG_PARAGRAPH} words": sum(w > LONG_PARAGRAPH for w in words),
        "references to files outside the repository": outside,
        f"code lines over {LONG_LINE} characters": round(long / max(lines, 1), 4),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "nbs", nargs="?", default=str(ROOT / "nbs"), help="the notebook folder (default: nbs/)"
    )
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = p.parse_args(argv)
    figures = measure(Path(args.nbs))
    if args.json:
        print(json.dumps(figures))
    else:
        width = max(map(len, figures))
        for name, value in figures.items():
            shown = (
                f"{value:.1%}"
                if isinstance(value, float) and value < 1 and "mean" not in name
                else value
            )
            print(f"{name:<{width}}  {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
