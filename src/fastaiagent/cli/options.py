"""The options several ``fastaiagent`` commands share, named once.

One idea, one flag: ``--project-id`` is ``project_id=`` in Python and in every
command (``--project`` is its older spelling, still accepted); ``--location``
is ``Memory(location=)``.
"""

from __future__ import annotations

LOCATION_HELP = "Fact store: sqlite, sqlite:///path, postgres://..., redis://..."
# The project partition: --project-id as in Python's project_id=; --project still works.
PROJECT_FLAGS = ("--project-id", "--project")
