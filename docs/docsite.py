"""The reader's site: the executed chapters of a run, an index page from `nbs/index.ipynb`, and the API reference.

`python docs/docsite.py build` stages cleaned copies of the executed notebooks of `runs/<profile>/` (directive comments
removed, progress bars collapsed to their last line, the machine's paths made relative) with an API page per module
into `_docs_src/`, and runs MkDocs (theme, plugins: `mkdocs.yml`) into `_docs/`. `python docs/docsite.py check` checks
a built site: every chapter's pages, every image a page links, no absolute path of the machine, no library warning.

Quarto (nbdev's `nbdev-docs`) cannot be installed from a package registry (its PyPI package downloads the binary at
build time), so the site is built with MkDocs, which installs from PyPI (the `docs` extra of `pyproject.toml`).
"""

import argparse
import functools
import html
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from readme import index_markdown  # noqa: E402  (docs/readme.py: the index notebook as Markdown, shared with README.md)
from shopdistill.core.run import Run, figures_dir, runs_root  # noqa: E402
from shopdistill.reproduce.driver import (  # noqa: E402
    execute,
    find_chapters,
    injected,
    is_export,
    notebook_name,
    prepare_notebook,
    strip_directives,
)

# ---------------------------------------------------------------- cleaning an executed notebook for a reader

# a top-level folder of the repository: an absolute path into one of them is shown from the repository root
REPO_FOLDERS = (
    "runs",
    "figures",
    "paper",
    "nbs",
    "configs",
    "examples",
    "bench",
    "tests",
    ".venv",
    "_docs",
)
_IN_REPO = re.compile(
    r"(?<![\w.~-])(?:/[\w.@+-]+)+?/(?=(?:%s)/)" % "|".join(re.escape(f) for f in REPO_FOLDERS)
)
_TMP = re.compile(r"(?<![\w.~-])/(?:var/)?tmp/[\w.@+-]+")
_HOME = re.compile(r"(?<![\w.~-])(?:/root|/home/[\w.@+-]+)(?=/|\b)")
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|root|tmp|home)/")
LIBRARY_WARNING = re.compile(r"\b[A-Z]\w*Warning\b|\bwarnings\.warn\b")


def relative_paths(text: str, roots=()) -> str:
    """`text` with the machine's absolute paths made readable anywhere: paths under a repository root (`roots`: the checkouts
    the run and this build happened in), or under a folder named like one of the repository's, from the root; temporary
    folders as `<tmp>`; home as `~`."""
    for r in sorted({str(Path(r)) for r in roots}, key=len, reverse=True):
        text = re.sub(re.escape(r.rstrip("/")) + r"/(?=[\w.])", "", text)
    text = _IN_REPO.sub("", text)
    text = _TMP.sub("<tmp>", text)
    return _HOME.sub("~", text)


def _clean_output(out, roots=()):
    "One output with the machine's paths rewritten in its text."
    if out.get("output_type") == "stream":
        out["text"] = relative_paths(out["text"], roots)
    elif out.get("output_type") == "error":
        out["traceback"] = [relative_paths(t, roots) for t in out.get("traceback", [])]
        out["evalue"] = relative_paths(out.get("evalue", ""), roots)
    for mime in ("text/plain", "text/html", "text/markdown"):
        if mime in out.get("data", {}):
            v = out["data"][mime]
            out["data"][mime] = relative_paths("".join(v) if isinstance(v, list) else v, roots)
    return out


def clean_notebook(nb, roots=()):
    """A reader's copy of an executed notebook: papermill's injected cells dropped, directives stripped (a cell left
    empty goes), `#| hide` cells hidden, cells the run did not execute shown as code, consecutive stream outputs merged
    with carriage returns applied (a progress bar becomes its last line), paths made relative, run metadata dropped."""
    from nbconvert.preprocessors import CoalesceStreamsPreprocessor

    cells = []
    for c in nb.cells:
        if injected(c):
            continue
        # a code cell the run skipped (driver: `_as_raw`), under its own id: the same page on every build
        if c.cell_type == "raw" and c.source.lstrip().startswith("#|"):
            c = nbformat.v4.new_code_cell(c.source, **({"id": c["id"]} if "id" in c else {}))
        if c.cell_type == "code":
            if re.search(r"^#\|\s*hide\b", c.source, re.M):
                continue
            src = strip_directives(c.source)
            if not src.strip() and not c.get("outputs"):
                continue
            c.source = src
            c.metadata = {}  # tags (`parameters`) are the run's business, not the reader's
            c, _ = CoalesceStreamsPreprocessor().preprocess_cell(c, {}, 0)
            c.outputs = [_clean_output(o, roots) for o in c.outputs]
        else:
            c.metadata = {}
        cells.append(c)
    nb.cells = cells
    nb.metadata = {k: v for k, v in nb.metadata.items() if k in ("kernelspec", "language_info")}
    return nb


def warnings_in(nb) -> list[str]:
    "Library warnings a reader would see in the notebook's stderr outputs (one short line each)."
    found = []
    for i, c in enumerate(nb.cells):
        for o in c.get("outputs", []):
            if (
                o.get("output_type") == "stream"
                and o.get("name") == "stderr"
                and LIBRARY_WARNING.search(o["text"])
            ):
                found.append(f"cell {i}: {LIBRARY_WARNING.search(o['text']).group(0)}")
    return found


# ---------------------------------------------------------------- what the site holds


def title_of(notebook: Path) -> str:
    "A notebook's title: its first H1, as plain text (code spans and emphasis unmarked)."
    nb = nbformat.read(notebook, as_version=4)
    for c in nb.cells:
        if c.cell_type == "markdown" and c.source.lstrip().startswith("# "):
            return re.sub(r"[`*_]", "", c.source.lstrip()[2:].splitlines()[0]).strip()
    return notebook.stem


def chapter_title(folder: str, notebooks: list[Path]) -> str:
    "`05 · The supervised stack`: the chapter's number and the title of its last notebook (the one that builds its outputs)."
    return f"{folder.split('_')[0]} · {title_of(notebooks[-1])}"


def module_of(notebook: Path) -> str | None:
    "The module a notebook exports to (its `#| default_exp`), or None."
    nb = nbformat.read(notebook, as_version=4)
    for c in nb.cells:
        m = (
            re.search(r"^#\|\s*default_exp\s+(\S+)", c.source, re.M)
            if c.cell_type == "code"
            else None
        )
        if m:
            return m.group(1)
    return None


def _api_md(module: str) -> str:
    return f"# `shopdistill.{module}`\n\n::: shopdistill.{module}\n"


def _page_header(nb, module: str | None, source: str):
    "A line under the notebook's title: its module's API page and where the page's outputs come from."
    bits = [f"Module [`shopdistill.{module}`](../api/{module}.md)"] if module else []
    bits.append(source)
    # a fixed id: the same page on every build
    cell = nbformat.v4.new_markdown_cell("*" + " · ".join(bits) + "*", id="page-header")
    at = next(
        (
            i + 1
            for i, c in enumerate(nb.cells)
            if c.cell_type == "markdown" and c.source.lstrip().startswith("# ")
        ),
        0,
    )
    nb.cells.insert(at, cell)


def execute_copy(src: Path, dest: Path, timeout: int = 600):
    "Execute a notebook that no reproduction runs (the foundations, the tooling) into `dest`, in the driver's kernel, as a chapter is."
    prepare_notebook(src, dest)
    execute(dest, dest, "smoke", src.parent, timeout)


def stage(
    profile: str,
    runs: Path,
    staging: Path,
    figures: Path,
    nbs: Path = ROOT / "nbs",
    extra=("core", "99_reproduce"),
    paper_pdf: Path | None = None,
    strict: bool = True,
    say=print,
) -> dict:
    """Write the site's sources into `staging/docs` and its MkDocs configuration into `staging/mkdocs.yml`; returns the nav.
    Raises when the run lacks an executed notebook or a page would show a library warning."""
    run = Run.of(profile, runs)
    docs = staging / "docs"
    if staging.exists():
        shutil.rmtree(staging)
    docs.mkdir(parents=True)
    chapters, missing, warned = {}, [], []
    for src in find_chapters(nbs):
        name = notebook_name(src)
        executed = run.executed(name)
        if not executed.exists():
            missing.append(name)
            continue
        chapters.setdefault(src.parent.name, []).append((src, executed))
    if missing:
        raise FileNotFoundError(
            f"{run.path} has no executed copy of {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}: "
            f"run `make reproduce PROFILE={profile}` first"
        )
    nav, api = [{"Home": "index.md"}], {}
    # the checkout the run happened in, this one
    roots = (Path(runs).absolute().parent, ROOT, nbs.absolute().parent)

    def page(src: Path, nb_path: Path, folder: str, note: str) -> dict:
        nb = clean_notebook(nbformat.read(nb_path, as_version=4), roots)
        w = warnings_in(nb)
        if w:
            warned.append(f"{folder}/{src.name}: {'; '.join(w)}")
        module = module_of(src)
        if module:
            api.setdefault(folder, []).append(module)
        _page_header(nb, module, note)
        out = docs / folder / src.name
        out.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, out)
        return {title_of(src): f"{folder}/{src.name}"}

    ran = f"outputs from the `{profile}` reproduction"
    ordered = [("core", "Foundations: shopdistill.core")] if "core" in extra else []
    ordered += [(f, chapter_title(f, [s for s, _ in v])) for f, v in chapters.items()]
    ordered += (
        [("99_reproduce", "Tooling: shopdistill.reproduce")] if "99_reproduce" in extra else []
    )
    sections = []
    with tempfile.TemporaryDirectory() as tmp:
        for folder, title in ordered:
            if folder in chapters:
                pages = [page(s, e, folder, ran) for s, e in chapters[folder]]
            else:
                pages = []
                for s in sorted((nbs / folder).glob("[0-9][0-9]*_*.ipynb")):
                    say(f"docs: executing {folder}/{s.name} (not part of a reproduction)")
                    dest = Path(tmp) / folder / s.name
                    execute_copy(s, dest)
                    pages.append(page(s, dest, folder, "executed when this site was built"))
            sections.append((folder, {title: pages}))
    if warned and strict:
        raise RuntimeError(
            "library warnings in the executed notebooks (fix their cause):\n  "
            + "\n  ".join(warned)
        )
    nav.append({"Chapters": [s for f, s in sections if f in chapters]})
    if extra:
        nav.append({"Foundations and tooling": [s for f, s in sections if f not in chapters]})
    api_nav = []
    for folder, title in ordered:
        mods = api.get(folder, [])
        for m in mods:
            (docs / "api" / f"{m}.md").parent.mkdir(parents=True, exist_ok=True)
            (docs / "api" / f"{m}.md").write_text(_api_md(m))
        if mods:
            api_nav.append({title: [{f"shopdistill.{m}": f"api/{m}.md"} for m in mods]})
    nav.append({"API reference": api_nav})
    _stage_index(docs, nbs / "index.ipynb", figures, chapters)
    if paper_pdf is not None and paper_pdf.exists():
        shutil.copy2(paper_pdf, docs / "paper.pdf")
        nav.append({"Paper (PDF)": "paper.pdf"})
    (staging / "mkdocs.yml").write_text(
        json.dumps({"INHERIT": str(ROOT / "mkdocs.yml"), "docs_dir": "docs", "nav": nav}, indent=1)
        + "\n"
    )
    return {"nav": nav, "chapters": {f: [s.stem for s, _ in v] for f, v in chapters.items()}}


def _stage_index(docs: Path, index_nb: Path, figures: Path, chapters: dict):
    "The home page: the index notebook's Markdown, its links into `nbs/` pointed at the chapters' pages, the figures it shows copied."
    text = index_markdown(index_nb)

    def link(m):
        label, target = m.group(1), m.group(2)
        if re.match(r"[a-z]+:|#", target):
            return m.group(0)
        t = target.rstrip("/")
        if t.startswith("nbs/"):
            parts = t.split("/")[1:]
            if len(parts) == 1 and parts[0] in chapters:
                return f"[{label}]({parts[0]}/{chapters[parts[0]][0][0].name})"
            if (
                len(parts) == 2
                and parts[0] in chapters
                and any(s.name == parts[1] for s, _ in chapters[parts[0]])
            ):
                return f"[{label}]({t[4:]})"
        if t.startswith("figures/") and (figures / t.split("/", 1)[1]).exists():
            (docs / "figures").mkdir(exist_ok=True)
            shutil.copy2(figures / t.split("/", 1)[1], docs / t)
            return m.group(0)
        # a file of the repository that the site does not carry: its name, without a link
        return label

    text = re.sub(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)", link, text)
    text = re.sub(
        r"!\[([^\]]*)\]\(([^)\s]+)\)",
        lambda m: link(m) if m.group(2).startswith("figures/") else m.group(0),
        text,
    )
    (docs / "index.md").write_text(text)


def build(
    profile: str = "smoke",
    runs: Path | None = None,
    out: Path = ROOT / "_docs",
    staging: Path = ROOT / "_docs_src",
    figures: Path | None = None,
    nbs: Path = ROOT / "nbs",
    paper_pdf: Path | None = ROOT / "paper" / "main.pdf",
    extra=("core", "99_reproduce"),
    strict: bool = True,
    say=print,
) -> dict:
    "Stage the site's sources and build it with MkDocs (`--strict`: a broken link or a warning fails the build) into `out`."
    runs = Path(runs) if runs else runs_root()
    info = stage(
        profile,
        runs,
        Path(staging),
        Path(figures) if figures else figures_dir(),
        nbs=nbs,
        paper_pdf=paper_pdf,
        extra=extra,
        strict=strict,
        say=say,
    )
    cmd = [
        sys.executable,
        "-m",
        "mkdocs",
        "build",
        "--strict",
        "--quiet",
        "-f",
        str(Path(staging) / "mkdocs.yml"),
        "-d",
        str(Path(out).absolute()),
    ]
    # Material's notice of its end of life (May 2027; Zensical succeeds it) is printed on every build: known, and not a fault of the site
    r = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    log = (r.stdout + r.stderr).strip()
    if r.returncode != 0 or log:
        raise RuntimeError(f"mkdocs build {'failed' if r.returncode else 'warned'}:\n{log}")
    return info


# ---------------------------------------------------------------- checking a built site


def _visible_text(page: str) -> str:
    "A page's HTML without the code listings of notebook inputs (program text, the same on every machine) and scripts."
    page = re.sub(r"<script\b.*?</script>|<style\b.*?</style>", "", page, flags=re.S)
    return re.sub(r'<div class="jp-InputArea\b.*?</div>\s*</div>\s*</div>', "", page, flags=re.S)


def check(site: Path, chapters: dict[str, list[str]]) -> list[str]:
    "Problems of a built site: a chapter page missing, an image a page shows that is not there, a machine path, a warning, a directive."
    site, problems = Path(site), []
    if not (site / "index.html").exists():
        return [f"{site}/index.html is missing"]
    for folder, stems in chapters.items():
        for s in stems:
            if not (site / folder / s / "index.html").exists():
                problems.append(f"chapter page {folder}/{s}/ is missing")
    for p in sorted(site.rglob("*.html")):
        rel, page = p.relative_to(site), p.read_text(encoding="utf-8", errors="replace")
        for src in re.findall(r"<img\b[^>]*\bsrc=\"([^\"]+)\"", page):
            if src.startswith(("data:", "http:", "https:")):
                continue
            target = (p.parent / html.unescape(src).split("#")[0].split("?")[0]).resolve()
            if not target.is_file():
                problems.append(f"{rel}: image {src} does not exist")
        text = _visible_text(page)
        for m in MACHINE_PATH.finditer(text):
            problems.append(
                f"{rel}: absolute path {text[m.start() : m.start() + 60].split('<')[0]!r}"
            )
        # the warning itself, not a page that names it (a demonstration of the filter that hides it)
        if re.search(r"IProgress not found\. Please|\bTqdmWarning\b", text):
            problems.append(f"{rel}: a library warning is shown")
        if re.search(
            r"(?m)^\s*#\|\s*(export|exporti|reproduce|default_exp|hide|eval)\b",
            html.unescape(re.sub(r"<[^>]+>", "", page)),
        ):
            problems.append(f"{rel}: an nbdev directive is shown")
    return problems


def expected_chapters(nbs: Path = ROOT / "nbs") -> dict[str, list[str]]:
    "Every chapter notebook (folder -> notebook stems) the site of a run must have a page for."
    out = {}
    for p in find_chapters(nbs):
        out.setdefault(p.parent.name, []).append(p.stem)
    return out


# ---------------------------------------------------------------- looking at it in a browser


BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def browser() -> str | None:
    "A headless-capable Chromium on this machine (Debian: `apt-get install chromium`), or None."
    return next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)


class serve:
    "Serve a built site on loopback for the duration (`with serve(site) as url:`), on a free port, in a thread."

    def __init__(self, site: Path):
        handler = functools.partial(_QuietHandler, directory=str(site))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)

    def __enter__(self) -> str:
        import threading

        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/"

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass  # one line per request would bury the test's output


def screenshot(
    url: str, png: Path, width: int = 1280, height: int = 900, timeout: int = 90
) -> Path:
    "A screenshot of `url` taken by headless Chromium (`_chromium`)."
    size, out = f"--window-size={width},{height}", f"--screenshot={Path(png).absolute()}"
    _chromium(url, "--hide-scrollbars", size, out, timeout=timeout)
    if not Path(png).exists():
        raise RuntimeError(f"chromium wrote no screenshot of {url}")
    return Path(png)


def _chromium(url: str, *args: str, timeout: int = 90) -> subprocess.CompletedProcess:
    "Headless Chromium on `url`, isolated from the machine's profile and from the network beyond `url`."
    exe = browser()
    if exe is None:
        raise FileNotFoundError("no Chromium on this machine (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run",
               f"--user-data-dir={profile}", *args, url]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"chromium failed ({r.returncode}): {r.stderr[-2000:]}")
    return r


def rendered_dom(url: str) -> str:
    "The page at `url` as the browser holds it once loaded (its DOM written out as HTML)."
    return _chromium(url, "--dump-dom").stdout


# ---------------------------------------------------------------- what a chapter page shows

_CELL = re.compile(r'<div\b[^>]*\bclass="jp-Cell (jp-CodeCell|jp-MarkdownCell)\b')
_OUTPUT = re.compile(r'class="[^"]*\bjp-OutputArea-output\b[^"]*"(?:\s+data-mime-type="([^"]+)")?')


def page_cells(page: str) -> list[dict]:
    """A rendered notebook page's cells in order: `kind` (code or markdown), the `text` of its input and
    whether it `shows` an output other than a warning on stderr."""
    starts = [(m.start(), m.group(1)) for m in _CELL.finditer(page)] + [(len(page), None)]
    cells = []
    for (a, kind), (b, _) in zip(starts, starts[1:]):
        chunk = page[a:b]
        cut = chunk.find("jp-Cell-outputWrapper")
        text = html.unescape(re.sub(r"<[^>]+>", "", chunk if cut < 0 else chunk[:cut]))
        mimes = [m.group(1) for m in _OUTPUT.finditer(chunk)] if cut >= 0 else []
        shows = any(m != "application/vnd.jupyter.stderr" for m in mimes)
        cells.append({"kind": kind[3:-4].lower(), "text": text, "shows": shows})
    return cells


def exported_names(notebook: Path) -> list[str]:
    "The public functions and classes a notebook's `#| export` cells define at their top level."
    names = []
    for c in nbformat.read(notebook, as_version=4).cells:
        if c.cell_type == "code" and is_export(c.source):
            names += re.findall(r"^(?:async def|def|class) ([A-Za-z]\w*)", c.source, re.M)
    return names


def undemonstrated(page: str, names) -> list[str]:
    """The names of `names` whose defining cell on `page` is missing or not followed by a code cell
    that shows something (a value, a table, a plot, `show_doc`)."""
    # a cell the site hides (directives only, the injected parameters) is an empty shell: not a step
    code = [c for c in page_cells(page) if c["kind"] == "code" and c["text"].strip()]
    missing = []
    for n in names:
        defines = re.compile(rf"^\s*(?:async\s+def|def|class)\s+{re.escape(n)}\b", re.M)
        at = next((i for i, c in enumerate(code) if defines.search(c["text"])), None)
        if at is None or at + 1 >= len(code) or not code[at + 1]["shows"]:
            missing.append(n)
    return missing


def introduction_words(page: str) -> int:
    "Words of prose a page shows before its first code cell with code in it: a chapter's introduction."
    words = 0
    for c in page_cells(page):
        if c["kind"] == "code" and c["text"].strip():
            break
        words += len(c["text"].split()) if c["kind"] == "markdown" else 0
    return words


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser(
        "build", help="stage the executed chapters of a run and build the site with MkDocs"
    )
    c = sub.add_parser("check", help="check a built site")
    for p in (b, c):
        p.add_argument("--profile", default="smoke")
        p.add_argument(
            "--site", type=Path, default=ROOT / "_docs", help="the built site (default: _docs/)"
        )
    b.add_argument(
        "--runs",
        type=Path,
        default=None,
        help="the runs folder (default: runs/, or $SHOPDISTILL_RUNS)",
    )
    b.add_argument(
        "--figures",
        type=Path,
        default=None,
        help="the figures folder (default: the repository's figures/)",
    )
    s = sub.add_parser(
        "screenshot",
        help="serve a built site on loopback and screenshot one of its pages with headless Chromium",
    )
    s.add_argument("--site", type=Path, default=ROOT / "_docs")
    s.add_argument("--page", default="", help="the page's path in the site (default: the index)")
    s.add_argument("--out", type=Path, required=True, help="the PNG to write")
    s.add_argument("--size", default="1280x900", help="window size, WIDTHxHEIGHT")
    a = ap.parse_args(argv)
    if a.cmd == "screenshot":
        w, h = (int(x) for x in a.size.split("x"))
        with serve(a.site) as url:
            print(f"docs: {screenshot(url + a.page, a.out, w, h)}")
        return 0
    if a.cmd == "build":
        try:
            info = build(a.profile, a.runs, a.site, figures=a.figures)
        except (FileNotFoundError, RuntimeError) as e:
            print(f"make docs: {e}", file=sys.stderr)
            return 1
        n = sum(len(v) for v in info["chapters"].values())
        print(
            f"docs: {n} chapter pages in {len(info['chapters'])} chapters, API reference and index -> {a.site}"
        )
        return 0
    problems = check(a.site, expected_chapters())
    for p in problems:
        print(f"docs check: {p}", file=sys.stderr)
    pages = len(list(Path(a.site).rglob("*.html")))
    print(f"docs check: {pages} pages, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
