"""The shape of the project, checked: one module per notebook, data and imports flowing one way through the chapters,
cells in nbdev's grain, and every file of a run named in one place (`shopdistill.core.run`)."""

import ast
import json
import re
from pathlib import Path


from shopdistill.core import run as layout
from shopdistill.training.recipe import recipe, stage_names

ROOT = Path(__file__).resolve().parents[1]
NBS, LIB = ROOT / "nbs", ROOT / "shopdistill"


def notebooks() -> list[Path]:
    "Every notebook in reading order: the foundations (`core/`), the chapters 00-07, then the tooling (99)."
    folders = sorted(
        (p for p in NBS.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))),
        key=lambda p: (p.name != "core", p.name),
    )
    return [nb for f in folders for nb in sorted(f.glob("*.ipynb"))]


def cells(nb: Path) -> list[dict]:
    return [
        {**c, "source": "".join(c["source"]) if isinstance(c["source"], list) else c["source"]}
        for c in json.loads(nb.read_text())["cells"]
    ]


def default_exp(nb: Path) -> str | None:
    found = [
        m.group(1)
        for c in cells(nb)
        if c["cell_type"] == "code"
        for m in re.finditer(r"^#\|\s*default_exp\s+(\S+)", c["source"], re.M)
    ]
    assert len(found) <= 1, f"{nb}: {len(found)} default_exp cells"
    return found[0] if found else None


def module_order() -> dict[str, int]:
    "module -> its notebook's position in reading order."
    return {m: i for i, nb in enumerate(notebooks()) if (m := default_exp(nb))}


def test_each_module_has_one_notebook_and_every_notebook_exports_to_its_own():
    "nbdev's own model: a notebook writes one module whole, so exporting twice changes nothing and needs no fix-up."
    mods = [default_exp(nb) for nb in notebooks()]
    named = [m for m in mods if m]
    assert len(named) == len(set(named)), "two notebooks export to one module"
    for nb in notebooks():
        for c in cells(nb):
            if c["cell_type"] == "code":
                assert not re.search(r"^#\|[ \t]*export[is]?[ \t]+\S", c["source"], re.M), (
                    f"{nb.name}: exports to another module"
                )
    on_disk = {
        ".".join(p.relative_to(LIB).with_suffix("").parts)
        for p in LIB.rglob("*.py")
        if p.name not in ("__init__.py", "_modidx.py")
    }
    assert on_disk == set(named), f"modules without a notebook: {sorted(on_disk - set(named))}"
    assert not (LIB / "_nbdev_procs.py").exists()


def imports_of(path: Path) -> list[tuple[str, bool]]:
    "(imported shopdistill module, at the top level?) for every import of a package module in `path`."
    mod = ".".join(path.relative_to(LIB).with_suffix("").parts)
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                target = ".".join(
                    mod.split(".")[: -node.level] + ([node.module] if node.module else [])
                )
            elif (node.module or "").startswith("shopdistill."):
                target = node.module[len("shopdistill.") :]
            else:
                continue
            names = (
                [target]
                if node.module or not node.level
                else [f"{target}.{a.name}".strip(".") for a in node.names]
            )
            out += [(t, node.col_offset == 0) for t in names]
        elif isinstance(node, ast.Import):
            out += [
                (a.name[len("shopdistill.") :], node.col_offset == 0)
                for a in node.names
                if a.name.startswith("shopdistill.")
            ]
    return out


def test_no_module_imports_a_later_one_or_hides_an_import_in_a_function():
    "Data flows one way: a module imports only earlier notebooks' modules, and says so at its top, where a reader sees the order."
    order = module_order()
    for p in sorted(LIB.rglob("*.py")):
        mod = ".".join(p.relative_to(LIB).with_suffix("").parts)
        if mod not in order:
            continue
        for target, top in imports_of(p):
            assert top, f"{mod} imports shopdistill.{target} inside a function"
            if target in order:
                assert order[target] < order[mod], f"{mod} imports the later module {target}"


def test_each_package_holds_consecutive_chapters():
    """A package is one floor of the house: its notebooks stand together in reading order, so an import between two packages
    always runs down the chapters (chapter 00's rules live in `mechanics/`, below the sandbox; chapter 02's arena above it)."""
    packages = [m.split(".")[0] for m, _ in sorted(module_order().items(), key=lambda kv: kv[1])]
    runs = [p for i, p in enumerate(packages) if i == 0 or p != packages[i - 1]]
    assert len(runs) == len(set(runs)), (
        f"a package's notebooks are split by another package's: {runs}"
    )


def test_no_module_imports_another_modules_private_name():
    "A `_name` is its module's own: a name another module needs is public, and demonstrated where it is defined."
    for p in sorted(LIB.rglob("*.py")):
        if p.name == "_modidx.py":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and (
                node.level or (node.module or "").startswith("shopdistill")
            ):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{p.relative_to(ROOT)} imports {private} from {node.module}"


def statements(src: str) -> int:
    """The lines of a cell that begin a statement: its size as no formatter changes it (ruff spreads one call over
    many lines and puts `if x: return y` on two; neither makes a cell harder to take in)."""
    tree = code_tree(src)
    if tree is None:
        return src.count("\n") + 1
    return len({n.lineno for n in ast.walk(tree) if isinstance(n, ast.stmt)})


# single definitions that cannot be split without changing a chapter's code, which reruns its results
TOO_LONG_FOR_NOW = {"03_normalise_and_judge/01_readers.ipynb": ["def sn15_steps("]}


def test_no_code_cell_is_longer_than_sixty_statements():
    "One piece per cell, then what runs it: a cell a reader can take in at once."
    long, waived = [], []
    for nb in notebooks():
        for i, c in enumerate(cells(nb)):
            if c["cell_type"] != "code" or (n := statements(c["source"])) <= 60:
                continue
            rel = str(nb.relative_to(NBS))
            known = any(k in c["source"] for k in TOO_LONG_FOR_NOW.get(rel, []))
            (waived if known else long).append(f"{rel} cell {i}: {n} statements")
    assert not long, long
    assert len(waived) == sum(map(len, TOO_LONG_FOR_NOW.values())), (
        f"a waived cell is short now: {waived}"
    )


def test_a_cell_is_measured_in_statements():
    assert statements("x = f(\n    1,\n    2,\n)\nif x:\n    y = 1") == 3
    assert statements("%time x = 1\ny = 2") == 1


def is_export(src: str) -> bool:
    return re.search(r"^#\|\s*export\b", src, re.M) is not None


def code_tree(src: str) -> ast.Module | None:
    "A cell's code with IPython's `!`/`%` lines blanked; None where it is not Python."
    try:
        return ast.parse(re.sub(r"^\s*[!%].*$", "", src, flags=re.M))
    except SyntaxError:
        return None


def names_read(src: str) -> set[str]:
    tree = code_tree(src)
    if tree is None:
        return set(re.findall(r"\w+", src))
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
    }


def grain(nb: Path) -> tuple[list[str], list[int]]:
    "The public exported functions `nb` never runs after defining them, and its export cells that follow another with no demonstration between."
    code = [c["source"] for c in cells(nb) if c["cell_type"] == "code"]
    undemonstrated, adjacent, pending = [], [], False
    for i, src in enumerate(code):
        if not is_export(src):
            pending = pending and not src.strip()
            continue
        tree = code_tree(src)
        if tree is None or all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body):
            continue
        if pending:
            adjacent.append(i)
        pending = True
        later = set().union(*(names_read(s) for s in code[i + 1 :] if not is_export(s)))
        undemonstrated += [
            n.name
            for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and not n.name.startswith("_")
            and n.name not in later
        ]
    return undemonstrated, adjacent


def test_notebooks_are_in_nbdevs_grain():
    "Each exported piece is followed by what runs it: a public function its notebook never calls is a module file's, not a chapter's."
    found = {str(nb.relative_to(NBS)): g for nb in notebooks() if any(g := grain(nb))}
    assert not found, found


def test_the_grain_check_can_fail(tmp_path):
    "Two export cells back to back, the first never called: both faults are seen."
    nb = tmp_path / "x.ipynb"
    src = ["#| export\ndef shown(): return 1", "#| export\ndef hidden(): return shown()", "shown()"]
    nb.write_text(json.dumps({"cells": [{"cell_type": "code", "source": s} for s in src]}))
    assert grain(nb) == (["hidden"], [1])


# every layout `core.run` defines, so that a new one is guarded without being listed here
LAYOUTS = [
    c
    for c in vars(layout).values()
    if isinstance(c, type) and issubclass(c, layout.Layout) and c is not layout.Layout
]
RUN_FOLDERS = {
    "sandbox",
    "arena",
    "trajectories",
    "corpus",
    "train",
    "loop",
    "results",
    "arena_rules",
    "run_agent",
    *stage_names(),
}


def run_names() -> set[str]:
    "Every file and folder name the run layout gives, and the folders `Run` itself names, as written in a path."
    names = {n for cls in LAYOUTS for n, _ in cls.names().values()}
    return names | {n.split("/")[-1] for n in names} | RUN_FOLDERS


def joined_paths(source: str, names: set[str]) -> list[str]:
    'The `... / "name"` joins in `source` whose name is a run artifact\'s.'
    return [
        m.group(0)
        for m in re.finditer(r"""/\s*f?["']([^"'{}]+)["']""", source)
        if m.group(1) in names
    ]


def test_run_artifacts_are_named_only_by_the_run_layout():
    """A chapter asks the `Run` for another chapter's output (`run.bank()`, `run.stage(s).policy`); it never spells the path.
    The library may spell none of the layout's names; a notebook's demonstrations write small files of their own in
    temporary folders (a `tasks.jsonl`, a `documents.jsonl.gz`), so there only the run's folders and stages count."""
    names, found = run_names(), []
    for p in sorted(LIB.rglob("*.py")):
        if p.name != "_modidx.py" and p != LIB / "core" / "run.py":
            found += [f"{p.relative_to(ROOT)}: {j}" for j in joined_paths(p.read_text(), names)]
    for nb in notebooks():
        if nb.name == "01_run.ipynb" and nb.parent.name == "core":
            continue
        for i, c in enumerate(cells(nb)):
            if c["cell_type"] == "code":
                found += [
                    f"{nb.relative_to(ROOT)} cell {i}: {j}"
                    for j in joined_paths(c["source"], RUN_FOLDERS)
                ]
    assert not found, found


def test_every_layout_names_its_files():
    "A Layout subclass without its own `@dataclass(frozen=True)` would name nothing (its fields stay class attributes), and the guard above would not see its names."
    assert len(LAYOUTS) >= 10
    assert not [c.__name__ for c in LAYOUTS if not c.names()]


def test_the_guard_sees_a_spelled_path():
    "The check above can fail: a hand-written join of a run artifact's name is what it looks for."
    assert joined_paths('bank = cfg.run.path / "arena" / "bank.jsonl"', run_names()) == [
        '/ "arena"',
        '/ "bank.jsonl"',
    ]
    assert joined_paths("x = run.bank()", run_names()) == []


def test_the_foundations_know_no_stage_and_nothing_is_named_as_a_module_string():
    """The recipe belongs to `training/`: no stage name (folder or alias) and no import of `training` in `core/`; no run
    function named as a `"module:function"` string anywhere (an import no reader or tool can follow)."""
    names = {s.name for s in recipe()} | {s.alias for s in recipe()}
    for p in sorted((LIB / "core").glob("*.py")):
        text = p.read_text()
        assert "training" not in [t.split(".")[0] for t, _ in imports_of(p)], p
        found = sorted(n for n in names if re.search(rf"""["'/]{re.escape(n)}["'/]""", text))
        assert not found, f"{p.relative_to(ROOT)} names stages {found}"
    spelled = re.compile(r"""["']shopdistill(\.\w+)+:\w+["']""")
    for p in [*LIB.rglob("*.py"), *ROOT.glob("tests/*.py"), *ROOT.glob("bench/*.py")]:
        if p.name != "_modidx.py":
            assert not spelled.search(p.read_text()), p


def test_packages_import_only_lower_floors():
    "The package-level import graph: a package imports only packages whose chapters come before its own."
    order = module_order()
    floor = {}
    for m, i in order.items():
        floor[m.split(".")[0]] = min(floor.get(m.split(".")[0], i), i)
    for p in sorted(LIB.rglob("*.py")):
        mod = ".".join(p.relative_to(LIB).with_suffix("").parts)
        if mod not in order:
            continue
        for target, _ in imports_of(p):
            a, b = mod.split(".")[0], target.split(".")[0]
            if b in floor and a != b:
                assert floor[b] < floor[a], (
                    f"{mod} (package {a}) imports {target} (package {b}, a higher floor)"
                )
