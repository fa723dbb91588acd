"""Argument values from a .json/.yaml/.yml file, each read as its field's type, as a flag would be.

`training.args.parse_dataclasses` reads a file given in place of the flags with `read_argument_file`:
a file says what a flag says, and a key or a value that no flag would take is refused, naming the
file and the key.
"""

from __future__ import annotations

import difflib
import json
import re
import types
import typing
from dataclasses import fields

import yaml


def _scalar_type(annotation):
    """`bool`, `int`, `float` or `str` for a field typed as one of them (or as it or None); else None."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = kinds[0] if len(kinds) == 1 else None
    return annotation if annotation in (bool, int, float, str) else None


def _optional(annotation) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in typing.get_args(
        annotation
    )


class _Loader(yaml.SafeLoader):
    """YAML with YAML 1.2's booleans, true and false only: YAML 1.1 (PyYAML) also reads yes/no/on/off/
    y/n as booleans, so `mixed_precision: no` became False, then 'false'. The words stay strings here,
    and a bool field reads them as a flag would (`_BOOL_WORDS`)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)

_BOOL_WORDS = {"true": True, "yes": True, "y": True, "on": True, "1": True}
_BOOL_WORDS |= {"false": False, "no": False, "n": False, "off": False, "0": False}


def _coerced(name: str, value, annotation, path: str):
    """`value` of the file `path` for the field `name` typed `annotation`, as its type.

    A file says what a flag says: "1e-3" is a float (PyYAML reads YAML 1.1, where a number needs a
    dot: `1e-3` is a string there, `1.0e-3` a float), "100" an int, "yes" a bool. A list or mapping
    where a number, a bool or a string belongs is refused, naming the field and the file.
    """
    kind = _scalar_type(annotation)
    if isinstance(value, str) and value.strip().lower() == "none" and kind not in (None, str):
        value = None  # a number or bool that may be None: "none" says so, as on the command line
    if value is None:  # a list too (`report_to:` crashed the run's checks with a TypeError)
        if annotation is None or _optional(annotation):
            return None
        raise ValueError(f"{path}: `{name}` is empty (null); give it a value or leave the key out.")
    if kind is None:
        return value
    expected = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}[kind]
    if isinstance(value, (list, dict)) and not (kind is str and isinstance(value, dict)):  # config_overrides
        raise ValueError(
            f"{path}: `{name}` must be {expected}, got a {'list' if isinstance(value, list) else 'mapping'} ({value!r})."
        )
    if kind is str:
        # as a flag would be: `split: 1` is "1"; `resume: yes` (a YAML 1.1 bool) is "true"
        return (
            str(value).lower()
            if isinstance(value, bool)
            else value
            if isinstance(value, (str, dict))
            else str(value)
        )
    if kind is bool:
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in _BOOL_WORDS:
            return _BOOL_WORDS[word]
    elif not isinstance(value, bool):
        try:
            number = float(value) if isinstance(value, str) else value
        except ValueError:
            number = None
        if kind is float and isinstance(number, (int, float)):
            return float(number) if isinstance(value, str) else value
        if kind is int and isinstance(number, (int, float)) and float(number).is_integer():
            return int(number)
    raise ValueError(f"{path}: `{name}` must be {expected}, got {value!r}.")


def read_argument_file(path: str, classes) -> dict:
    """The argument values of a .json/.yaml/.yml file for `classes`, each converted to its field's type.

    Raises:
        ValueError: naming the file, for a file that is not valid JSON/YAML, that holds no mapping
            (a list, a string), with keys no class has (and the closest names), or a value of the
            wrong kind for its field (`_coerced`).
    """
    json_file = path.endswith(".json")
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f) if json_file else yaml.load(f, Loader=_Loader)
    except (ValueError, yaml.YAMLError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{path} is not a valid {'JSON' if json_file else 'YAML'} file: {err}") from None
    if not isinstance(values, dict):
        kind = "nothing" if values is None else f"a {type(values).__name__}"
        raise ValueError(
            f"{path} must hold a mapping of argument names to values (`learning_rate: 3.0e-4`, one a line), got {kind}."
        )
    annotations = {}
    for cls in classes:
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # an annotation that does not resolve: its values go through unconverted
            hints = {}
        annotations |= {f.name: hints.get(f.name) for f in fields(cls) if f.init}
    unknown = [str(key) for key in values if key not in annotations]
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, sorted(annotations), n=1, cutoff=0.6)
            hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ValueError(f"{path} has keys that are no arguments: {', '.join(hints)}.")
    return {key: _coerced(key, value, annotations[key], path) for key, value in values.items()}
