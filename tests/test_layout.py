"""The docs agree with the tree: the README's layout names what is there, and bench/README.md's table is h200.json's."""
import json
import re
import subprocess

import pytest

from conftest import ROOT


def layout_paths() -> list[str]:
    """The paths the README's "Layout" tree names: two spaces of indent per level, a folder ends with "/"."""
    section = re.search(r"^## Layout\n(.*?)(?=^## )", (ROOT / "README.md").read_text(), re.S | re.M)
    assert section, "README.md has no Layout section"
    tree = re.search(r"^```\n(.*?)^```", section.group(1), re.S | re.M)
    assert tree, "the Layout section has no tree"
    paths, parents = [], []
    for line in tree.group(1).splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        name = line.split()[0]
        parents = parents[:depth]
        assert len(parents) == depth, f"{name!r} is indented under no folder"
        paths.append("".join(parents) + name)
        if name.endswith("/"):
            parents.append(name)
    return paths


def test_every_path_in_the_readme_layout_exists():
    paths = layout_paths()
    assert len(paths) >= 10
    missing = [p for p in paths if not ((ROOT / p).is_dir() if p.endswith("/") else (ROOT / p).is_file())]
    assert not missing, f"README.md's layout names paths that do not exist: {missing}"


def test_the_readme_layout_names_every_package_and_the_five_places_a_newcomer_looks_for():
    paths = set(layout_paths())
    packages = {p.parent.relative_to(ROOT).as_posix() + "/" for p in (ROOT / "playground").rglob("__init__.py")}
    assert packages - paths == set(), "packages missing from README.md's layout"
    for place in ("kernels/", "playground/engine/compile.py", "playground/engine/run.py", "playground/jobs/queue.py",
                  "playground/ui/"):
        assert place in paths, place


def test_the_readme_layout_names_every_module_of_the_package():
    named = set(layout_paths())
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "playground").rglob("*.py")
               if not p.name.startswith("__") and "templates" not in p.parts}  # (a template is a user's file)
    assert modules - named == set(), "modules missing from README.md's layout"


def test_the_readme_layout_names_every_top_level_folder_of_the_tree():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    folders = {f.split("/")[0] + "/" for f in tracked.stdout.splitlines() if "/" in f and not f.startswith(".")}
    assert folders - set(layout_paths()) == set(), "top-level folders missing from README.md's layout"


def test_bench_readme_table_is_the_one_in_h200_json():
    rows = json.loads((ROOT / "bench" / "h200.json").read_text())
    want = [f"| {r['kernel']} | {r['dtype']} | {r['shape']} | {r['baseline']} | {r['ratio']:.3f} | "
            f"{r['target']:.2f} | {'yes' if r['met'] else 'no'} |" for r in rows]
    # the table of the section "Results on an NVIDIA H200" (other sections have tables of their own trials)
    text = (ROOT / "bench" / "README.md").read_text()
    section = text[text.index("## Results on an NVIDIA H200"):]
    section = section[:section.index("\n### ")]
    table = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| kernel |")]
    assert table == want
    met = sum(r["met"] for r in rows)
    assert f"{met} of {len(rows)}" in (ROOT / "bench" / "README.md").read_text()
