"""Command-line flags made from a process's settings, so that a setting's flag name, default, help text
and bounds are written once, beside the setting.

A settings class is a dataclass (the exporter's: GPU nodes have no pydantic) or a pydantic-settings
model (the collector's). Its fields become argparse options: a dataclass field says its help in
`field(metadata=flag(...))`, a pydantic field in `Field(description=...)` with its constraints, and
either may carry a `Flag` (in the metadata, or in `Annotated[...]`) for another flag name or bounds.
Back from the command line, the value of a setting is its flag's, else its environment variable's,
else its default. Nothing here imports pydantic: a model is recognised by its `model_fields`.
"""

from __future__ import annotations

import argparse
import dataclasses
import operator
import os
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

FLAG = "flag"  # the key of a dataclass field's metadata that holds its Flag
COMPARE = {"gt": operator.gt, "ge": operator.ge, "lt": operator.lt, "le": operator.le}
SYMBOL = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off"}

T = TypeVar("T")


@dataclass(frozen=True)
class Flag:
    """How a setting appears on the command line. Bounds are for dataclass fields: a pydantic field's
    own constraints (Field(gt=0)) are read as they are."""

    help: str | None = None  # None: the pydantic field's description
    name: str | None = None  # None: --the-field-name (--no-the-field-name for a setting on by default)
    metavar: str | None = None
    default_text: str | None = None  # the default in words, where its value says little (the host's name)
    hidden: bool = False  # accepted, left out of --help (paths that only tests change)
    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None


def flag(help: str, **options: Any) -> dict[str, Flag]:
    """A dataclass field's metadata: `field(default=5.0, metadata=flag("sampling interval in seconds", gt=0))`."""
    return {FLAG: Flag(help, **options)}


@dataclass(frozen=True)
class Setting:
    """One field of a settings class, as the command line sees it."""

    name: str
    kind: Any  # the annotation without its `| None`
    default: Any  # dataclasses.MISSING: required
    flag: Flag
    help: str
    bounds: dict[str, float]

    @property
    def option(self) -> str:
        if self.flag.name:
            return self.flag.name
        dashed = self.name.replace("_", "-")
        return f"--no-{dashed}" if self.kind is bool and self.default is True else f"--{dashed}"


def settings_of(cls: type) -> list[Setting]:
    """The fields of a dataclass or pydantic settings class, in their order."""
    model_fields = getattr(cls, "model_fields", None)
    if model_fields is not None:
        return [_pydantic_setting(name, info) for name, info in model_fields.items()]
    hints = typing.get_type_hints(cls)
    return [_dataclass_setting(each, hints[each.name]) for each in dataclasses.fields(cls)]


def _dataclass_setting(each: dataclasses.Field[Any], annotation: Any) -> Setting:
    found = each.metadata.get(FLAG)
    if found is None:
        raise TypeError(f"setting {each.name} has no help: give it field(metadata=flag(...))")
    default = each.default
    if default is dataclasses.MISSING and each.default_factory is not dataclasses.MISSING:
        default = each.default_factory()
    return Setting(each.name, _without_none(annotation), default, found, found.help or "", _bounds([found]))


def _pydantic_setting(name: str, info: Any) -> Setting:
    found = next((item for item in info.metadata if isinstance(item, Flag)), Flag())
    help_text = found.help or info.description
    if not help_text:
        raise TypeError(f"setting {name} has no help: give it Field(description=...)")
    default = info.get_default(call_default_factory=True) if not info.is_required() else dataclasses.MISSING
    return Setting(name, _without_none(info.annotation), default, found, help_text, _bounds(info.metadata))


def _bounds(items: list[Any]) -> dict[str, float]:
    found = ((bound, getattr(item, bound, None)) for item in items for bound in COMPARE)
    return {bound: limit for bound, limit in found if limit is not None}


def _without_none(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        kept = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(kept) == 1:
            return kept[0]
    return annotation


def env_prefix(cls: type) -> str | None:
    """Where the class's settings are read from the environment: GPUSCOPE_COLLECTOR_ + the name in capitals.
    A pydantic model says it in model_config, a dataclass in a class variable `env_prefix`."""
    config = getattr(cls, "model_config", None)
    if isinstance(config, dict):
        return config.get("env_prefix") or None
    prefix = getattr(cls, "env_prefix", None)
    return prefix if isinstance(prefix, str) else None


def add_flags(parser: argparse.ArgumentParser, cls: type) -> None:
    """One option per setting of `cls`, its dest the setting's name. An option not given leaves no
    attribute behind, so that given() tells what the command line said from what it left out."""
    for setting in settings_of(cls):
        parser.add_argument(setting.option, dest=setting.name, default=argparse.SUPPRESS, **_argument(setting))
    prefix = env_prefix(cls)
    if prefix:
        parser.epilog = (
            f"Every setting can also come from the environment, as {prefix} and the setting's name in"
            " capitals (docs/operations.md lists them); an option wins over the environment, the environment"
            " over the default."
        )


def _argument(setting: Setting) -> dict[str, Any]:
    help_text = argparse.SUPPRESS if setting.flag.hidden else _help(setting)
    options: dict[str, Any] = {"help": help_text}
    if setting.kind is bool:
        options["action"] = "store_false" if setting.default is True else "store_true"
        return options
    if typing.get_origin(setting.kind) is list:
        options["action"] = "append"
        (setting_kind,) = typing.get_args(setting.kind)
    else:
        setting_kind = setting.kind
    if typing.get_origin(setting_kind) is Literal:
        options["choices"] = list(typing.get_args(setting_kind))
    else:
        options["type"] = converter(setting_kind, setting.bounds)
        # named after the option, as argparse would (the dest is the setting's name: --rules ALERT_RULES)
        options["metavar"] = setting.flag.metavar or setting.option.lstrip("-").replace("-", "_").upper()
    return options


def _help(setting: Setting) -> str:
    text = setting.help
    if "(default" in text:  # the help says its default in its own words
        return text.replace("%", "%%")
    if setting.flag.default_text:
        text = f"{text} (default: {setting.flag.default_text})"
    elif _in_words(setting.default):
        text = f"{text} (default {_in_words(setting.default)})"
    return text.replace("%", "%%")  # argparse formats help with %


def _in_words(default: Any) -> str:
    if default is dataclasses.MISSING or default is None or isinstance(default, bool) or default == []:
        return ""
    if isinstance(default, float):
        return f"{default:g}"
    return str(default)


def converter(kind: Any, bounds: dict[str, float]) -> Callable[[str], Any]:
    """The text of an option (or an environment variable) as the setting's type, within its bounds; an
    error in words otherwise (argparse would say "invalid float value")."""
    if kind is int or kind is float:
        return lambda text: within(number(kind, text), text, bounds)
    if kind is Path:
        return Path
    return str  # pydantic converts the rest (a SecretStr) itself


def number(kind: type[int] | type[float], text: str) -> Any:
    """`text` as `kind`, or an error in words."""
    try:
        return kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


def within(value: Any, text: str, bounds: dict[str, float]) -> Any:
    """`value` if it is within `bounds` (gt, ge, lt, le); otherwise an error saying the bound."""
    for bound, limit in bounds.items():
        if not COMPARE[bound](value, limit):  # NaN is within none
            raise argparse.ArgumentTypeError(f"must be {SYMBOL[bound]} {limit:g}, got {text}")
    return value


def check_bounds(settings: Any) -> None:
    """A dataclass settings object's numbers within their Flag's bounds (pydantic checks its own): for
    settings made in code, which no option parsed. Raises ValueError naming the setting."""
    for setting in settings_of(type(settings)):
        value = getattr(settings, setting.name)
        if setting.bounds and isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                within(value, str(value), setting.bounds)
            except argparse.ArgumentTypeError as exc:
                raise ValueError(f"{setting.name}: {exc}") from None


def given(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The settings the command line gave, by name."""
    return {setting.name: getattr(args, setting.name) for setting in settings_of(cls) if hasattr(args, setting.name)}


def from_environment(cls: type, environ: typing.Mapping[str, str] | None = None) -> dict[str, Any]:
    """A dataclass's settings given in the environment, converted and checked like their options.
    (A pydantic settings model reads its environment itself.)"""
    prefix = env_prefix(cls)
    if prefix is None or hasattr(cls, "model_fields"):
        return {}
    environ = os.environ if environ is None else environ
    return dict(_environment_values(settings_of(cls), prefix, environ))


def _environment_values(
    settings: list[Setting], prefix: str, environ: typing.Mapping[str, str]
) -> Iterator[tuple[str, Any]]:
    for setting in settings:
        variable = f"{prefix}{setting.name.upper()}"
        text = environ.get(variable)
        if text is None:
            continue
        try:
            yield setting.name, _from_text(setting, text)
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"{variable}: {exc}") from None


def _from_text(setting: Setting, text: str) -> Any:
    if setting.kind is bool:
        word = text.strip().lower()
        if word not in TRUE_WORDS | FALSE_WORDS:
            raise argparse.ArgumentTypeError(f"must be true or false, got {text!r}")
        return word in TRUE_WORDS
    if typing.get_origin(setting.kind) is Literal:
        choices = typing.get_args(setting.kind)
        if text not in choices:
            raise argparse.ArgumentTypeError(f"must be one of {', '.join(map(str, choices))}, got {text!r}")
        return text
    return converter(setting.kind, setting.bounds)(text)


def settings_values(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """What the command line and the environment say, the command line winning; defaults left out."""
    return {**from_environment(cls), **given(args, cls)}


def settings_from(cls: Callable[..., T], args: argparse.Namespace, **fixed: Any) -> T:
    """The settings object: each setting from its option, else the environment, else its default;
    `fixed`: values the command resolved itself (the dashboard's DSN)."""
    return cls(**{**settings_values(typing.cast(type, cls), args), **fixed})
