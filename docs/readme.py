"""README.md is generated from the index notebook, `nbs/index.ipynb`, as nbdev's `readme_nb` does (without Quarto).

`python docs/readme.py` writes README.md; `python docs/readme.py --check` exits 1 when README.md differs from what the
notebook gives (CI runs it). The site's home page is the same Markdown (`docs/docsite.py`).
"""

import argparse
import json
import re
import sys
from pathlib import Path

import nbformat
from shopdistill.core.run import GeneratedFolder, generated_dir
from shopdistill.reproduce.driver import strip_directives

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "nbs" / "index.ipynb"
README = ROOT / "README.md"
RECORD_MARK = "<!-- reproduction record -->"  # in the index notebook: replaced by what the committed results' record says
NOTICE = "<!-- generated from nbs/index.ipynb by docs/readme.py (make readme): edit the notebook, not this file -->\n"


def _outputs_text(cell) -> str:
    "A code cell's text outputs as a fenced block (streams and plain-text results; images and HTML are left to the site)."
    parts = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            parts.append(o["text"])
        elif "text/plain" in o.get("data", {}):
            parts.append(o["data"]["text/plain"])
    text = "".join(parts).rstrip("\n")
    return f"```\n{text}\n```" if text else ""


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def record_sentence(record: Path | None = None) -> str:
    "What the record of the committed results (`paper/generated/reproduction.json`) says: which run, how long, on which machine."
    record = Path(record) if record is not None else GeneratedFolder(generated_dir()).record
    if not record.is_file():
        return "No reproduction has recorded the committed results yet (`make reproduce` writes `paper/generated/reproduction.json`)."
    r = json.loads(record.read_text())
    m, secs = r["machine"], r["seconds"]
    chapters = ", ".join(f"{k}: {_minutes(v)}" for k, v in secs.items() if k != "total")
    exts = (
        ", ".join(e for e in m["vector_extensions"] if e.startswith(("avx", "amx")))
        or "none of AVX, AVX-512 or AMX"
    )
    dirty = " with uncommitted changes" if r["git"].get("dirty") else ""
    return (
        f"The committed `figures/` and `paper/generated/` come from a `{r['profile']}` reproduction of commit "
        f"`{r['git']['commit'][:10]}`{dirty}, whose notebooks ran for {_minutes(secs['total'])} in all ({chapters}) on "
        f"{m['cores']} cores of {m['cpu']} ({exts}; {m['memory_gib']} GiB), Python {r['python']}, torch {r['packages'].get('torch')}. "
        f"Its record, `paper/generated/reproduction.json`, holds each notebook's inputs and time, the effective settings, the versions "
        f"and the sha256 of every published file; `make check-results` says whether a reproduction of the current commit would change them."
    )


def index_markdown(index: Path = INDEX) -> str:
    "The index notebook as Markdown: its Markdown cells as written, code cells (directives and hidden cells left out) as fenced Python."
    nb = nbformat.read(index, as_version=4)
    blocks = []
    for c in nb.cells:
        if c.cell_type == "markdown":
            blocks.append(c.source.strip("\n"))
        elif c.cell_type == "code":
            if re.search(r"^#\|\s*hide\b", c.source, re.M):
                continue
            src = strip_directives(c.source)
            if src:
                blocks.append(f"```python\n{src}\n```")
            out = _outputs_text(c)
            if out:
                blocks.append(out)
    return ("\n\n".join(b for b in blocks if b) + "\n").replace(RECORD_MARK, record_sentence())


def readme_text(index: Path = INDEX) -> str:
    "README.md as generated: a notice that says where it comes from, then the index notebook's Markdown."
    return NOTICE + "\n" + index_markdown(index)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="README.md from nbs/index.ipynb")
    ap.add_argument(
        "--check", action="store_true", help="exit 1 if README.md is not what nbs/index.ipynb gives"
    )
    a = ap.parse_args(argv)
    want = readme_text()
    if a.check:
        have = README.read_text() if README.exists() else ""
        if have != want:
            print(
                "readme: README.md is out of date with nbs/index.ipynb: edit the notebook, run `make readme` and commit both",
                file=sys.stderr,
            )
            return 1
        print("readme: README.md is in sync with nbs/index.ipynb")
        return 0
    README.write_text(want)
    print(f"readme: wrote README.md from nbs/index.ipynb ({len(want.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
