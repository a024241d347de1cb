"""Every reference the project's text makes leads somewhere: the file paths (``dba3c/x/y.py``,
``tests/...py``, ``launch/...sh``, ``configs/...yaml``), the dotted module names
(``dba3c.x.y``, ``dba3c.x.y.NAME``, ``learning.rl.NAME``), the ``python -m X`` commands,
pytest node ids, Markdown links with their ``#anchor``, and sections cited by title
(``README, "Quickstart"``) of README.md, the Makefile, docs/, launch/, slurm/, configs/ and
the package's docstrings and comments. A dated entry under docs/log/ is history: its module
paths and commands are those of its day (docs/log/README.md says so), so there only its links
must resolve. The test lists every dangling reference at once, as ``file:line: ...``."""

from __future__ import annotations

import ast
import importlib.util
import os.path
import re
import subprocess
from functools import cache
from pathlib import Path

from tests.support import ROOT

SUBPACKAGES = ("analysis", "benchmarks", "distributed", "games", "launchers", "learning",
               "training")
TOP = ("dba3c/", "tests/", "launch/", "configs/", "slurm/", "docs/")
ELSEWHERE = {"dqn_zoo/atari_data.py", "ga3c/Config.py"}  # other projects' files the text cites
EXTENSIONS = ("py", "sh", "yaml", "md", "csv", "json", "png")

# a file named with its folders (from the root, the citing file's folder or inside the
# package: `training/chief.py`), or a bare Python or shell file name
PATH = re.compile(r"(?<![\w./${}-])((?:[\w.][\w.-]*/)*\w[\w-]*\.(?:py|sh|yaml|md))(?![\w/-])")
DOTTED = re.compile(rf"(?<![\w./-])((?:dba3c|{'|'.join(SUBPACKAGES)})\.[\w.]*\w)(?![\w/(-])")
PYTHON_M = re.compile(r"python[\d.]* -m ([\w.]+)|\"-m\", \"([\w.]+)\"")
LINK = re.compile(r"\]\(([^)\s]+)\)")
SECTION = re.compile(r"\b(README|[\w./-]+\.md)(?:'s)?,? \"([^\"]+)\"")  # docs/x.md, "Title"
NODE_ID = re.compile(r"((?:[\w.-]+/)*test_\w+\.py)?::(\w+)")  # tests/x.py::test_y, ::test_z
PLACEHOLDER = re.compile(r"(?<![a-z])[A-Z][A-Z_]*(?![a-z])")  # GAME, DIR: any name or folder


@cache
def repository_files() -> frozenset[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return frozenset(line for line in out.splitlines() if (ROOT / line).exists())


@cache
def repository_folders() -> frozenset[str]:
    return frozenset(str(p) for f in repository_files() for p in Path(f).parents)


def path_exists(target: str, source: str) -> bool:
    """Whether ``target``, as written in ``source``, names a file or folder of the repository;
    capital placeholders (``configs/paper/GAME_64.yaml``) stand for any name."""
    files = repository_files()
    if target in ELSEWHERE or ("/" not in target and not target.endswith((".py", ".sh"))):
        return True  # a bare `config.yaml` or `table.md` names what a run writes
    for candidate in (target, str(Path(source).parent / target)):
        name = os.path.normpath(candidate)
        if name in files or name in repository_folders():
            return True
        wildcard = re.compile(PLACEHOLDER.sub(r"[\\w./-]+", re.escape(name)))
        if any(wildcard.fullmatch(f) for f in files):
            return True
    # `training/chief.py` or `chief.py`: a Python or shell file somewhere in the tree
    return (not target.startswith(TOP) and target.endswith((".py", ".sh"))
            and any(("/" + f).endswith("/" + target) for f in files))


def module_file(name: str) -> str | None:
    """The file of module ``name`` (``dba3c.x.y``), if there is one."""
    stem = name.replace(".", "/")
    for path in (f"{stem}.py", f"{stem}/__init__.py"):
        if path in repository_files():
            return path
    return None


@cache
def top_level_names(path: str) -> frozenset[str]:
    """What ``path`` defines or imports at its top level (and the modules beside it, for a
    package's ``__init__``)."""
    names = set()
    for node in ast.parse((ROOT / path).read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    if path.endswith("__init__.py"):
        names |= {Path(f).stem if f.endswith(".py") else Path(f).name
                  for f in repository_files() | repository_folders()
                  if str(Path(f).parent) == str(Path(path).parent)}
    return frozenset(names)


def dotted_problem(name: str) -> str | None:
    """Why the dotted ``name`` (``dba3c.x.y[.NAME]``, ``x.y[.NAME]`` inside the package)
    leads nowhere, or None."""
    if name.rsplit(".", 1)[-1] in EXTENSIONS:
        return None  # a file name: `benchmarks.md`
    if not name.startswith("dba3c."):
        name = "dba3c." + name
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        if path := module_file(".".join(parts[:n])):
            rest = parts[n:]
            if rest and rest[0] not in top_level_names(path):
                return f"{'.'.join(parts[:n])} has no {rest[0]}"
            return None
    return "no such module"  # pragma: no cover: `dba3c` itself always is one


def python_m_problem(module: str) -> str | None:
    """Why ``python -m module`` would not run, or None."""
    if module.split(".")[0] != "dba3c":
        return None if importlib.util.find_spec(module.split(".")[0]) else "not installed"
    path = module_file(module)
    if path is None:
        return "no such module"
    if path.endswith("__init__.py"):
        return None if path.replace("__init__", "__main__") in repository_files() else (
            "a package without __main__.py")
    text = (ROOT / path).read_text()
    return None if re.search(r"__name__ == .__main__.", text) else "runs nothing under -m"


def slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def anchors(path: str) -> frozenset[str]:
    found: set[str] = set()
    fenced = False
    for line in (ROOT / path).read_text().splitlines():
        fenced ^= line.lstrip().startswith("```")
        if not fenced and (m := re.match(r"#+ (.*)", line)):
            base = anchor = slug(m.group(1))
            n = 0
            while anchor in found:  # a repeated heading gets -1, -2, ...
                n += 1
                anchor = f"{base}-{n}"
            found.add(anchor)
    return frozenset(found)


def link_problem(target: str, source: str) -> str | None:
    if re.match(r"[a-z]+:", target):
        return None  # a web address
    name, _, anchor = target.partition("#")
    path = os.path.normpath(str(Path(source).parent / name)) if name else source
    if path not in repository_files() and path not in repository_folders():
        return "no such file"
    if anchor and path.endswith(".md") and anchor not in anchors(path):
        return f"{path} has no heading #{anchor}"
    return None


def node_id_problems(line: str) -> list[str]:
    """The pytest node ids of ``line`` whose test does not exist; ``::test_z`` after
    ``tests/x.py::test_y`` is another test of ``tests/x.py``."""
    problems, test_file = [], None
    for path, name in NODE_ID.findall(line):
        test_file = path or test_file
        if test_file in repository_files() and name not in top_level_names(test_file):
            problems.append(f"{test_file}::{name} does not exist")
    return problems


@cache
def titles(path: str) -> frozenset[str]:
    """What a citation may name in ``path``: its headings, and the first cells of its tables'
    rows (docs/decisions.md's rows), as slugs."""
    rows = re.findall(r"(?m)^\| ([^|]+?) \|", (ROOT / path).read_text())
    return anchors(path) | {slug(row) for row in rows}


def section_problem(page: str, title: str, source: str) -> str | None:
    """Why the section ``title`` of ``page`` (``README, "Which MPI"``), cited in ``source``,
    is not there, or None. A title may be the first words of a heading."""
    page = "README.md" if page == "README" else page
    for path in (page, os.path.normpath(str(Path(source).parent / page))):
        if path in repository_files():
            cited = slug(title)
            found = any(t == cited or t.startswith(cited + "-") for t in titles(path))
            return None if found else f"{path} has no such section"
    return "no such file"


def is_history(path: str) -> bool:
    return path.startswith("docs/log/") and path != "docs/log/README.md"


def dangling_in(path: str) -> list[str]:
    """Every reference of ``path`` that leads nowhere, as ``path:line: ...``."""
    found = []
    for number, line in enumerate((ROOT / path).read_text().splitlines(), 1):
        where = f"{path}:{number}:"
        links = LINK.findall(line) if path.endswith(".md") else []
        found += [f"{where} link {t}: {why}" for t in links if (why := link_problem(t, path))]
        if is_history(path):
            continue
        found += [f"{where} {t} does not exist" for t in PATH.findall(line)
                  if t not in links and not path_exists(t, path)]  # a link: said once
        found += [f"{where} {problem}" for problem in node_id_problems(line)]
        found += [f'{where} {page}, "{title}": {why}' for page, title in SECTION.findall(line)
                  if (why := section_problem(page, title, path))]
        found += [f"{where} {t}: {why}" for t in DOTTED.findall(line)
                  if (why := dotted_problem(t))]
        found += [f"{where} python -m {m}: {why}" for pair in PYTHON_M.findall(line)
                  for m in pair if m and (why := python_m_problem(m))]
    return found


def scanned() -> list[str]:
    """The files whose references are checked: the docs, the recipes, the presets and the
    package (each by its own kind of file)."""
    kinds = {"docs": (".md",), "launch": (".md", ".sh"), "slurm": (".sh",),
             "configs": (".yaml",), "dba3c": (".py",)}
    return sorted(f for f in repository_files() if f in ("README.md", "Makefile")
                  or f.endswith(kinds.get(f.split("/")[0], ("no file",))))


def test_paths_resolve_from_the_root_the_citing_folder_or_the_package():
    assert path_exists("dba3c/learning/rl.py", "README.md")
    assert path_exists("training/chief.py", "docs/architecture.md")
    assert path_exists("configs/paper/GAME_64.yaml", "README.md")
    assert path_exists("../benchmarks.md", "docs/log/README.md")
    assert not path_exists("dba3c/learning/nowhere.py", "README.md")
    assert not path_exists("tests/unit/test_nowhere.py", "README.md")
    assert not path_exists("training/nowhere.py", "docs/architecture.md")


def test_a_dotted_name_needs_its_module_and_the_name_in_it():
    assert dotted_problem("dba3c.training.rundir.OPERATIONAL_KEYS") is None
    assert dotted_problem("games.scores.MAX_SCORE") is None
    assert dotted_problem("dba3c.learning.rl.nowhere") == "dba3c.learning.rl has no nowhere"
    assert dotted_problem("dba3c.launchers.nowhere") == "dba3c.launchers has no nowhere"


def test_a_cited_section_needs_its_heading():
    assert section_problem("README", "Quickstart", "Makefile") is None
    assert section_problem("architecture.md", "What can go wrong", "docs/results.md") is None
    assert section_problem("decisions.md", "oneDNN kernels", "docs/results.md") is None
    assert section_problem("README", "Quick", "Makefile") == "README.md has no such section"
    assert section_problem("docs/nowhere.md", "Quickstart", "README.md") == "no such file"
    assert SECTION.findall("""(README's "Which MPI"; docs/x.md, "A b")""") == [
        ("README", "Which MPI"), ("docs/x.md", "A b")]


def test_a_node_id_needs_its_test():
    line = ("`tests/unit/learning/test_rl.py::test_nowhere`, `::test_nowhere_else`; "
            "`tests/system/test_references.py::test_a_node_id_needs_its_test`")
    assert node_id_problems(line) == [
        "tests/unit/learning/test_rl.py::test_nowhere does not exist",
        "tests/unit/learning/test_rl.py::test_nowhere_else does not exist"]


def test_python_m_needs_a_module_that_runs_as_a_script():
    assert python_m_problem("dba3c") is None  # a package with __main__.py
    assert python_m_problem("pytest") is None
    assert python_m_problem("dba3c.learning.rl") == "runs nothing under -m"
    assert python_m_problem("dba3c.launchers.nowhere") == "no such module"


def test_a_link_needs_its_file_and_its_heading():
    assert slug("Tuning a node: `dba3c tune`") == "tuning-a-node-dba3c-tune"
    assert slug("Reproducing the paper's Table 3") == "reproducing-the-papers-table-3"
    assert link_problem("docs/results.md#current-figures", "README.md") is None
    assert link_problem("docs/results.md#nowhere", "README.md") == (
        "docs/results.md has no heading #nowhere")
    assert link_problem("../nowhere.md", "docs/decisions.md") == "no such file"


def test_every_reference_leads_somewhere():
    dangling = [problem for path in scanned() for problem in dangling_in(path)]
    assert not dangling, "references that lead nowhere:\n" + "\n".join(dangling)
