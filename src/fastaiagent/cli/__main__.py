"""``python -m fastaiagent.cli``: the same as the ``fastaiagent`` command."""

from fastaiagent.cli import main

main()
