"""Shared fixtures: every test gets its own local database path."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_local_db(tmp_path, monkeypatch):
    """Point the default SQLite location at a per-test file, and keep cwd clean."""
    monkeypatch.setenv("FASTAIAGENT_LOCAL_DB", str(tmp_path / "local.db"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    yield
