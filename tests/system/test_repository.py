"""The repository's own rules, checked on its files: lint and types see every tracked Python
file, the package has no import circle, the tests keep their layout, docs/config.md's key
table is the schema's, README.md reads in one sitting, nothing cites a file outside the
repository, and no shell script under pipefail pipes into a quiet grep."""

import ast
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from dba3c.config import keys_markdown
from tests.support import ROOT


def tracked(*patterns: str) -> set[Path]:
    """The files git tracks (and untracked ones it does not ignore) matching ``patterns``."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                          *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return {ROOT / line for line in out.stdout.splitlines() if (ROOT / line).exists()}


def test_ruff_checks_every_tracked_python_file():
    # `make lint` runs `ruff check .`; --show-files lists what that checks
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--show-files", "."], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    checked = {Path(line.strip()) for line in out.splitlines() if line.strip()}
    missed = sorted(str(p.relative_to(ROOT)) for p in tracked("*.py") - checked)
    assert not missed, f"ruff does not check {missed}"


def test_mypy_checks_every_tracked_python_file():
    # mypy's own discovery of the `files` in setup.cfg, as `make lint` runs it
    from mypy.config_parser import parse_config_file
    from mypy.find_sources import create_source_list
    from mypy.options import Options

    options = Options()
    parse_config_file(options, lambda: None, str(ROOT / "setup.cfg"), sys.stdout, sys.stderr)
    assert options.files, "setup.cfg's [mypy] names the files to check"
    sources = create_source_list([str(ROOT / f) for f in options.files], options)
    checked = {Path(s.path).resolve() for s in sources if s.path}
    missed = sorted(str(p.relative_to(ROOT)) for p in tracked("*.py") - checked)
    assert not missed, f"mypy does not check {missed}"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, package: str) -> set[str]:
    """Every dba3c module ``path`` imports, at the top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {n for n in names if n == package or n.startswith(package + ".")}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` (module -> modules it imports), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_find_cycle_finds_a_circle_and_accepts_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_package_has_no_import_circle():
    modules = {module_name(p): p for p in (ROOT / "dba3c").rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        # "from dba3c.x import y" names module x, or x.y when y is a module itself
        targets = {t for t in imports_of(path, "dba3c") if t in modules}
        graph[name] = {t for t in targets if t != name and not name.startswith(t + ".")}
        graph[name] -= {"dba3c"}  # the package's __init__ only sets an environment variable
    assert not find_cycle(graph), f"import circle: {' -> '.join(find_cycle(graph))}"


def test_config_page_key_table_is_the_schema():
    page = (ROOT / "docs/config.md").read_text()
    table = re.search(r"<!-- config-keys:start -->\n(.*?)<!-- config-keys:end -->", page,
                      re.S)
    assert table, "docs/config.md marks its config key table"
    assert table.group(1) == keys_markdown(), (
        "docs/config.md's config key table differs from the schema: replace it with "
        "`dba3c keys`")


def test_readme_reads_in_one_sitting():
    # what it is, the two commands, status, quickstart, links; the rest is on the docs pages
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= 300, f"README.md has {lines} lines: move a section to a page under docs/"


@pytest.mark.parametrize("pattern", [r"DESIGN\.md", r"\b[Ii]ssues? #?\d+\b"])
def test_no_file_cites_what_is_outside_the_repository(pattern):
    # the project's docs state the facts they rely on; the tracker is not part of them
    files = tracked("*.py", "*.md", "*.sh", "*.yaml", "*.cfg", "*.toml", "Makefile")
    citing = sorted(str(p.relative_to(ROOT)) for p in files
                    if p.name != "test_repository.py" and re.search(pattern, p.read_text()))
    assert not citing, f"{pattern} in {citing}"


def test_no_shell_script_under_pipefail_pipes_into_a_quiet_grep():
    # `cmd | grep -q X` fails under pipefail whenever grep exits on the first match before
    # cmd has written the rest (cmd gets SIGPIPE): the test is then false though X is there
    quiet = re.compile(r"\|\s*grep\s+(-\w*q\w*|--quiet|--silent)\b")
    bad = sorted(f"{p.relative_to(ROOT)}:{n}" for p in tracked("*.sh")
                 if "pipefail" in p.read_text()
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if quiet.search(line))
    assert not bad, f"`| grep -q` under pipefail (use `| grep X >/dev/null`): {bad}"


def test_no_two_tests_share_a_name():
    where = defaultdict(list)
    for path in (ROOT / "tests").rglob("test_*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                where[node.name].append(str(path.relative_to(ROOT)))
    shared = {name: files for name, files in where.items() if len(files) > 1}
    assert not shared, shared


def test_every_launch_recipe_runs_real_commands_and_every_figure_has_one():
    from dba3c.benchmarks.commands import BENCHES
    from dba3c.cli import COMMANDS

    recipes = sorted((ROOT / "launch").rglob("*.sh"))  # the current ones and launch/log/
    assert recipes and not list((ROOT / "launch").rglob("*.py")), "launch/ holds shell recipes"
    text = {}
    for path in recipes:
        subprocess.run(["bash", "-n", str(path)], check=True)
        text[path.name] = path.read_text()
        # run from the repository root, however deep the recipe lies
        up = "/".join([".."] * (len(path.relative_to(ROOT).parts) - 1))
        assert f'cd "$(dirname "$0")/{up}"\n' in text[path.name], f"{path.name}: cd {up}"
        for command in re.findall(r"^\s*dba3c (\S+)", text[path.name], re.M):
            # `dba3c submit` goes to the submitit launcher before the parser
            assert command in {*COMMANDS, "submit"}, f"{path.name}: no `dba3c {command}`"
        for bench in re.findall(r"^\s*dba3c bench (\S+)", text[path.name], re.M):
            assert bench in BENCHES, f"{path.name}: no `dba3c bench {bench}`"
        for preset in re.findall(r"\bconfigs/[\w.-]+\.yaml", text[path.name]):
            assert (ROOT / preset).exists(), f"{path.name}: {preset} does not exist"
    for figure in sorted(p for p in (ROOT / "docs/figures").iterdir() if p.is_dir()):
        writes = f"docs/figures/{figure.name}"
        assert any(re.search(re.escape(writes) + r"\b", t) for t in text.values()), (
            f"no launch/ recipe writes {writes}")


def test_each_launch_readme_lists_the_recipes_beside_it():
    # launch/README.md the current recipes, launch/log/README.md the log's: a row each
    for folder in (ROOT / "launch", ROOT / "launch" / "log"):
        listed = re.findall(r"^\| \[`([\w.-]+\.sh)`\]\(\1\)", (folder / "README.md").read_text(),
                            re.M)
        assert sorted(listed) == sorted(p.name for p in folder.glob("*.sh")), folder


def test_no_test_file_imports_another():
    # shared helpers live in tests/support; a test module is imported by pytest alone
    importing = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) else
                     [alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [])
            hits = [n for n in names if n.split(".")[-1].startswith("test_")
                    or n.startswith(("tests.unit", "tests.system")) or n == "conftest"]
            if hits:
                importing[str(path.relative_to(ROOT))] = hits
    assert not importing, importing
