"""torchtpu's environment variables as the Python package reads them.

Every variable is declared once, with its default and doc line, in csrc/config/config.cpp (the
table in docs/debugging.md is generated from there). The few the package reads itself, some
before the extension loads (the plugin path), are read here with the same rules as C++'s
config::flag and config::raw; tests/python/test_config.py checks that no other Python module
reads a torchtpu variable and that every name read here is declared."""

from __future__ import annotations

import os

_OFF = ("0", "false", "off", "no")


def raw(name: str) -> str | None:
    """The variable's value, None when unset or empty."""
    value = os.environ.get(name)
    return value if value else None


def flag(name: str, default: bool) -> bool:
    """A switch: "0", "false", "off" or "no" (any case) is off, any other value on; unset or
    empty is `default`."""
    value = raw(name)
    if value is None:
        return default
    return value.lower() not in _OFF
