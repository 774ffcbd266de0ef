"""One way to read and validate a TOML config file, for the broker, agent, mirror and loader.

Each component declares its keys per table, one :class:`Field` per key (a type
:class:`Check` and whether the key is required), reads its file with :func:`read` and
validates each table with :meth:`Validator.table`; its own rules that span keys call
:meth:`Validator.fail`. So all four behave alike:

- every error names the file and the key, in one format, ``<file>: <key>: <problem>``:
  ``etc/live/broker-1.toml: broker.port: must be a port number 0-65535, got 70000``
  (a config built from a dict has no file part);
- an unknown key stops the process with a suggestion when it looks like a typo:
  ``sources[0].multline: unknown key (did you mean 'multiline'?)``;
- keys are snake_case with the unit as suffix (``flush_ms``, ``window_s``, ``chunk_bytes``);
- a relative path is relative to the directory of the config file that holds it (the
  working directory for a config built from a dict), so a file means the same thing
  wherever the process is started: :meth:`Validator.path`;
- ``${VAR}`` and ``${VAR:-default}`` in string values come from the environment, after
  parsing (a value can never break the TOML syntax), ``$$`` being a literal ``$``:
  :func:`expand_env`.

:func:`dumps` writes TOML (with tomli-w) for the tools that generate configs: the demo,
the local broker runner and the tests.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

import tomli_w

from broker.common.errors import ConfigError
from broker.common.zk_connect import validate_zk_connect

ErrorFactory = Callable[[str, str, str], Exception]
"""Builds a component's config error from (key, problem, file); see :func:`config_error`."""


def format_error(file: str, key: str, problem: str) -> str:
    """The one format of config errors: ``<file>: <key>: <problem>``, empty parts left out."""
    return ": ".join(part for part in (file, key, problem) if part)


def config_error(key: str, problem: str, file: str = "") -> ConfigError:
    """The broker's config error (the default :data:`ErrorFactory`)."""
    return ConfigError(format_error(file, key, problem), key=key, file=file)


# -- type checks ------------------------------------------------------------------------------


class Check(NamedTuple):
    """A value test and what it expects, as in ``must be <expected>, got <value>``."""

    test: Callable[[Any], bool]
    expected: str


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(s, str) and s for s in value)


STRING = Check(lambda v: isinstance(v, str), "a string")
NONEMPTY_STR = Check(lambda v: isinstance(v, str) and v != "", "a non-empty string")
BOOL = Check(lambda v: isinstance(v, bool), "true or false")
INTEGER = Check(_is_int, "an integer")
POSITIVE_INT = Check(lambda v: _is_int(v) and v > 0, "a positive integer")
NONNEG_INT = Check(lambda v: _is_int(v) and v >= 0, "an integer >= 0")
POSITIVE_NUMBER = Check(lambda v: _is_number(v) and v > 0, "a positive number")
NONNEG_NUMBER = Check(lambda v: _is_number(v) and v >= 0, "a number >= 0")
PORT = Check(lambda v: _is_int(v) and 0 <= v <= 65535, "a port number 0-65535")
TABLE = Check(lambda v: isinstance(v, dict), "a table")
STR_LIST = Check(_is_str_list, "a list of non-empty strings")
NONEMPTY_STR_LIST = Check(lambda v: _is_str_list(v) and len(v) > 0, "a non-empty list of strings")
TABLE_LIST = Check(lambda v: isinstance(v, list) and all(isinstance(t, dict) for t in v), "an array of tables")


def one_of(*choices: Any) -> Check:
    """A value equal to one of ``choices`` (of the same type: ``true`` is not ``1``)."""
    return Check(
        lambda v: any(type(v) is type(c) and v == c for c in choices),
        " or ".join(repr(c) if isinstance(c, str) else str(c) for c in choices),
    )


def either(first: Check, second: Check) -> Check:
    """A value that passes ``first`` or ``second``."""
    return Check(lambda v: first.test(v) or second.test(v), f"{first.expected} or {second.expected}")


class Field(NamedTuple):
    """One declared key of a table: its type check and whether it must be given."""

    check: Check
    required: bool = False
    why: str = ""
    """Said when a required key is missing: ``state_dir: missing (where the checkpoint lives)``."""


Fields = Mapping[str, Field]
"""A table's declared keys. Defaults live in the component's config dataclasses."""


def fields(
    required: tuple[str, ...] = (), why: Mapping[str, str] | None = None, /, **checks: Check
) -> dict[str, Field]:
    """Declare a table: ``fields(("id",), id=NONNEG_INT, host=NONEMPTY_STR)``.

    ``required`` names the keys that must be given, ``why`` what a missing one is for.
    """
    why = why or {}
    unknown = (set(required) | set(why)) - set(checks)
    if unknown:
        raise ValueError(f"required keys without a check: {sorted(unknown)}")
    return {key: Field(check, key in required, why.get(key, "")) for key, check in checks.items()}


# -- validation -------------------------------------------------------------------------------


def _hint(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (known: {', '.join(sorted(known))})" if known else ""


@dataclass(frozen=True)
class Validator:
    """Validates the tables of one config document and raises the component's error.

    ``file`` is the config file's name as given ("" for a dict), ``base_dir`` where its
    relative paths start, ``error`` the component's :data:`ErrorFactory`.
    """

    file: str = ""
    base_dir: Path = field(default_factory=Path.cwd)
    error: ErrorFactory = config_error

    def fail(self, key: str, problem: str) -> NoReturn:
        """Raise the component's config error naming ``key`` (a dotted path) and the file."""
        raise self.error(key, problem, self.file)

    def check(self, table: Mapping[str, Any], declared: Fields, where: str = "") -> dict[str, Any]:
        """Refuse unknown keys, wrong types and missing required keys; return a copy."""
        for key, value in table.items():
            name = f"{where}.{key}" if where else key
            spec = declared.get(key)
            if spec is None:
                self.fail(name, "unknown key" + _hint(key, list(declared)))
            if not spec.check.test(value):
                self.fail(name, f"must be {spec.check.expected}, got {value!r}")
        for key, spec in declared.items():
            if spec.required and key not in table:
                self.fail(f"{where}.{key}" if where else key, f"missing ({spec.why or 'required'})")
        return dict(table)

    def table(
        self, parent: Mapping[str, Any], name: str, declared: Fields, where: str = "", required: bool = False
    ) -> dict[str, Any]:
        """The checked sub-table ``name`` of ``parent`` ({} when absent and not required)."""
        key = f"{where}.{name}" if where else name
        if name not in parent:
            if required:
                self.fail(key, f"missing (the [{key}] table is required)")
            return self.check({}, declared, key)
        value = parent[name]
        if not isinstance(value, dict):
            self.fail(key, f"must be a table ([{key}]), got {value!r}")
        return self.check(value, declared, key)

    def sections(
        self, doc: Mapping[str, Any], declared: Mapping[str, Fields], required: tuple[str, ...] = ()
    ) -> dict[str, dict[str, Any]]:
        """A document made only of tables: each table checked, unknown tables refused."""
        for name in doc:
            if name not in declared:
                self.fail(name, "unknown table" + _hint(name, list(declared)))
        return {name: self.table(doc, name, keys, required=name in required) for name, keys in declared.items()}

    def zk_connect(self, key: str, value: str) -> str:
        """A ZooKeeper connect string, checked by :mod:`broker.common.zk_connect`."""
        try:
            return validate_zk_connect(value)
        except ConfigError as exc:
            self.fail(key, str(exc))

    def path(self, value: str) -> Path:
        """A path from the config: ``~`` expanded, relative ones taken from ``base_dir``."""
        path = Path(value).expanduser()
        return path if path.is_absolute() else self.base_dir / path


# -- environment variables --------------------------------------------------------------------

_REFERENCE = re.compile(r"\$(?:(?P<dollar>\$)|\{(?P<body>[^}]*)\}|(?P<open>\{))")
"""``$$``, ``${...}`` or an unclosed ``${``; any other ``$`` (a regex's ``$``) stays as it is."""
_VARIABLE = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>.*))?", re.DOTALL)


def expand_env(
    doc: Mapping[str, Any], env: Mapping[str, str], file: str = "", error: ErrorFactory = config_error
) -> dict[str, Any]:
    """``doc`` with ``${VAR}`` and ``${VAR:-default}`` in its string values taken from ``env``.

    Why after parsing: a value from the environment can never break the TOML syntax
    (a quote or a newline in it stays inside its string), and only string values change,
    so a key's type is always the one written in the file. Table keys are left alone.

    ``${VAR:-default}`` takes ``default`` when ``VAR`` is unset or empty, as the shell
    does; ``$$`` is a literal ``$``; a ``$`` before anything else (a regex's ``$``) stays.
    ``${VAR}`` with ``VAR`` unset, or a malformed ``${...}``, raises ``error`` naming the
    key (``sources[0].pattern``) and the variable.
    """

    def expand(value: Any, key: str) -> Any:
        if isinstance(value, str):
            return _REFERENCE.sub(lambda match: _replace(match, key), value)
        if isinstance(value, list):
            return [expand(item, f"{key}[{i}]") for i, item in enumerate(value)]
        if isinstance(value, dict):
            return {k: expand(v, f"{key}.{k}" if key else k) for k, v in value.items()}
        return value

    def _replace(match: re.Match[str], key: str) -> str:
        if match.group("dollar"):
            return "$"
        body = match.group("body")
        if body is None:
            raise error(key, "'${' without a closing '}' (write '$$' for a literal '$')", file)
        variable = _VARIABLE.fullmatch(body)
        if variable is None:
            raise error(
                key, f"'${{{body}}}' is not '${{NAME}}' or '${{NAME:-default}}' (write '$$' for a literal '$')", file
            )
        name, default = variable.group("name"), variable.group("default")
        value = env.get(name)
        if default is not None:
            return value if value else default
        if value is None:
            raise error(
                key, f"environment variable {name} is not set (set it, or give a default: ${{{name}:-value}})", file
            )
        return value

    expanded: dict[str, Any] = expand(dict(doc), "")
    return expanded


def read(
    path: str | Path, error: ErrorFactory = config_error, env: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], Validator]:
    """Parse a TOML config file; return the document and the validator for its tables.

    ``${VAR}`` and ``${VAR:-default}`` in string values come from ``env`` (the process
    environment by default), see :func:`expand_env`. A missing, unreadable or malformed
    file, or an unset variable, raises ``error`` with the file named.
    """
    path = Path(path)
    file = str(path)
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise error("", "no such config file", file) from None
    except IsADirectoryError:
        raise error("", "is a directory, not a config file", file) from None
    except PermissionError:
        raise error("", "config file is not readable (permission denied)", file) from None
    except OSError as exc:
        raise error("", f"cannot read config file: {exc.strerror}", file) from None
    except tomllib.TOMLDecodeError as exc:
        raise error("", f"not valid TOML: {exc}", file) from None
    data = expand_env(data, os.environ if env is None else env, file, error)
    return data, Validator(file=file, base_dir=path.parent.absolute(), error=error)


def dumps(doc: Mapping[str, Any]) -> str:
    """A document (tables, arrays of tables, scalars, lists) as TOML text, by tomli-w."""
    return tomli_w.dumps(doc)


__all__ = [
    "BOOL",
    "Check",
    "ErrorFactory",
    "Field",
    "Fields",
    "INTEGER",
    "NONEMPTY_STR",
    "NONEMPTY_STR_LIST",
    "NONNEG_INT",
    "NONNEG_NUMBER",
    "PORT",
    "POSITIVE_INT",
    "POSITIVE_NUMBER",
    "STRING",
    "STR_LIST",
    "TABLE",
    "TABLE_LIST",
    "Validator",
    "config_error",
    "dumps",
    "either",
    "expand_env",
    "fields",
    "format_error",
    "one_of",
    "read",
]
