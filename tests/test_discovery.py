"""Which files ``metalint check`` finds: ``.gitignore`` files as git reads them, ``exclude``."""

from __future__ import annotations

from pathlib import Path

from metalint.files import Discovery


def tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def found(root: Path, *paths: str, exclude: list[str] | None = None) -> list[str]:
    d = Discovery(root, exclude or [])
    return [
        str(p.resolve().relative_to(root.resolve()))
        for p in d.files([root / p for p in paths] or [root])
    ]


def test_gitignore_at_every_level_and_folder_patterns(tmp_path):
    (tmp_path / ".git").mkdir()
    tree(
        tmp_path,
        {
            ".gitignore": "build/\n*_gen.py\n",
            "a.py": "",
            "x_gen.py": "",
            "build/b.py": "",
            "src/build.py": "",  # a folder pattern does not match a file of that name
            "src/.gitignore": "local.py\n/only_here.py\n",
            "src/local.py": "",
            "src/only_here.py": "",
            "src/deep/only_here.py": "",  # anchored to src/: kept
            "src/deep/local.py": "",
        },
    )
    assert found(tmp_path) == ["a.py", "src/build.py", "src/deep/only_here.py"]


def test_gitignore_above_a_named_folder_applies_up_to_the_git_top(tmp_path):
    tree(
        tmp_path,
        {
            ".gitignore": "*.py\n",  # above the repository: not read
            "repo/.git/HEAD": "",
            "repo/.gitignore": "pkg/skip.py\n",
            "repo/pkg/skip.py": "",
            "repo/pkg/keep.py": "",
        },
    )
    root = tmp_path / "repo"
    assert found(root, "pkg") == ["pkg/keep.py"]
    # named by a path that is not normalised
    assert found(root, "pkg/../pkg") == ["pkg/keep.py"]


def test_nested_repository_starts_afresh(tmp_path):
    (tmp_path / ".git").mkdir()
    tree(
        tmp_path,
        {
            ".gitignore": "gen.py\n",
            "gen.py": "",
            "vendor/.git": "gitdir: elsewhere\n",  # a submodule's .git is a file
            "vendor/gen.py": "",
            "vendor/.gitignore": "skip.py\n",
            "vendor/skip.py": "",
        },
    )
    assert found(tmp_path) == ["vendor/gen.py"]


def test_exclude_and_a_named_excluded_folder(tmp_path):
    (tmp_path / ".git").mkdir()
    tree(
        tmp_path,
        {
            ".gitignore": "third_party/gen/\n",
            "main.py": "",
            "third_party/lib.py": "",
            "third_party/tests/t.py": "",
            "third_party/gen/g.py": "",
        },
    )
    assert found(tmp_path, exclude=["third_party", "tests/"]) == ["main.py"]
    # naming an excluded folder checks it: exclude patterns then apply below it only, and
    # .gitignore files from it down (so a git-ignored folder that is named is checked too)
    assert found(tmp_path, "third_party", exclude=["third_party", "tests/"]) == [
        "third_party/gen/g.py",
        "third_party/lib.py",
    ]


def test_order_is_by_path_parts_and_each_file_once(tmp_path):
    tree(tmp_path, {"a/b.py": "", "a-b.py": "", "a.py": ""})
    assert found(tmp_path, ".", "a", "a.py") == ["a/b.py", "a-b.py", "a.py"]
