"""``metalint check --show-settings``: the settings a check of the given paths would use."""

from __future__ import annotations

import json

from metalint.config import Settings
from metalint.sitepackages import search_folders


def site_packages(settings: Settings) -> list[str]:
    """The folders whose installed packages ``check`` reads (see :mod:`metalint.sitepackages`)."""
    return search_folders(settings.site_packages)


def settings_text(settings: Settings, path: str, enabled: set[str]) -> str:
    """``key = value`` lines (values as JSON), after the file they were resolved for."""
    config = str(settings.config_file) if settings.config_file else None
    values = {
        "root": str(settings.root),
        "enabled": sorted(enabled),
        "select": settings.select,
        "extend-select": settings.extend_select,
        "ignore": settings.ignore,
        "exclude": settings.exclude,
        "per-file-ignores": settings.per_file_ignores,
        "hooks": list(settings.hooks),
        "protocol": settings.protocol,
        "cache-dir": str(settings.cache_dir or settings.root / ".metalint_cache"),
        "file-time-budget": settings.file_time_budget,
        "probe": settings.probe,
        "site-packages": site_packages(settings),
    }
    lines = [
        f"Resolved settings for: {json.dumps(path)}",
        f"Settings path: {json.dumps(config)}",
        "",
    ]
    lines += [f"{key} = {json.dumps(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"
