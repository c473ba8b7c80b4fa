"""The one place the package version is written (pyproject reads it from here)."""

__version__ = "1.80.0"
