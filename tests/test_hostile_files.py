"""What a repository may hold, against ``check`` and ``fix``: special files and links (a FIFO,
``/dev/zero``, a link out of the tree), patterns that backtrack or do not compile, a hostile
``--config``, a file too large to analyse. Each case runs the CLI in a child process under a
4 GiB address-space limit and a timeout: none may hang, crash, print a traceback or write
outside its tree. The fuzz cases at the end draw such trees at random (seeded, short)."""

from __future__ import annotations

import hashlib
import os
import random
import re
import resource
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

LAYERSCALE = """\
import torch
from torch import nn


class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))
"""

#: the acceptance bounds: address space and wall time of one run
ADDRESS_SPACE = 4 * 2**30
TIMEOUT = 60


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def metalint(*args: str, cwd: Path, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """The CLI in a child process under the acceptance bounds."""
    return subprocess.run(
        [sys.executable, "-m", "metalint", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_limit,
        stdin=subprocess.DEVNULL,
    )


def clean(r: subprocess.CompletedProcess) -> None:
    """No traceback, an exit code metalint documents."""
    assert "Traceback" not in r.stderr + r.stdout, r.stderr[-3000:]
    assert r.returncode in (0, 1, 2), (r.returncode, r.stderr[-3000:])


def lines_with(out: str, code: str) -> list[str]:
    return [line for line in out.splitlines() if f": {code} " in line]


def digest_tree(folder: Path) -> dict[str, str]:
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# -- special files ------------------------------------------------------------------------------


def test_link_to_dev_zero_is_ml900_not_read(tmp_path):
    (tmp_path / "good.py").write_text(LAYERSCALE)
    os.symlink("/dev/zero", tmp_path / "zero.py")
    r = metalint("check", "--no-cache", ".", cwd=tmp_path)
    clean(r)
    assert r.returncode == 2
    (line,) = lines_with(r.stdout, "ML900")
    assert line.startswith("zero.py:1:1:") and "not a regular file" in line
    assert "character device" in line
    assert lines_with(r.stdout, "ML001")  # the other file is checked


@pytest.mark.parametrize("command", [("check",), ("fix", "--write")])
def test_fifo_is_ml900_and_never_opened(tmp_path, command):
    (tmp_path / "good.py").write_text(LAYERSCALE)
    os.mkfifo(tmp_path / "x.py")
    r = metalint(*command, "--no-cache", ".", cwd=tmp_path, timeout=30)
    clean(r)
    assert r.returncode == 2
    (line,) = lines_with(r.stdout, "ML900")
    assert line.startswith("x.py:1:1:") and "not a regular file (a named pipe)" in line


def test_read_regular_refuses_before_open_and_reads_limit_plus_one(tmp_path):
    from metalint.files import NotRegularFile, TooLarge, read_regular

    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(NotRegularFile):
        read_regular(tmp_path / "fifo", 10)  # would block forever if opened for reading
    with pytest.raises(NotRegularFile):
        read_regular("/dev/zero", 10)
    (tmp_path / "f").write_bytes(b"x" * 11)
    with pytest.raises(TooLarge):
        read_regular(tmp_path / "f", 10)
    assert read_regular(tmp_path / "f", 11) == b"x" * 11


def _run_with_peak(args: list[str], cwd: Path, timeout: float = 120) -> tuple[str, int]:
    """Run ``args`` in a child of a wrapper; its output and the peak RSS (MiB) of every
    process it started (``RUSAGE_CHILDREN``: the CLI and its workers)."""
    code = textwrap.dedent(
        """
        import resource, subprocess, sys
        r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
        print(r.stdout + r.stderr + f"\\nrc={r.returncode} peak={peak}")
        """
    )
    r = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    peak = int(re.search(r"peak=(\d+)", r.stdout).group(1))
    return r.stdout, peak


def test_file_over_the_size_limit_is_ml901_unread_with_bounded_memory(tmp_path):
    from metalint.files import MAX_SOURCE_BYTES

    row = "x = [" + ", ".join(["1"] * 300) + "]\n"
    big = tmp_path / "big.py"
    with open(big, "w") as f:
        for _ in range(MAX_SOURCE_BYTES // len(row) + 1):
            f.write(row)
    start = time.monotonic()
    out, peak = _run_with_peak(
        [sys.executable, "-m", "metalint", "check", "--no-cache", "big.py"], tmp_path
    )
    assert "big.py:1:1: ML901 file too complex to analyse (larger than 8 MiB)" in out, out
    assert "rc=2" in out and "Traceback" not in out
    assert peak < 300, f"peak RSS {peak} MiB"
    assert time.monotonic() - start < 30


def test_worker_memory_bound_turns_a_blow_up_into_ml901(tmp_path):
    """A file under the size limit whose analysis needs more memory than the worker's bound:
    ML901 'out of memory', the worker's peak RSS within the bound, nothing on stderr."""
    rows = ["import torch", "class M(torch.nn.Module):", "    def __init__(self):"]
    rows += [f"        self.w{i} = torch.nn.Parameter(torch.ones({i}) * {i})" for i in range(40000)]
    (tmp_path / "wide.py").write_text("\n".join(rows) + "\n")
    code = textwrap.dedent(
        """
        import resource, sys
        from metalint import jobs
        jobs.WORKER_MEMORY = 200 * 2**20
        jobs.preload()
        source = open("wide.py").read()
        [r] = jobs.analyze_isolated([(source, "wide.py", "wide", False, (), True)], 1, 60.0)
        for d in r.diagnostics:
            print(d.code, d.message)
        print("peak", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
        """
    )
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert "ML901 file too complex to analyse (out of memory)" in r.stdout, r.stdout + r.stderr
    peak = int(re.search(r"peak (\d+)", r.stdout).group(1))
    assert peak < 200 + 150, f"worker peak RSS {peak} MiB"
    assert "memory allocation" not in r.stderr and "Traceback" not in r.stderr


def test_worker_runs_under_rlimit_as(tmp_path, monkeypatch):
    import metalint.jobs as jobs

    def fake_analyze(job):
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        from metalint.static.results import error_result

        return error_result(job[1], f"limit {soft}")

    monkeypatch.setattr(jobs, "analyze_one", fake_analyze)
    [r] = jobs.analyze_isolated([("x = 1\n", "a.py", "a", False, (), True)], 1, 5.0)
    (soft,) = [int(d.message.split()[1]) for d in r.diagnostics]
    assert soft != resource.RLIM_INFINITY
    assert jobs.WORKER_MEMORY <= soft <= jobs._address_space() + jobs.WORKER_MEMORY + 2**28


# -- patterns ------------------------------------------------------------------------------------

#: ``a*a*...*b``: a regular expression made of it backtracks for hours on a long name of "a"s
BACKTRACKING = "*".join("a" * 30) + "*b"
LONG_NAME = "a" * 200 + ".py"


def test_backtracking_pattern_in_exclude_finishes(tmp_path):
    (tmp_path / "pyproject.toml").write_text(f'[tool.metalint]\nexclude = ["{BACKTRACKING}"]\n')
    (tmp_path / LONG_NAME).write_text(LAYERSCALE)
    start = time.monotonic()
    r = metalint("check", "--no-cache", ".", cwd=tmp_path, timeout=30)
    clean(r)
    assert time.monotonic() - start < 20
    assert lines_with(r.stdout, "ML001")  # not excluded: it does not end in b


def test_backtracking_pattern_in_gitignore_finishes(tmp_path):
    (tmp_path / ".gitignore").write_text(f"{BACKTRACKING}\n**/{BACKTRACKING}/**\n")
    sub = tmp_path / ("a" * 200)
    sub.mkdir()
    (sub / LONG_NAME).write_text(LAYERSCALE)
    start = time.monotonic()
    r = metalint("check", "--no-cache", ".", cwd=tmp_path, timeout=30)
    clean(r)
    assert time.monotonic() - start < 20
    assert lines_with(r.stdout, "ML001")


def test_backtracking_pattern_in_per_file_ignores_finishes(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.metalint.per-file-ignores]\n"{BACKTRACKING}" = ["ML001"]\n'
    )
    (tmp_path / LONG_NAME).write_text(LAYERSCALE)
    start = time.monotonic()
    r = metalint("check", "--no-cache", ".", cwd=tmp_path, timeout=30)
    clean(r)
    assert time.monotonic() - start < 20


@pytest.mark.parametrize(
    "key, value",
    [
        ("exclude", '["ok", "[z-a]"]'),
        ("extend-exclude", '["a\\\\"]'),  # a trailing backslash
    ],
)
def test_malformed_exclude_pattern_is_a_config_error_naming_the_line(tmp_path, key, value):
    (tmp_path / "pyproject.toml").write_text(f"[tool.metalint]\n\n{key} = {value}\n")
    (tmp_path / "a.py").write_text("x = 1\n")
    r = metalint("check", "--no-cache", ".", cwd=tmp_path)
    clean(r)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"metalint: error: {tmp_path / 'pyproject.toml'}:3: ")
    assert key in line


def test_malformed_per_file_ignores_pattern_is_a_config_error(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.metalint.per-file-ignores]\n"[z-a].py" = ["ML001"]\n'
    )
    (tmp_path / "a.py").write_text("x = 1\n")
    r = metalint("check", "--no-cache", ".", cwd=tmp_path)
    clean(r)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert "pyproject.toml:2:" in line and "bad character range z-a" in line


def test_malformed_gitignore_pattern_is_one_warning_and_skipped(tmp_path):
    """git reads such a line as matching nothing: the run goes on, the pattern is named."""
    (tmp_path / ".gitignore").write_text("skipped.py\n[z-a]\n")
    (tmp_path / "skipped.py").write_text(LAYERSCALE)
    (tmp_path / "kept.py").write_text(LAYERSCALE)
    r = metalint("check", "--no-cache", ".", cwd=tmp_path)
    clean(r)
    assert r.returncode == 1
    (warning,) = r.stderr.strip().splitlines()
    assert warning == (
        f"metalint: warning: {tmp_path / '.gitignore'}:2: pattern '[z-a]' skipped "
        "(bad character range z-a)"
    )
    assert [line.split(":")[0] for line in lines_with(r.stdout, "ML001")] == ["kept.py"]


def test_gitignore_that_is_not_a_regular_file_is_skipped(tmp_path):
    os.symlink("/dev/zero", tmp_path / ".gitignore")
    (tmp_path / "a.py").write_text(LAYERSCALE)
    r = metalint("check", "--no-cache", ".", cwd=tmp_path, timeout=30)
    clean(r)
    assert r.returncode == 1
    assert "not a regular file" in r.stderr


# -- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_config_must_be_a_regular_file(tmp_path, kind):
    (tmp_path / "a.py").write_text("x = 1\n")
    config = tmp_path / "cfg.toml"
    if kind == "fifo":
        os.mkfifo(config)
    else:
        os.symlink("/dev/zero", config)
    r = metalint("check", "--config", "cfg.toml", ".", cwd=tmp_path, timeout=30)
    clean(r)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("metalint: error: cfg.toml: cannot read config: not a regular file")


@pytest.mark.parametrize(
    "setting, words",
    [
        ("cache-dir = 12", "cache-dir must be a folder name"),
        ('cache-dir = "a\\u0000b"', "cache-dir must be a folder name"),
        ('hooks = ["a.b"]', "hooks are method names"),
        ('probe = {factory = "m:f"}', "unknown key in [tool.metalint.probe]: factory"),
    ],
)
def test_config_values_are_type_checked(tmp_path, setting, words):
    (tmp_path / "pyproject.toml").write_text(f"[tool.metalint]\n{setting}\n")
    (tmp_path / "a.py").write_text("x = 1\n")
    r = metalint("check", ".", cwd=tmp_path)
    clean(r)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("metalint: error: ") and words in line


# -- fix writes inside the tree only -------------------------------------------------------------


def test_fix_write_does_not_follow_a_link_out_of_the_tree(tmp_path):
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    (outside / "victim.py").write_text(LAYERSCALE)
    os.symlink("../outside/victim.py", tree / "link.py")
    (tree / "own.py").write_text(LAYERSCALE)
    r = metalint("fix", "--no-cache", "--write", ".", cwd=tree)
    clean(r)
    assert (outside / "victim.py").read_text() == LAYERSCALE
    assert (tree / "link.py").is_symlink()
    assert (tree / "own.py").read_text() != LAYERSCALE  # the file in the tree is fixed
    (line,) = [x for x in r.stdout.splitlines() if "outside the checked tree" in x]
    assert line.startswith("link.py:1:1: ML900 link.py is a link to ")


def test_write_atomic_refuses_a_file_swapped_for_a_link(tmp_path):
    from metalint.fix.write import ChangedOnDisk, digest, tree_of, write_atomic

    target = tmp_path / "outside.py"
    target.write_text("x = 1\n")
    tree = tmp_path / "tree"
    tree.mkdir()
    path = tree / "a.py"
    path.write_text("x = 1\n")
    # inside the tree the write goes through; a link to the outside is refused
    write_atomic(path, b"x = 2\n", digest(b"x = 1\n"), inside=tree_of([tree]))
    assert path.read_text() == "x = 2\n"
    path.unlink()
    os.symlink(target, path)
    with pytest.raises(Exception, match="outside the checked tree"):
        write_atomic(path, b"x = 3\n", digest(b"x = 1\n"), inside=tree_of([tree]))
    assert target.read_text() == "x = 1\n"
    # no tree given: the link is resolved once, the rename replaces a name, never a link's
    # target; a file that is no longer what was read is left alone
    with pytest.raises(ChangedOnDisk):
        write_atomic(path, b"x = 3\n", digest(b"x = 9\n"))
    assert target.read_text() == "x = 1\n"


# -- fuzz: special files, patterns and links drawn at random ------------------------------------

SEEDS = range(int(os.environ.get("METALINT_FUZZ_SEEDS", "3")))
PATTERN_ATOMS = ["a", "b", ".py", "*", "**", "?", "/", "!", "[ab]", "[!a]", "[z-a]", "[", "]",
                 "\\", "-", " ", "#", "a*a*a*a*a*a*a*a*a*a*a*a*b"]  # fmt: skip


def _pattern(rng: random.Random) -> str:
    return "".join(rng.choice(PATTERN_ATOMS) for _ in range(rng.randint(1, 6)))


def _special(rng: random.Random, folder: Path, name: str, outside: Path) -> None:
    kind = rng.choice(["fifo", "zero", "null", "socket", "dangling", "loop", "dir-link",
                       "outside-link", "outside-dir-link", "proc"])  # fmt: skip
    path = folder / name
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        try:
            s.bind(str(path))
        except OSError:  # a path too long for a socket
            os.mkfifo(path)
        finally:
            s.close()
    else:
        os.symlink(_LINKS[kind](path, outside), path)


#: what each kind of special file :func:`_special` makes links to
_LINKS = {
    "zero": lambda path, outside: "/dev/zero",
    "null": lambda path, outside: "/dev/null",
    "dangling": lambda path, outside: "missing.py",
    "loop": lambda path, outside: path.name,
    "dir-link": lambda path, outside: ".",
    "outside-link": lambda path, outside: outside / "victim.py",
    "outside-dir-link": lambda path, outside: outside,
    "proc": lambda path, outside: "/proc/self/status",
}


def _tree(rng: random.Random, root: Path) -> tuple[Path, Path]:
    tree, outside = root / "tree", root / "outside"
    tree.mkdir()
    outside.mkdir()
    (outside / "victim.py").write_text(LAYERSCALE)
    folders = [tree]
    for i in range(rng.randint(1, 3)):
        sub = rng.choice(folders) / rng.choice(["pkg", "a" * 120, f"d{i}", "[x]"])
        sub.mkdir(exist_ok=True)
        folders.append(sub)
    for i in range(rng.randint(2, 6)):
        folder = rng.choice(folders)
        name = rng.choice([f"m{i}.py", "a" * rng.randint(100, 240) + ".py", f"x{i}.py"])
        if (folder / name).exists() or (folder / name).is_symlink():
            continue
        if rng.random() < 0.5:
            (folder / name).write_text(LAYERSCALE)
        else:
            _special(rng, folder, name, outside)
    for folder in folders:
        if rng.random() < 0.6:
            lines = [_pattern(rng) for _ in range(rng.randint(1, 5))]
            (folder / ".gitignore").write_text("\n".join(lines) + "\n")
    return tree, outside


@pytest.mark.parametrize("seed", SEEDS)
def test_fuzz_special_files_patterns_and_links(tmp_path, seed):
    rng = random.Random(seed)
    tree, outside = _tree(rng, tmp_path)
    excludes = ", ".join(
        '"' + _pattern(rng).replace("\\", "\\\\").replace('"', "") + '"'
        for _ in range(rng.randint(0, 3))
    )
    (tree / "pyproject.toml").write_text(f"[tool.metalint]\nexclude = [{excludes}]\n")
    before = digest_tree(outside)
    for command in (("check",), ("fix", "--write")):
        start = time.monotonic()
        r = metalint(*command, "--no-cache", ".", cwd=tree)
        clean(r)
        assert time.monotonic() - start < TIMEOUT
        if r.returncode == 2 and not r.stdout:  # a pattern that cannot be read: one line
            (line,) = r.stderr.strip().splitlines()
            assert line.startswith("metalint: error: ") and "pyproject.toml:" in line
    assert digest_tree(outside) == before


def _reference(glob: str, s: str) -> bool:
    """Exponential, obviously right: a component glob against a string."""
    if not glob:
        return not s
    c = glob[0]
    if c == "*":
        return any(_reference(glob[1:], s[i:]) for i in range(len(s) + 1))
    if not s:
        return False
    if c == "?":
        return _reference(glob[1:], s[1:])
    if c == "[":
        end = glob.index("]", 2)
        members = glob[1:end]
        return s[0] in members and _reference(glob[end + 1 :], s[1:])
    return c == s[0] and _reference(glob[1:], s[1:])


@pytest.mark.parametrize("seed", SEEDS)
def test_fuzz_component_globs_match_the_reference(seed):
    from metalint import globs

    rng = random.Random(seed)
    for _ in range(3000):
        glob = "".join(
            rng.choice(["a", "b", "*", "?", "[ab]", "ab"]) for _ in range(rng.randint(1, 7))
        )
        s = "".join(rng.choice("abc") for _ in range(rng.randint(1, 8)))
        assert bool(globs.Glob(glob).match(s)) == _reference(glob, s), (glob, s)


@pytest.mark.parametrize("seed", SEEDS)
def test_fuzz_patterns_are_linear(seed):
    """Hostile patterns against long paths: each spec answers in well under a second."""
    from metalint import globs

    rng = random.Random(seed)
    paths = ["/".join("a" * 250 for _ in range(12)), "a" * 250 + "/" + "a" * 249 + "b"]
    for _ in range(40):
        stars = rng.randint(5, 60)
        body = "*".join(rng.choice(["a", "aa", "?", "[ab]"]) for _ in range(stars)) + "*b"
        pattern = rng.choice([body, f"**/{body}", f"{body}/**/{body}", f"{body}/", f"!{body}"])
        spec = globs.spec([pattern])
        start = time.perf_counter()
        for path in paths:
            spec.match_file(path)
            spec.match_file(path + "/")
        assert time.perf_counter() - start < 1.0, pattern
