"""`gridlane submit --code`: the bundle is the same bytes for the same tree, and .gitignore decides as git does."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from gridlane_cli import bundle, gitignore


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


PROJECT = {
    "train.py": "import helpers\n",
    "helpers/__init__.py": "VALUE = 1\n",
    "helpers/data.csv": "a,b\n",
    ".gitignore": "*.pyc\n__pycache__/\n/build\ndata/\n!keep.pyc\n*.log\n",
    "helpers/.gitignore": "*.csv\n",
    "x.pyc": "",
    "keep.pyc": "",
    "sub/build/out.txt": "not anchored at sub: travels\n",
    "build/out.txt": "ignored\n",
    "data/big.bin": "ignored\n",
    "sub/data/also.bin": "ignored at any level\n",
    "__pycache__/m.cpython-311.pyc": "",
    "run.log": "",
    "docs/a b/notes.md": "spaces travel\n",
}


def names(packed: bundle.Bundle) -> list[str]:
    with tarfile.open(fileobj=packed.file, mode="r:gz") as tar:
        return [m.name for m in tar.getmembers() if m.isfile()]


def test_the_same_tree_packs_to_the_same_bytes_whenever_and_wherever_it_is_packed(tmp_path):
    one = tree(tmp_path / "one", PROJECT)
    two = tree(tmp_path / "two", dict(reversed(PROJECT.items())))  # written in another order, at other times
    os.utime(two / "train.py", (1, 1))
    (two / "train.py").chmod(0o600)  # permissions beyond "executable or not" do not travel
    first, second = bundle.pack(one), bundle.pack(two)
    assert first.digest == second.digest
    assert first.file.read() == second.file.read()
    (two / "train.py").write_text("import helpers  # changed\n")
    assert bundle.pack(two).digest != first.digest


def test_gitignore_files_decide_what_travels_each_relative_to_its_folder(tmp_path):
    packed = bundle.pack(tree(tmp_path / "p", PROJECT))
    assert sorted(names(packed)) == [
        ".gitignore",
        "docs/a b/notes.md",
        "helpers/.gitignore",
        "helpers/__init__.py",
        "keep.pyc",
        "sub/build/out.txt",
        "train.py",
    ]


def test_a_link_out_of_the_directory_stays_behind_and_one_inside_travels(tmp_path, capsys):
    root = tree(tmp_path / "p", {"train.py": ""})
    (root / "inside").symlink_to("train.py")
    (root / "outside").symlink_to("/etc/passwd")
    (root / "up").symlink_to("../elsewhere")
    with tarfile.open(fileobj=bundle.pack(root).file, mode="r:gz") as tar:
        kept = {m.name: m.linkname for m in tar.getmembers()}
    assert kept == {"inside": "train.py", "train.py": ""}
    assert "outside links outside" in capsys.readouterr().err


# Each pattern against paths git itself ignores or keeps (checked against `git check-ignore` below).
CASES = [
    ("*.py[co]", ["a.pyc", "d/a.pyo", "a.py", "a.pyx"]),
    ("/top.txt", ["top.txt", "d/top.txt"]),
    ("d/*.txt", ["d/a.txt", "d/e/a.txt", "x/d/a.txt"]),
    ("**/logs", ["logs/a", "x/y/logs/a", "xlogs/a"]),
    ("a/**/z", ["a/z", "a/b/z", "a/b/c/z", "b/a/z"]),
    ("out/**", ["out/a", "out/b/c", "outx"]),
    ("[!a]*.md", ["a.md", "b.md", "d/c.md"]),
    ("?.txt", ["a.txt", "ab.txt"]),
    ("\\#hash", ["#hash", "hash"]),
    ("trail\\ ", ["trail ", "trail"]),
    ("foo[", ["foo[", "foo"]),
]


@pytest.mark.parametrize(("pattern", "paths"), CASES, ids=[c[0] for c in CASES])
def test_each_pattern_matches_what_git_check_ignore_says(tmp_path, pattern, paths):
    (tmp_path / ".gitignore").write_text(pattern + "\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for path in paths:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    done = subprocess.run(["git", "-C", str(tmp_path), "check-ignore", "--no-index", *paths],
                          capture_output=True, text=True)  # fmt: skip
    by_git = set(done.stdout.splitlines())
    rules = gitignore.parse(pattern + "\n")

    def ours(path: str) -> bool:  # a path is ignored when it, or a folder above it, is
        parts = path.split("/")
        return any(gitignore.ignored(rules, "/".join(parts[: i + 1]), i < len(parts) - 1) for i in range(len(parts)))

    assert {p for p in paths if ours(p)} == by_git
