"""The options several ``fastaiagent`` commands share, named once.

One idea, one flag: ``--project-id`` is ``project_id=`` in Python and in every
command (``--project`` is its older spelling, still accepted); ``--location``
is ``Memory(location=)``.
"""

from __future__ import annotations

from fastaiagent._validate import identifier

LOCATION_HELP = "Fact store: sqlite, sqlite:///path, postgres://..., redis://..."
# The project partition: --project-id as in Python's project_id=; --project still works.
PROJECT_FLAGS = ("--project-id", "--project")


def checked_project(project: str | None) -> str | None:
    """``--project-id`` checked by the one id rule ("" is the default partition;
    None: every project, where a command allows it)."""
    return None if project is None else identifier("--project-id", project, allow_empty=True)
