"""``[tool.metalint]`` in the nearest ``pyproject.toml``, merged with command-line options.

Keys (all optional)::

    [tool.metalint]
    select = ["ML"]                 # codes or prefixes; "ALL" includes opt-in rules
    extend-select = ["ML012"]
    ignore = ["ML009"]
    exclude = ["third_party", "*_pb2.py"]   # gitignore-style patterns, relative to this file
    extend-exclude = []
    hooks = ["rope_init"]           # methods called on every module after to_empty (check and probe)
    cache-dir = ".metalint_cache"
    file-time-budget = 5            # CPU seconds one file's analysis may take (then ML901)
    site-packages = [".venv/lib/python3.12/site-packages"]  # installed packages read as
                                    # source (default: $VIRTUAL_ENV's, else metalint's own
                                    # interpreter's; [] reads none)
    protocol = "auto"               # or "transformers", "init_weights", "init_weights-only",
                                    # "reset_parameters", or the root method that
                                    # materialises your models

    [tool.metalint.per-file-ignores]
    "tests/*" = ["ML008"]

    [tool.metalint.probe]
    factories = ["mypkg.models:tiny_model"]  # what a bare `metalint probe` builds
    # or a table: the model class each factory builds, so that `check --probe` builds a
    # model root (or a class) through it instead of guessing its arguments
    factories = {"mypkg.models.Transformer" = "mypkg.models:tiny_model"}
    # --shard (probe and load): what FSDP2 fully_shards before the root (module-name globs,
    # matched per dotted segment, or class names; a ModuleList/ModuleDict stands for its
    # children), and the tensor-parallel plan (module-name glob -> "colwise" | "rowwise");
    # either replaces the built-in plan (see metalint.loader.distributed.shard_model)
    fsdp-modules = ["layers.*", "tok_embeddings"]
    tp-plan = {"layers.*.attention.wq" = "colwise", "layers.*.attention.wo" = "rowwise"}
    # intended differences from eager init (module:Class.tensor or file.py:Class.tensor):
    # `probe` reports them as declared, not as failures, and warns about one that matched
    # nothing in a class it built
    expected-differences = ["mypkg.models:Attention.rope_cache"]
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metalint.files import MAX_TEXT_BYTES, NotRegularFile, TooLarge, read_regular
from metalint.globs import PatternError, check_brackets, compile_pattern
from metalint.vocabulary import DEFAULT_HOOKS, PROTOCOLS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


#: CPU seconds: the slowest of the 40 largest files of transformers 5.23 and timm 1.0.31 takes
#: 0.74 s (modeling_edgetam_video.py, 148 KB)
DEFAULT_FILE_TIME_BUDGET = 5.0


class ConfigError(Exception):
    """A configuration or usage problem: reported in one line, exit code 2."""


KNOWN_KEYS = {
    "select",
    "extend-select",
    "ignore",
    "exclude",
    "extend-exclude",
    "per-file-ignores",
    "hooks",
    "cache-dir",
    "file-time-budget",
    "probe",
    "protocol",
    "site-packages",
}


@dataclass
class Settings:
    root: Path  # the folder of the pyproject.toml (or the working directory)
    config_file: Path | None = None
    select: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    hooks: tuple[str, ...] = DEFAULT_HOOKS
    cache_dir: Path | None = None
    probe: dict[str, Any] = field(default_factory=dict)
    #: CPU seconds one file's analysis may take; past it the file is ML901, the run goes on
    file_time_budget: float = DEFAULT_FILE_TIME_BUDGET
    #: how the repo materialises its models (see :mod:`metalint.static.protocol`)
    protocol: str = "auto"
    #: model class (``pkg.mod.Class``) -> the probe target that builds it (``[tool.metalint.probe]
    #: factories`` as a table): ``check --probe`` builds that class through it
    factories: dict[str, str] = field(default_factory=dict)
    #: ``[tool.metalint.probe] fsdp-modules``: what ``--shard fsdp`` shards before the root
    fsdp_modules: tuple[str, ...] = ()
    #: ``[tool.metalint.probe] tp-plan``: module-name glob -> ``colwise`` | ``rowwise``
    tp_plan: dict[str, str] = field(default_factory=dict)
    #: ``[tool.metalint.probe] expected-differences``: ``module:Class.tensor`` (a file one made
    #: absolute) whose difference from eager init the probe reports as declared
    expected_differences: tuple[str, ...] = ()
    #: ``site-packages``: the folders of the environment whose installed packages ``check``
    #: reads (absolute; empty: none); None: ``$VIRTUAL_ENV``'s, else the interpreter's (see
    #: :mod:`metalint.sitepackages`)
    site_packages: tuple[str, ...] | None = None

    def enabled(self, codes: list[str], defaults: set[str]) -> set[str]:
        """Which of ``codes`` are enabled: select (or the defaults), + extend-select, - ignore."""
        if self.select:
            chosen = {c for c in codes if _matches(c, self.select, defaults)}
        else:
            chosen = set(defaults)
        chosen |= {c for c in codes if _matches(c, self.extend_select, defaults)}
        chosen -= {c for c in codes if _matches(c, self.ignore, set(codes))}
        return chosen


def _matches(code: str, selectors: list[str], defaults: set[str]) -> bool:
    for sel in selectors:
        if sel == "ALL":
            return True
        if code.startswith(sel) and (code == sel or len(sel) >= 2):
            # a prefix such as "ML" selects only rules that are on by default;
            # opt-in rules need their full code (or ALL)
            if code == sel or code in defaults:
                return True
    return False


def find_config(start: Path) -> Path | None:
    start = start.resolve()
    for folder in (
        [start, *start.parents] if start.is_dir() else [start.parent, *start.parent.parents]
    ):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                data = tomllib.loads(read_regular(candidate, MAX_TEXT_BYTES).decode("utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                continue
            tool = data.get("tool", {})
            if isinstance(tool, dict) and "metalint" in tool:
                return candidate
    return None


def _read_config(path: Path) -> tuple[str, dict]:
    """The text of a configuration file and its TOML: a regular file only, of at most
    ``MAX_TEXT_BYTES`` (a FIFO would block, ``/dev/zero`` never ends)."""
    try:
        text = read_regular(path, MAX_TEXT_BYTES).decode("utf-8")
        return text, tomllib.loads(text)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except NotRegularFile as exc:
        raise ConfigError(f"{path}: cannot read config: {exc}") from None
    except TooLarge as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.limit} bytes at most") from None
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise ConfigError(f"{path}: cannot read config: {why}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None


def _line_of(text: str, value: str) -> str:
    """``:ROW`` of the first line of ``text`` that holds ``value`` as a TOML string ('' when
    none does)."""
    quoted = (json.dumps(value), f"'{value}'", f'"{value}"')
    for row, line in enumerate(text.split("\n"), 1):
        if any(q in line for q in quoted):
            return f":{row}"
    return ""


def _patterns(values: list[str], key: str, path: Path, text: str) -> list[str]:
    """``exclude`` patterns, each one git can read (see :mod:`metalint.globs`)."""
    for value in values:
        try:
            compile_pattern(value)
        except PatternError as exc:
            where = f"{path}{_line_of(text, value)}"
            raise ConfigError(f"{where}: [tool.metalint] {key} pattern {value!r}: {exc}") from None
    return values


def _str_list(value: Any, key: str, path: Path) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{path}: [tool.metalint] {key} must be a list of strings")
    return list(value)


def load_settings(start: Path | None = None, config: Path | None = None) -> Settings:
    start = start or Path.cwd()
    path = config or find_config(start)
    if path is None:
        root = start.resolve() if start.is_dir() else start.resolve().parent
        return Settings(root=root)
    text, data = _read_config(Path(path))
    tool = data.get("tool", {})
    table = tool.get("metalint", {}) if isinstance(tool, dict) else None
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.metalint] must be a table")
    unknown = sorted(set(table) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(
            f"{path}: unknown key{'s' if len(unknown) > 1 else ''} in [tool.metalint]: "
            f"{', '.join(unknown)} (known: {', '.join(sorted(KNOWN_KEYS))})"
        )
    path = Path(path).resolve()
    s = Settings(root=path.parent, config_file=path)
    s.select = _str_list(table.get("select", []), "select", path)
    s.extend_select = _str_list(table.get("extend-select", []), "extend-select", path)
    s.ignore = _str_list(table.get("ignore", []), "ignore", path)
    s.exclude = [
        *_patterns(_str_list(table.get("exclude", []), "exclude", path), "exclude", path, text),
        *_patterns(
            _str_list(table.get("extend-exclude", []), "extend-exclude", path),
            "extend-exclude",
            path,
            text,
        ),
    ]
    s.per_file_ignores = _per_file_ignores(table.get("per-file-ignores", {}), path, text)
    hooks = _str_list(table.get("hooks", []), "hooks", path)
    if not all(h.isidentifier() for h in hooks):
        bad = next(h for h in hooks if not h.isidentifier())
        raise ConfigError(f"{path}: [tool.metalint] hooks are method names, not {bad!r}")
    s.hooks = tuple(dict.fromkeys([*DEFAULT_HOOKS, *hooks]))
    if "cache-dir" in table:
        s.cache_dir = _folder(table["cache-dir"], "cache-dir", path)
    if "file-time-budget" in table:
        s.file_time_budget = time_budget(table["file-time-budget"], f"{path}: file-time-budget")
    _read_probe(table.get("probe", {}), s, path)
    if "site-packages" in table:
        value = table["site-packages"]
        folders = value if isinstance(value, list) else [value]
        s.site_packages = tuple(str(_folder(f, "site-packages", path)) for f in folders)
    protocol = table.get("protocol", "auto")
    if not isinstance(protocol, str) or not (protocol in PROTOCOLS or protocol.isidentifier()):
        raise ConfigError(
            f"{path}: [tool.metalint] protocol must be one of {', '.join(PROTOCOLS)} "
            f"or the name of the root method that materialises your models, got {protocol!r}"
        )
    s.protocol = protocol
    if protocol not in PROTOCOLS:
        # the repo's own entry point: what it re-creates counts as re-created, as a hook's
        s.hooks = tuple(dict.fromkeys([*s.hooks, protocol]))
    return s


def _folder(value: Any, key: str, path: Path) -> Path:
    """A folder named in the configuration, made absolute from the config's folder."""
    if not isinstance(value, str) or not value or "\0" in value:
        raise ConfigError(
            f"{path}: [tool.metalint] {key} must be a folder name (a string), not {value!r}"
        )
    return (path.parent / value).resolve()


#: the keys of ``[tool.metalint.probe]``
PROBE_KEYS = frozenset({"factories", "fsdp-modules", "tp-plan", "expected-differences"})


def _read_probe(probe: Any, s: Settings, path: Path) -> None:
    """``[tool.metalint.probe]`` into ``s``."""
    if not isinstance(probe, dict):
        raise ConfigError(f"{path}: [tool.metalint.probe] must be a table")
    unknown = set(probe) - PROBE_KEYS
    if unknown:
        raise ConfigError(
            f"{path}: unknown key in [tool.metalint.probe]: {', '.join(sorted(unknown))} "
            f"(known: {', '.join(sorted(PROBE_KEYS))})"
        )
    s.probe = dict(probe)
    if "factories" in probe:
        s.factories = _factories(probe["factories"], path)
        s.probe["factories"] = (
            list(s.factories.values())
            if isinstance(probe["factories"], dict)
            else [_target(v, path) for v in _str_list(probe["factories"], "probe.factories", path)]
        )
    if "fsdp-modules" in probe:
        s.fsdp_modules = tuple(_str_list(probe["fsdp-modules"], "probe.fsdp-modules", path))
    if "tp-plan" in probe:
        s.tp_plan = _tp_plan(probe["tp-plan"], path)
    if "expected-differences" in probe:
        s.expected_differences = _expected(probe["expected-differences"], path)


def _expected(value: Any, path: Path) -> tuple[str, ...]:
    """``[tool.metalint.probe] expected-differences``: ``module:Class.tensor`` strings."""
    out = []
    for spec in _str_list(value, "probe.expected-differences", path):
        where, _, name = spec.rpartition(":")
        owner, _, tensor = name.rpartition(".")
        if not (where and owner and all(p.isidentifier() for p in [*owner.split("."), tensor])):
            raise ConfigError(
                f"{path}: [tool.metalint.probe] expected-differences: {spec!r} must look like "
                "'pkg.mod:Class.tensor' or 'path/to/file.py:Class.tensor'"
            )
        out.append(_target(spec, path))
    return tuple(out)


def _per_file_ignores(value: Any, path: Path, text: str) -> dict[str, list[str]]:
    """``per-file-ignores``: fnmatch patterns (matched in linear time) -> codes."""
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: [tool.metalint] per-file-ignores must be a table")
    out = {}
    for pattern, codes in value.items():
        try:
            check_brackets(pattern)
        except PatternError as exc:
            where = f"{path}{_line_of(text, pattern)}"
            raise ConfigError(
                f"{where}: [tool.metalint] per-file-ignores pattern {pattern!r}: {exc}"
            ) from None
        out[pattern] = _str_list(codes, f"per-file-ignores.{pattern}", path)
    return out


def _factories(value: Any, path: Path) -> dict[str, str]:
    """``[tool.metalint.probe] factories`` as a table: class full name -> probe target (a
    list names no class: {})."""
    if not isinstance(value, dict):
        return {}
    out = {}
    for cls, target in value.items():
        if (
            not isinstance(target, str)
            or ":" not in target
            or not all(p.isidentifier() for p in cls.split("."))
        ):
            raise ConfigError(
                f"{path}: [tool.metalint.probe] factories: {cls!r} must map a class "
                f'(pkg.mod.Class) to a factory ("pkg.mod:function"), got {target!r}'
            )
        out[cls] = _target(target, path)
    return out


#: the tensor-parallel styles ``[tool.metalint.probe] tp-plan`` names
TP_STYLES = ("colwise", "rowwise")


def _tp_plan(value: Any, path: Path) -> dict[str, str]:
    """``[tool.metalint.probe] tp-plan``: a table of module-name glob -> a style of
    :data:`TP_STYLES`."""
    if not isinstance(value, dict) or not value:
        raise ConfigError(
            f"{path}: [tool.metalint.probe] tp-plan must be a table of module-name glob -> "
            f"{' | '.join(repr(s) for s in TP_STYLES)}"
        )
    for pattern, style in value.items():
        if style not in TP_STYLES:
            raise ConfigError(
                f"{path}: [tool.metalint.probe] tp-plan: {pattern!r} must be one of "
                f"{', '.join(TP_STYLES)}, got {style!r}"
            )
    return dict(value)


def _target(spec: str, path: Path) -> str:
    """A probe target of the config: a ``file.py:factory`` relative to the config's folder is
    made absolute (a dotted ``module:factory`` is imported as is)."""
    module, sep, attr = spec.rpartition(":")
    if sep and module.endswith(".py") and not Path(module).is_absolute():
        return f"{(path.parent / module).resolve()}:{attr}"
    return spec


def time_budget(value: Any, what: str) -> float:
    """A positive number of seconds, or a ConfigError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e6:
        raise ConfigError(f"{what} must be a positive number of seconds, not {value!r}")
    return float(value)


def validate_selectors(selectors: list[str], known: list[str], what: str) -> None:
    for sel in selectors:
        if sel == "ALL":
            continue
        if not any(code.startswith(sel) for code in known) or len(sel) < 2:
            raise ConfigError(f"{what}: unknown rule selector {sel!r}")


def project_root(settings: Settings, first: Path) -> Path | None:
    """The project a run judges its files in: the folder of the ``[tool.metalint]`` config,
    else the git work tree that holds the first path; None outside both (only the files named
    are read then)."""
    if settings.config_file is not None:
        return settings.root
    start = Path(os.path.abspath(first))
    folder = start if start.is_dir() else start.parent
    return next((f for f in (folder, *folder.parents) if (f / ".git").exists()), None)
