"""One lookup of the user's config and data dirs (engine/paths.py), used by the holdout
salt, the command agents' config, the TUI's keymap and the archive."""

from __future__ import annotations

from kdatui.engine import archive, paths, probes
from kdatui.engine.agents import command


def test_config_dir_follows_kdatui_config_dir_then_xdg_config_home(monkeypatch, tmp_path):
    monkeypatch.setenv("KDATUI_CONFIG_DIR", str(tmp_path / "mine"))
    assert paths.config_dir() == tmp_path / "mine"
    monkeypatch.delenv("KDATUI_CONFIG_DIR")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert paths.config_dir() == tmp_path / "xdg" / "kdatui"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert paths.config_dir() == tmp_path / "home" / ".config" / "kdatui"


def test_data_dir_and_archive_follow_xdg_data_home_and_kdatui_archive_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("KDATUI_ARCHIVE_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert paths.data_dir() == tmp_path / "data" / "kdatui"
    assert paths.archive_root() == tmp_path / "data" / "kdatui" / "archive"
    monkeypatch.setenv("KDATUI_ARCHIVE_DIR", str(tmp_path / "arch"))
    assert paths.archive_root() == tmp_path / "arch"


def test_every_user_of_the_config_dir_asks_the_one_lookup(monkeypatch, tmp_path):
    from kdatui.tui import app

    monkeypatch.setenv("KDATUI_CONFIG_DIR", str(tmp_path))
    assert probes.config_dir is paths.config_dir and app.config_dir is paths.config_dir
    assert command.user_config_path() == tmp_path / "config.toml"
    assert archive.archive_root is paths.archive_root
