"""The command-line parser of argument dataclasses: `HfArgumentParser`, with the flags it lacks.

`HfArgumentParser` gives a field that may be None (`keep_last: int | None = 3`) the flag of its
type, so no command line could say None: `--keep_last none` was "invalid int value", and a file's
`keep_last: null` had no flag to travel as. Here "none" is None for such a number or bool field,
as a file's `null` is. A `str | None` field keeps "none" as the string it is.
"""

from __future__ import annotations

import argparse
import typing
from dataclasses import fields

from transformers import HfArgumentParser

from .files import _optional, _scalar_type


def argument_parser(classes) -> HfArgumentParser:
    """The parser of the dataclasses `classes`, each field a `--flag` (`parse_dataclasses`)."""
    parser = HfArgumentParser(classes)
    for cls in classes:
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            if not f.init:
                continue
            if f.default is None and hints.get(f.name) in (bool, bool | None):
                _add_negative_flags(parser, f.name)
            if _optional(hints.get(f.name)) and _scalar_type(hints.get(f.name)) in (int, float, bool):
                for action in parser._actions:
                    if action.dest == f.name and action.type is not None:
                        action.type = _or_none(action.type)
    return parser


def _add_negative_flags(parser: HfArgumentParser, name: str) -> None:
    """The flags of a bool field whose default is None (unset: e.g. a --preset's value) as those of the
    other bools: `--name` alone means true, and `--no_name` (HfArgumentParser adds it only for a
    default of True) false."""
    positive = parser._option_string_actions[f"--{name}"]
    positive.nargs, positive.const = "?", True
    negatives = [f"--no_{name}", f"--no-{name.replace('_', '-')}"]
    if not any(flag in parser._option_string_actions for flag in negatives):
        parser.add_argument(
            *negatives, action="store_false", dest=name, default=argparse.SUPPRESS, help=f"--{name} false"
        )


def _or_none(kind):
    """The flag type `kind`, taking "none" (any case) for None."""

    def convert(text: str):
        return None if text.strip().lower() == "none" else kind(text)

    convert.__name__ = getattr(kind, "__name__", "value")  # argparse's "invalid int value: 'x'"
    return convert
