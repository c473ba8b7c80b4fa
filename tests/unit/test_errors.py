"""One way to fail: every error the library raises on purpose derives from FastAIAgentError."""

from __future__ import annotations

import ast
import builtins
import inspect
from pathlib import Path

import pytest

import fastaiagent
from fastaiagent import errors
from fastaiagent.llm import errors as llm_errors

SRC = Path(fastaiagent.__file__).parent
# Raised on purpose with a built-in class, each for a reason the protocol imposes.
ALLOWED = {
    ("AttributeError", "__getattr__"),  # module __getattr__ must raise AttributeError
    ("NotImplementedError", "store"),  # the conformance suite's fixture to override
    ("AssertionError", "_acollect"),  # an internal invariant, not a user error
    ("SystemExit", "demo"),  # the CLI's exit code
    ("SystemExit", "register"),
}


def _builtin_raises() -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                    continue
                name = getattr(node.exc.func, "id", None)
                builtin = getattr(builtins, name or "", None)
                if not (inspect.isclass(builtin) and issubclass(builtin, BaseException)):
                    continue
                if (name, func.name) not in ALLOWED:
                    found.append(f"{path.relative_to(SRC)}:{node.lineno} raise {name} in {func.name}")
    return found


def test_no_user_facing_error_is_a_bare_builtin():
    assert _builtin_raises() == []


@pytest.mark.parametrize(
    "cls",
    [c for m in (errors, llm_errors) for _, c in inspect.getmembers(m, inspect.isclass)
     if issubclass(c, Exception) and c.__module__ == m.__name__],
)
def test_every_error_class_derives_from_the_one_base(cls):
    assert issubclass(cls, errors.FastAIAgentError)


def test_errors_are_also_the_builtins_callers_expect():
    assert issubclass(errors.InvalidValueError, ValueError)
    assert issubclass(errors.InvalidTypeError, TypeError)
    assert issubclass(errors.StoreUnavailableError, ConnectionError)
    assert issubclass(errors.FactNotFoundError, KeyError)
    assert issubclass(errors.MissingFileError, FileNotFoundError)
    assert issubclass(errors.UnsupportedTierError, NotImplementedError)
    assert issubclass(errors.PolicyError, PermissionError)
    assert issubclass(errors.MissingExtraError, ImportError)
    assert fastaiagent.FastAIAgentError is errors.FastAIAgentError


def test_store_failures_are_classified():
    # A configuration the store refuses is not an outage: waiting does not fix it, so
    # nothing that runs on without memory through an outage catches it (issue #46).
    assert not issubclass(errors.StoreConfigError, errors.StoreUnavailableError)
    assert not issubclass(errors.StoreConfigError, ConnectionError)
    for config in (errors.StoreConfigError("x"), errors.SchemaVersionError("x"), errors.MissingExtraError("x")):
        assert errors.is_configuration_error(config)
    assert not errors.is_configuration_error(errors.StoreUnavailableError("x"))
    assert not errors.is_configuration_error(errors.StoreCorruptError("x"))
    # Damaged data is not an outage: waiting does not fix it.
    assert issubclass(errors.StoreCorruptError, RuntimeError)
    assert not issubclass(errors.StoreCorruptError, errors.StoreUnavailableError)
    for name in ("StoreConfigError", "StoreCorruptError", "StoreUnavailableError"):
        assert name in errors.__all__


def test_every_error_class_is_exported():
    defined = {name for name, c in inspect.getmembers(errors, inspect.isclass)
               if c.__module__ == errors.__name__}  # fmt: skip
    assert defined == {name for name in errors.__all__ if name[0].isupper()}


def _exception_classes_in_source() -> list[tuple[str, str]]:
    """(module path, class name) of every class in the package whose bases name an
    exception (a built-in one, or a name ending in Error / Exception / Gone)."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            names = [ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases]
            builtin = [getattr(builtins, n, None) for n in names]
            if any(inspect.isclass(b) and issubclass(b, BaseException) for b in builtin) or any(
                n.endswith(("Error", "Exception")) for n in names
            ):
                found.append((str(path.relative_to(SRC)), node.name))
    return found


def test_every_exception_class_anywhere_in_the_package_derives_from_the_base():
    # Not only errors.py: a face's own exception (the UI's ClientGone, the CLI's
    # OptionsError) is one of the library's too, so `except FastAIAgentError` sees it.
    import importlib

    classes = _exception_classes_in_source()
    assert ("ui/form_guard.py", "ClientGone") in classes
    for path, name in classes:
        module = "fastaiagent." + path[: -len(".py")].replace("/", ".").removesuffix(".__init__")
        try:
            cls = getattr(importlib.import_module(module), name)
        except ImportError:
            continue  # an optional extra this machine lacks
        assert issubclass(cls, errors.FastAIAgentError), f"{path}: {name} {cls.__mro__}"
