"""An operator's YAML configuration file, checked against a pydantic model: every problem is one line
`FILE:LINE: KEY.PATH: what is wrong`, so a site fixes its file without reading our code.

The models say what a file may hold (FileModel: an unknown key is refused, "5" is not 5, nor "yes" true);
this module finds each problem's line (PyYAML's composed nodes keep them) and words pydantic's errors.
A check that needs more than one value (a route naming an undefined receiver) raises ConfigProblem with
the key it is about, and is reported the same way."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, get_args

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import ErrorDetails

Key = tuple[str | int, ...]  # where a value sits: ("receivers", 0, "url_file")
M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class FileModel(BaseModel):
    """A mapping of an operator's file: unknown keys refused, values of the written type only."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class ConfigProblem(ValueError):
    """A problem found after the shapes were checked, with the key it is about (relative to the model)."""

    def __init__(self, at: Key, message: str) -> None:
        super().__init__(message)
        self.at, self.message = at, message


@dataclass(frozen=True)
class ConfigDocument:
    """A parsed YAML file: its data and the line of each key and list item."""

    path: Path
    data: Any
    lines: dict[Key, int]


def read_named_file(path: Path, at: Key) -> str:
    """The text of a file a configuration names (a secret kept out of it); ConfigProblem at `at`."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigProblem(at, f"cannot read {path}: {exc.strerror or exc}") from None


def read_config_file(path: Path, error: type[ValueError], empty: Any = None) -> ConfigDocument:
    """The document in `path`; `error` naming the file (and the line, for bad YAML), or saying it is
    missing or unreadable. An empty file (or one of comments only) holds `empty`, where given (a file
    of defaults); otherwise it is refused."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise error(f"{path}: cannot read: not UTF-8 text") from None
    return parse_config_text(text, path, error, empty)


def parse_config_text(text: str, path: Path, error: type[ValueError], empty: Any = None) -> ConfigDocument:
    """As read_config_file, for a document given as text (one sent over the API); `path` names it."""
    try:
        loader = yaml.SafeLoader(text)  # refuses characters YAML does not allow here already
    except yaml.YAMLError as exc:
        raise error(f"{path}: not valid YAML: {exc}") from None
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise error(f"{where}: not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise error(f"{path}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()
    if node is None:
        if empty is None:
            raise error(f"{path}: the file is empty: expected a mapping of keys to values")
        return ConfigDocument(path, empty, {})
    lines: dict[Key, int] = {}
    _note_lines(node, (), lines)
    return ConfigDocument(path, data, lines)


def load_config_file(
    path: Path,
    model: type[M],
    error: type[ValueError],
    build: Callable[[M], T],
    empty: Any = None,
) -> T:
    """The file at `path` checked against `model`, and turned into what `build` makes of it."""
    document = read_config_file(path, error, empty)
    return checked(model, document.data, error, build, document=document)


def load_config_text(
    text: str,
    name: str,
    model: type[M],
    error: type[ValueError],
    build: Callable[[M], T],
    empty: Any = None,
) -> T:
    """As load_config_file, for a document given as text; `name` stands for the file in messages."""
    document = parse_config_text(text, Path(name), error, empty)
    return checked(model, document.data, error, build, document=document)


def checked(
    model: type[M],
    data: Any,
    error: type[ValueError],
    build: Callable[[M], T],
    where: str = "",
    at: Key = (),
    document: ConfigDocument | None = None,
) -> T:
    """`data` (found at `at` in `document`, or given by a caller as `where`) checked against `model`,
    then `build(model)`; `error` with one line per problem otherwise."""
    try:
        return build(model.model_validate(data))
    except ValidationError as exc:
        problems = [(at + tuple(e["loc"]), _described(e, model, tuple(e["loc"]))) for e in exc.errors()]
    except ConfigProblem as exc:
        problems = [(at + exc.at, exc.message)]
    lines = [_located(key, message, where, document) for key, message in problems]
    raise error("\n".join(dict.fromkeys(lines)))


def _located(key: Key, message: str, where: str, document: ConfigDocument | None) -> str:
    name = _key_name(key) if key else "top level"
    if document is None:
        return f"{where}: {name}: {message}" if where else f"{name}: {message}"
    for end in range(len(key), 0, -1):
        if key[:end] in document.lines:
            return f"{document.path}:{document.lines[key[:end]]}: {name}: {message}"
    return f"{document.path}: {name}: {message}"


def _key_name(key: Key) -> str:
    """receivers[0].url_file, as one writes it."""
    name = ""
    for part in key:
        name += f"[{part}]" if isinstance(part, int) else f".{part}" if name else str(part)
    return name


def _note_lines(node: yaml.Node, at: Key, lines: dict[Key, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = (*at, str(key_node.value))
            lines[key] = key_node.start_mark.line + 1
            _note_lines(value_node, key, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*at, index)] = item.start_mark.line + 1
            _note_lines(item, (*at, index), lines)


_BOUNDS = {
    "greater_than_equal": (">=", "ge"),
    "less_than_equal": ("<=", "le"),
    "greater_than": (">", "gt"),
    "less_than": ("<", "lt"),
}
_EXPECTED = {
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "bool_type": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "tuple_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}


def _described(error: ErrorDetails, model: type[BaseModel], loc: Key) -> str:
    """What is wrong, in the words of the file rather than of Python."""
    kind, ctx, got = error["type"], error.get("ctx") or {}, error.get("input")
    if kind == "extra_forbidden":
        return _unknown_key(str(loc[-1]), _keys_at(model, loc[:-1]))
    if kind == "missing":
        return "required key missing"
    if kind in _BOUNDS:
        sign, name = _BOUNDS[kind]
        bound = ctx[name]
        return f"must be {sign} {int(bound) if float(bound).is_integer() else bound}, got {got!r}"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {_shown(got)}"
    if kind == "finite_number":
        return f"must be a finite number, got {got!r}"
    if kind == "literal_error":
        return f"must be one of {ctx['expected']}, got {_shown(got)}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "string_too_long":
        return f"must be at most {ctx['max_length']} characters long"
    if kind == "too_short":
        return f"needs at least {ctx['min_length']} item(s)"
    if kind in ("value_error", "assertion_error"):
        return str(ctx.get("error", error["msg"]))
    return error["msg"][:1].lower() + error["msg"][1:]


def _shown(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if value is None:
        return "nothing (null)"
    return repr(value)


def _unknown_key(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        return f"unknown key (did you mean {close[0]}?)"
    return f"unknown key; known: {', '.join(known)}" if known else "unknown key"


def _keys_at(model: type[BaseModel] | None, at: Key) -> list[str]:
    """The keys the mapping at `at` may have, following the model's fields down."""
    for part in at:
        if model is None:
            return []
        if isinstance(part, str):
            field = _fields(model).get(part)
            model = _model_in(field.annotation) if field else None
    return list(_fields(model)) if model is not None else []


def _fields(model: type[BaseModel]) -> dict[str, Any]:
    return {field.alias or name: field for name, field in model.model_fields.items()}


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model inside an annotation such as `list[Route] | None`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
