"""Where the local files live by default (the fact database and, beside it, traces).

A low module, so the trace store (a lower layer) and the fact store share it.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_DIR = ".fastaiagent"
DEFAULT_FILE = "local.db"
ENV_PATH = "FASTAIAGENT_LOCAL_DB"


def default_db_path() -> Path:
    """``$FASTAIAGENT_LOCAL_DB`` or ``./.fastaiagent/local.db``, made absolute now."""
    env = os.environ.get(ENV_PATH)
    return Path(env).expanduser().resolve() if env else (Path.cwd() / DEFAULT_DIR / DEFAULT_FILE)
