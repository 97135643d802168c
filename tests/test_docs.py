"""The reader's site and the README: README.md is what nbs/index.ipynb gives; an executed notebook is cleaned for readers
(no directives, one line per progress bar, no machine paths, no papermill cells); a site built from a tiny run has its pages,
passes the checks CI runs, and looks like a page in headless Chromium (the index, screenshotted and measured)."""

import base64
import importlib.util
import io
import json
import os
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))
import docsite  # noqa: E402
import readme  # noqa: E402

HAVE_MKDOCS = all(
    importlib.util.find_spec(m)
    for m in ("mkdocs", "material", "mkdocs_jupyter", "mkdocstrings_handlers")
)
needs_mkdocs = pytest.mark.skipif(
    not HAVE_MKDOCS,
    reason="the docs extra is not installed (pip install -e '.[docs]'; make env does)",
)


def test_readme_is_generated_from_the_index_notebook():
    assert (ROOT / "README.md").read_text() == readme.readme_text(), (
        "README.md is stale: edit nbs/index.ipynb, then `make readme`"
    )
    assert readme.main(["--check"]) == 0


def test_readme_check_fails_on_a_stale_readme(tmp_path, monkeypatch):
    stale = tmp_path / "README.md"
    stale.write_text("# an old README\n")
    monkeypatch.setattr(readme, "README", stale)
    assert readme.main(["--check"]) == 1


@pytest.mark.parametrize(
    "text,want",
    [
        ("wrote /work/after/runs/smoke/arena/bank.jsonl", "wrote runs/smoke/arena/bank.jsonl"),
        ("/home/ana/src/shopdistill/.venv/lib/python3.11/x.py:21", ".venv/lib/python3.11/x.py:21"),
        ("File /srv/ci/shopdistill/shopdistill/core/run.py:3", "File shopdistill/core/run.py:3"),
        ("error: /tmp/tmpu7ngjoka/empty.jsonl: no records", "error: <tmp>/empty.jsonl: no records"),
        ("cache in /root/.cache/shopdistill/bases", "cache in ~/.cache/shopdistill/bases"),
        ("50% of 1/2 steps, ratio 3/4", "50% of 1/2 steps, ratio 3/4"),
    ],
)
def test_machine_paths_become_relative(text, want):
    assert docsite.relative_paths(text, roots=["/srv/ci/shopdistill"]) == want
    assert not docsite.MACHINE_PATH.search(want)


def executed_notebook() -> nbformat.NotebookNode:
    "A notebook as the driver leaves it: papermill's injected cell, directives, a progress bar in pieces, an absolute path, a figure."
    nb = nbformat.v4.new_notebook()
    injected = nbformat.v4.new_code_cell('profile = "smoke"')
    injected.metadata["tags"] = ["injected-parameters"]
    export = nbformat.v4.new_code_cell('#| export\ndef f(x):\n    "Twice `x`."\n    return 2 * x')
    run = nbformat.v4.new_code_cell("#| reproduce\nprint(f(2))")
    run.outputs = [
        nbformat.v4.new_output("stream", name="stderr", text=t)
        for t in ("\rtrain:   0%| 0/3", "\rtrain:  67%| 2/3", "\rtrain: 100%| 3/3", "\n")
    ]
    run.outputs.append(
        nbformat.v4.new_output("stream", name="stdout", text="wrote /work/x/runs/smoke/out.json\n")
    )
    png = io.BytesIO()
    from PIL import Image

    Image.new("RGB", (40, 20), (200, 60, 60)).save(png, format="PNG")
    fig = nbformat.v4.new_code_cell("plt.show()")
    fig.outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={"image/png": base64.b64encode(png.getvalue()).decode(), "text/plain": "<Figure>"},
        )
    ]
    nb.cells = [
        nbformat.v4.new_markdown_cell("# A demo chapter\n> What it does."),
        nbformat.v4.new_code_cell("#| default_exp core.files"),
        injected,
        export,
        run,
        fig,
    ]
    return nb


def test_an_executed_notebook_is_cleaned_for_readers():
    nb = docsite.clean_notebook(executed_notebook())
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.source for c in code] == [
        'def f(x):\n    "Twice `x`."\n    return 2 * x',
        "print(f(2))",
        "plt.show()",
    ]
    streams = [o for o in code[1].outputs]
    assert [(o.name, o.text) for o in streams] == [
        ("stderr", "train: 100%| 3/3\n"),
        ("stdout", "wrote runs/smoke/out.json\n"),
    ]
    assert docsite.warnings_in(nb) == []
    nb.cells[-1].outputs.append(
        nbformat.v4.new_output(
            "stream", name="stderr", text="x.py:21: TqdmWarning: IProgress not found\n"
        )
    )
    assert docsite.warnings_in(nb) == [f"cell {len(nb.cells) - 1}: TqdmWarning"]


@pytest.fixture(scope="module")
def tiny_site(tmp_path_factory):
    "A site built from a one-chapter run (its notebook exports `core.files`, whose API page is built too); None without MkDocs."
    if not HAVE_MKDOCS:
        return None
    base = tmp_path_factory.mktemp("site")
    nbs, runs, figures = base / "nbs", base / "runs", base / "figures"
    (nbs / "00_demo").mkdir(parents=True)
    source = executed_notebook()
    source.cells = [
        c for c in source.cells if "injected-parameters" not in c.metadata.get("tags", [])
    ]
    for c in source.cells:
        if c.cell_type == "code":
            c.outputs = []
    nbformat.write(source, nbs / "00_demo" / "00_first.ipynb")
    (nbs / "index.ipynb").write_bytes((ROOT / "nbs" / "index.ipynb").read_bytes())
    (runs / "smoke" / "00_demo").mkdir(parents=True)
    nbformat.write(executed_notebook(), runs / "smoke" / "00_demo" / "00_first.ipynb")
    figures.mkdir()
    for png in (ROOT / "figures").glob("*.png"):
        (figures / png.name).write_bytes(png.read_bytes())
    # docsite.build raises when MkDocs fails or prints anything (a warning under --strict, a notice)
    info = docsite.build(
        "smoke",
        runs,
        base / "_docs",
        base / "_docs_src",
        figures,
        nbs=nbs,
        paper_pdf=None,
        extra=(),
        say=lambda m: None,
    )
    return base / "_docs", info


@needs_mkdocs
def test_a_site_built_from_a_run_has_its_pages_and_passes_the_checks(tiny_site):
    site, info = tiny_site
    assert info["chapters"] == {"00_demo": ["00_first"]}
    page = (site / "00_demo" / "00_first" / "index.html").read_text()
    assert "train: 100%| 3/3" in page and "train:  67%" not in page
    assert "#| export" not in page and "/work/" not in page
    assert (site / "api" / "core.files" / "index.html").exists()
    assert docsite.check(site, {"00_demo": ["00_first"]}) == []
    assert "chapter page 00_demo/00_missing/ is missing" in docsite.check(
        site, {"00_demo": ["00_first", "00_missing"]}
    )


@needs_mkdocs
def test_the_check_catches_a_machine_path_and_a_missing_image(tiny_site, tmp_path):
    import shutil

    site = tmp_path / "site"
    shutil.copytree(tiny_site[0], site)
    p = site / "00_demo" / "00_first" / "index.html"
    p.write_text(
        p.read_text().replace(
            "</article>", '<p>/root/.cache/x</p><img src="../../figures/nothing.png"></article>', 1
        )
    )
    problems = docsite.check(site, {"00_demo": ["00_first"]})
    assert any("absolute path '/root/.cache/x'" in x for x in problems) and any(
        "nothing.png does not exist" in x for x in problems
    )
    assert not any("library warning" in x for x in problems)


def test_the_check_tells_a_library_warning_from_a_page_that_names_it(tiny_site, tmp_path):
    "A demonstration of the filter that hides the warning names it; only the warning itself is a problem."
    import shutil

    site = tmp_path / "site"
    shutil.copytree(tiny_site[0], site)
    p = site / "00_demo" / "00_first" / "index.html"
    page = p.read_text()
    p.write_text(
        page.replace("</article>", "<pre>(True, 'ignore:IProgress not found')</pre></article>", 1)
    )
    assert not any("library warning" in x for x in docsite.check(site, {"00_demo": ["00_first"]}))
    warning = "<pre>IProgress not found. Please update jupyter and ipywidgets.</pre>"
    p.write_text(page.replace("</article>", warning + "</article>", 1))
    assert any("library warning" in x for x in docsite.check(site, {"00_demo": ["00_first"]}))


def _site_for_screenshot(request):
    "The site CI built (`$SHOPDISTILL_DOCS_SITE`, after `make docs`) or, without one, the tiny site."
    if os.environ.get("SHOPDISTILL_DOCS_SITE"):
        site = Path(os.environ["SHOPDISTILL_DOCS_SITE"])
        assert (site / "index.html").exists(), f"$SHOPDISTILL_DOCS_SITE={site} holds no built site"
        return site
    tiny = request.getfixturevalue("tiny_site")
    if tiny is None:
        pytest.skip(
            "no site to look at: the docs extra is not installed and $SHOPDISTILL_DOCS_SITE is unset"
        )
    return tiny[0]


@pytest.mark.skipif(
    docsite.browser() is None,
    reason="Chromium is not installed (Debian: apt-get install chromium); CI installs it",
)
def test_the_index_page_in_headless_chromium(request, tmp_path):
    "The index served on loopback, screenshotted: a page of the expected size with the theme's header and text on it, not a blank."
    from PIL import Image

    site = _site_for_screenshot(request)
    with docsite.serve(site) as url:
        png = docsite.screenshot(url, tmp_path / "index.png", 1280, 900)
    im = Image.open(png).convert("RGB")
    assert im.size == (1280, 900)
    assert png.stat().st_size > 20_000, "a nearly empty image"
    header = im.crop((0, 0, 1280, 40)).getcolors(1 << 16)
    indigo = sum(
        n for n, (r, g, b) in header if b > 150 and r < 100 and g < 110
    )  # Material's indigo header bar
    assert indigo > 0.5 * 1280 * 40, "no theme header: the stylesheet did not load"
    body = im.crop((250, 120, 1000, 880))
    dark = sum(n for n, rgb in body.getcolors(1 << 20) if sum(rgb) < 300)
    assert dark > 2_000, "no text on the page"
    assert len(im.getcolors(1 << 20)) > 50, "a flat image"


PAGE = """<html><body>
<div class="jp-Cell jp-MarkdownCell jp-Notebook-cell"><div class="jp-InputArea"><h1>Title</h1>
<p>Why this chapter exists, in a few words.</p></div></div>
<div class="jp-Cell jp-CodeCell jp-Notebook-cell"><div class="jp-InputArea-editor"><pre>
<span class="k">def</span> <span class="nf">shown</span>(x): ...
<span class="k">def</span> <span class="nf">quiet</span>(x): ...</pre></div></div>
<div class="jp-Cell jp-CodeCell jp-Notebook-cell"><div class="jp-InputArea-editor"><pre>shown(1)</pre></div>
<div class="jp-Cell-outputWrapper"><div class="jp-RenderedText jp-OutputArea-output" data-mime-type="text/plain">
<pre>1</pre></div></div></div>
<div class="jp-Cell jp-CodeCell jp-Notebook-cell"><div class="jp-InputArea-editor"><pre>
<span class="k">class</span> <span class="nc">Warned</span>: ...</pre></div></div>
<div class="jp-Cell jp-CodeCell jp-Notebook-cell"><div class="jp-InputArea-editor"><pre>Warned()</pre></div>
<div class="jp-Cell-outputWrapper"><div class="jp-RenderedText jp-OutputArea-output"
 data-mime-type="application/vnd.jupyter.stderr"><pre>a warning</pre></div></div></div>
</body></html>"""


def test_a_rendered_page_is_read_cell_by_cell():
    "What the browser check reads of a page: cells, their code, their outputs; a warning shows nothing."
    cells = docsite.page_cells(PAGE)
    assert [c["kind"] for c in cells] == ["markdown", "code", "code", "code", "code"]
    assert [c["shows"] for c in cells] == [False, False, True, False, False]
    assert "def shown(x)" in cells[1]["text"]
    # `quiet` shares the cell `shown(1)` follows; `Warned` is followed by a warning only; `absent` is nowhere
    assert docsite.undemonstrated(PAGE, ["shown", "quiet", "Warned", "absent"]) == [
        "Warned",
        "absent",
    ]
    assert docsite.introduction_words(PAGE) == 9


def test_exported_names_are_read_from_the_notebook(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("#| export\ndef f(): pass\n\ndef _g(): pass\n\nclass C: pass"),
        nbformat.v4.new_code_cell("def demo(): pass"),
    ])  # fmt: skip
    nbformat.write(nb, tmp_path / "x.ipynb")
    assert docsite.exported_names(tmp_path / "x.ipynb") == ["f", "C"]


# the introduction a chapter's first page opens with: more than a title and its one-line summary
INTRODUCTION_WORDS = 60


@pytest.mark.skipif(
    docsite.browser() is None,
    reason="Chromium is not installed (Debian: apt-get install chromium); CI installs it",
)
def test_chapter_pages_in_headless_chromium():
    """Every chapter page of the site CI built, as the browser renders it: the chapter's first page opens
    with its introduction, and each name a page exports is followed by a demonstration that shows a value."""
    if not os.environ.get("SHOPDISTILL_DOCS_SITE"):
        pytest.skip(
            "needs the site of a run ($SHOPDISTILL_DOCS_SITE, after `make docs`); CI sets it"
        )
    site, problems = Path(os.environ["SHOPDISTILL_DOCS_SITE"]), []
    # a notebook that writes results (the committed record says which) keeps its code until the next
    # smoke reproduction regenerates them; its pages are checked for their introduction only
    record = json.loads((ROOT / "paper" / "generated" / "reproduction.json").read_text())
    results = {n for n, e in record["notebooks"].items() if not e.get("library")}
    assert 0 < len(results) < len(record["notebooks"]) / 4, sorted(results)
    with docsite.serve(site) as url:
        for folder, stems in docsite.expected_chapters(ROOT / "nbs").items():
            for i, stem in enumerate(stems):
                page = docsite.rendered_dom(f"{url}{folder}/{stem}/")
                names = docsite.exported_names(ROOT / "nbs" / folder / f"{stem}.ipynb")
                names = [] if f"{folder}/{stem}" in results else names
                problems += [
                    f"{folder}/{stem}: {n} has no demonstration"
                    for n in docsite.undemonstrated(page, names)
                ]
                if i == 0 and (w := docsite.introduction_words(page)) < INTRODUCTION_WORDS:
                    problems.append(
                        f"{folder}/{stem}: the chapter opens with {w} words of introduction"
                    )
    assert not problems, problems
