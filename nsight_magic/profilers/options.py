"""A profiler's options declared once: a frozen dataclass (``NsysOptions``, ``NcuOptions``) whose
fields carry, through ``option(...)``, their magic flag, help text and how the flag's text becomes
the field's value. Generated from it: the magic's arguments (``magic_arguments``), so its usage
and ``%%ncu?`` help; the run's ``meta.json`` entry (``options_meta`` / ``options_from_meta``); the
options a drill-down may set (``drill_fields``, ``profilers/drill_request.py``).

Choices come from a field's ``Literal`` type (or the ``cli`` words, where the flag spells them
otherwise). Standard library only: magics, session and results all read these declarations.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

_KEY = "nsight_magic.option"


@dataclass(frozen=True)
class OptionSpec:
    """How one field appears to the user. ``flag`` None: set by the session, never by a flag.
    ``cli``: the flag's words and the field value each stands for; ``parse``: the flag's text ->
    the field value (ValueError with a message naming the flag for bad text); ``repeat``: the
    flag may be given more than once (the field holds them all); ``drill``: a drill-down from the
    kernel picker may set it; ``meta_key``: its name in meta.json (fields that share one: the
    first that is set wins)."""

    flag: str | None = None
    help: str = ""
    metavar: str | None = None
    cli: Mapping[str, Any] | None = None
    parse: Callable[[Any], Any] | None = None
    repeat: bool = False
    drill: bool = False
    meta_key: str | None = None


def option(default: Any, flag: str | None = None, help: str = "", **spec: Any) -> Any:
    """A dataclass field with its ``OptionSpec`` (see there for ``spec``'s names)."""
    return dataclasses.field(default=default, metadata={_KEY: OptionSpec(flag, help, **spec)})


def spec_of(field: dataclasses.Field[Any]) -> OptionSpec:
    return field.metadata.get(_KEY) or OptionSpec()


def declared(cls: type) -> list[tuple[dataclasses.Field[Any], OptionSpec]]:
    """Every field of the options class ``cls`` with its spec, in declaration order."""
    return [(f, spec_of(f)) for f in dataclasses.fields(cls)]


def flagged(cls: type) -> list[tuple[dataclasses.Field[Any], OptionSpec]]:
    """The fields a magic flag sets."""
    return [(f, s) for f, s in declared(cls) if s.flag]


def drill_fields(cls: type) -> tuple[str, ...]:
    """The names of the fields a drill-down may set."""
    return tuple(f.name for f, s in declared(cls) if s.drill)


def literal_choices(cls: type, name: str) -> tuple[Any, ...]:
    """The values of the field's ``Literal`` type (``X | None`` looked through), else ()."""
    hint = typing.get_type_hints(cls)[name]
    if get_origin(hint) is Union or type(hint).__name__ == "UnionType":
        hint = next((a for a in get_args(hint) if a is not type(None)), hint)
    return get_args(hint) if get_origin(hint) is Literal else ()


def argument_specs(cls: type) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    """``(flags, argparse keywords)`` for each flagged field, in declaration order: what the
    magic hands to ``IPython.core.magic_arguments.argument``. The argparse default is the
    field's default spelled as the flag spells it."""
    out: list[tuple[tuple[str, ...], dict[str, Any]]] = []
    for f, s in flagged(cls):
        kwargs: dict[str, Any] = {"dest": f.name, "help": s.help}
        if s.metavar:
            kwargs["metavar"] = s.metavar
        default = f.default
        if s.cli is not None:
            kwargs["choices"] = list(s.cli)
            kwargs["default"] = next(w for w, v in s.cli.items() if v == default)
        elif isinstance(default, bool):
            kwargs["action"] = "store_true"
        elif s.repeat:
            kwargs.update(action="append", default=[])
        else:
            choices = literal_choices(cls, f.name)
            if choices:
                kwargs["choices"] = list(choices)
            hint = typing.get_type_hints(cls)[f.name]
            kinds = set(get_args(hint)) | {hint}
            for kind in (int, float):  # others stay text (``parse`` reads them)
                if kind in kinds:
                    kwargs["type"] = kind
                    break
            kwargs["default"] = ",".join(default) if isinstance(default, tuple) else default
        out.append(((str(s.flag),), kwargs))
    return out


def from_args(cls: type, args: Any, **fixed: Any) -> Any:
    """``cls`` from an argparse namespace of ``argument_specs(cls)`` (``fixed``: the fields the
    magic sets itself, e.g. ``extra_args``). ValueError (naming the flag) for a bad value."""
    values: dict[str, Any] = {}
    for f, s in flagged(cls):
        value = getattr(args, f.name)
        if s.cli is not None:
            value = s.cli[value]
        elif s.repeat:
            value = tuple(value)
        if s.parse is not None:
            value = s.parse(value)
        values[f.name] = value
    return cls(**values, **fixed)


def options_meta(options: Any) -> dict[str, Any]:
    """The options as meta.json keeps them: each field under its ``meta_key`` (default: its
    name), tuples as lists; fields that share a key give the first value that is set."""
    meta: dict[str, Any] = {}
    for f, s in declared(type(options)):
        key = s.meta_key or f.name
        value = getattr(options, f.name)
        value = list(value) if isinstance(value, tuple) else value
        if key not in meta or meta[key] is None:
            meta[key] = value
    return meta


def options_from_meta(cls: type, meta: Mapping[str, Any]) -> Any:
    """Inverse of ``options_meta``: a key read back into the first field that declares it
    (a shared key's later fields keep their defaults); keys it lacks keep the defaults, so a
    run saved before an option existed still reads."""
    values: dict[str, Any] = {}
    taken: set[str] = set()
    for f, s in declared(cls):
        key = s.meta_key or f.name
        if key in taken or key not in meta:
            continue
        taken.add(key)
        value = meta[key]
        is_tuple = isinstance(f.default, tuple) and value is not None
        values[f.name] = tuple(value) if is_tuple else value
    return cls(**values)
