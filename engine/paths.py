"""Where kdatui keeps what belongs to the user rather than to a repo: the config dir
(config.toml, tui.toml, the holdout salt) and the data dir (the archive).

One lookup, through platformdirs (which honours XDG_CONFIG_HOME and XDG_DATA_HOME on
Linux); KDATUI_CONFIG_DIR and KDATUI_ARCHIVE_DIR override it. No torch, no Textual here:
the TUI, the CLI and the engine all import it cheaply.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP = "kdatui"
CONFIG_ENV = "KDATUI_CONFIG_DIR"
ARCHIVE_ENV = "KDATUI_ARCHIVE_DIR"


def config_dir() -> Path:
    """~/.config/kdatui (XDG_CONFIG_HOME honoured), or $KDATUI_CONFIG_DIR."""
    env = os.environ.get(CONFIG_ENV)
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_config_dir(APP, appauthor=False))


def data_dir() -> Path:
    """~/.local/share/kdatui (XDG_DATA_HOME honoured)."""
    return Path(platformdirs.user_data_dir(APP, appauthor=False))


def cache_dir() -> Path:
    """~/.cache/kdatui (XDG_CACHE_HOME honoured): what the judge keeps between runs (each
    candidate's compiled kernels, under the digest of its bytes); hidden from candidates."""
    return Path(platformdirs.user_cache_dir(APP, appauthor=False))


def archive_root() -> Path:
    """Where archived runs go: $KDATUI_ARCHIVE_DIR, else <data dir>/archive, outside any
    agent's working tree."""
    env = os.environ.get(ARCHIVE_ENV)
    if env:
        return Path(env).expanduser()
    return data_dir() / "archive"


__all__ = ["config_dir", "data_dir", "cache_dir", "archive_root", "CONFIG_ENV", "ARCHIVE_ENV"]
