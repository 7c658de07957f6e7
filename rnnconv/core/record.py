"""Typed documents that a conversion builds without importing pydantic.

A `Record` declares its fields once, as annotations with defaults (`field(...)` for a constraint, an alias or a
factory). Building one checks each value against its type and constraints with plain comparisons: a value of
exactly its declared type (a `str` for `str`, a list of them for `list[str]`, a record for a record) within its
constraints is kept as it is, which is what pydantic's validation gives back for it. Anything else (a value of
another type, out of range, an unknown field, a document read from a file) goes to pydantic, which decides as it
always did, with its errors: a pydantic model generated from the same declaration the first time one is needed.
The JSON Schemas (`rnnconv schema`) are that model's, so the declaration stays the single contract, and pydantic's
~0.1 s of import and model building is paid only by what validates a document from outside or prints a schema.

The methods keep pydantic's names (`model_validate`, `model_copy`, `model_dump`, ...) so that a record and a pydantic
model (verify's documents, which nest records) are used alike.
"""

from __future__ import annotations

import json
import math
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Union, get_args, get_origin

if TYPE_CHECKING:
    from typing_extensions import Self, dataclass_transform
else:

    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:
        return lambda decorated: decorated


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


class Spec:
    """A field's declaration: its default (or factory), its alias in documents, its constraints, its description."""

    __slots__ = ("alias", "constraints", "default", "default_factory", "description")

    def __init__(
        self,
        default: Any = REQUIRED,
        default_factory: Callable[[], Any] | None = None,
        alias: str | None = None,
        description: str | None = None,
        constraints: dict[str, Any] | None = None,
    ) -> None:
        self.default = default
        self.default_factory = default_factory
        self.alias = alias
        self.description = description
        self.constraints = constraints or {}

    def pydantic_field(self) -> Any:
        """The same declaration as pydantic's `Field`."""
        from pydantic import Field

        given: dict[str, Any] = {"alias": self.alias, "description": self.description, **self.constraints}
        if self.default_factory is not None:
            return Field(default_factory=self.default_factory, **given)
        return Field(... if self.default is REQUIRED else self.default, **given)


def field(
    default: Any = REQUIRED,
    *,
    default_factory: Callable[[], Any] | None = None,
    json_name: str | None = None,
    description: str | None = None,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    min_length: int | None = None,
) -> Any:
    """A field with a constraint, a factory, a description, or another name in documents (`json_name`: pydantic's
    alias, the name a document uses; building a record takes either name)."""
    bounds = {"ge": ge, "gt": gt, "le": le, "min_length": min_length}
    return Spec(default, default_factory, json_name, description, {k: v for k, v in bounds.items() if v is not None})


def checks(*fields: str) -> Callable[[Callable[[Any], Any]], Any]:
    """A check of the named fields beyond their types: a function of the value that returns it or raises ValueError
    with the sentence to give (pydantic's `field_validator`, which the generated model runs)."""

    def mark(function: Callable[[Any], Any]) -> Any:
        function.checks_fields = fields  # type: ignore[attr-defined]
        return staticmethod(function)

    return mark


class _Rejected(Exception):
    """A value the plain checks do not keep as it is: pydantic decides."""


Check = Callable[[Any], bool]


def _plain_check(annotation: Any) -> Check:
    """A check that a value is exactly of `annotation` (what pydantic gives back unchanged), or rejects it."""
    if annotation is Any:
        return lambda value: True
    if annotation is None or annotation is type(None):
        return lambda value: value is None
    if annotation in (str, int, float, bool):
        return lambda value: type(value) is annotation
    origin = get_origin(annotation)
    arguments = get_args(annotation)
    if origin in (Union, types.UnionType):
        options = [_plain_check(argument) for argument in arguments]
        return lambda value: any(option(value) for option in options)
    if origin is Literal:
        return lambda value: any(type(value) is type(choice) and value == choice for choice in arguments)
    if origin is list:
        element = _plain_check(arguments[0]) if arguments else _plain_check(Any)
        return lambda value: type(value) is list and all(element(item) for item in value)
    if origin is dict:
        key, entry = (_plain_check(arguments[0]), _plain_check(arguments[1])) if arguments else (None, None)
        if key is None or entry is None:
            return lambda value: type(value) is dict
        return lambda value: type(value) is dict and all(key(k) and entry(v) for k, v in value.items())
    if origin is not None and getattr(origin, "__name__", "") == "Callable":
        return callable
    if isinstance(annotation, type) and annotation not in (list, dict, tuple, set):
        return lambda value: isinstance(value, annotation)
    return lambda value: False  # a form these checks do not know: pydantic decides


def _within(constraints: Mapping[str, Any]) -> Check | None:
    """A check of a value's bounds (ge, gt, le on numbers, min_length on a list or str)."""
    if not constraints:
        return None
    ge, gt, le, shortest = (constraints.get(name) for name in ("ge", "gt", "le", "min_length"))

    def within(value: Any) -> bool:
        if value is None:
            return True
        if shortest is not None and len(value) < shortest:
            return False
        if ge is not None and not value >= ge:
            return False
        if gt is not None and not value > gt:
            return False
        return le is None or value <= le

    return within


class _Plan:
    """A record class's fields, their checks and the values to copy, made on first use."""

    __slots__ = ("checks", "names")

    def __init__(self, record: type[Record]) -> None:
        hints = record.field_types()
        own_checks: dict[str, list[Callable[[Any], Any]]] = {}
        for function, fields in record.field_checks().values():
            for name in fields:
                own_checks.setdefault(name, []).append(function)
        self.checks: dict[str, tuple[Check, Check | None, list[Callable[[Any], Any]]]] = {
            name: (_plain_check(hints[name]), _within(field.constraints), own_checks.get(name, []))
            for name, field in record.model_fields.items()
        }
        self.names = {field.alias: name for name, field in record.model_fields.items() if field.alias}


def _copied(value: Any) -> Any:
    """A list or dict as pydantic gives one back: a new one (the record's own, whatever the caller does with the
    one it gave)."""
    if type(value) is list:
        return list(value)
    if type(value) is dict:
        return dict(value)
    return value


def _dumped(value: Any, json: bool, by_alias: bool, exclude_none: bool) -> Any:
    if isinstance(value, Record):
        return value.model_dump(mode="json" if json else "python", by_alias=by_alias, exclude_none=exclude_none)
    if isinstance(value, list | tuple):
        items = [_dumped(item, json, by_alias, exclude_none) for item in value]
        return items if json or isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        return {key: _dumped(item, json, by_alias, exclude_none) for key, item in value.items()}
    if json and isinstance(value, PurePath):
        return str(value)
    return value


def float_text(value: float) -> str:
    """A finite float as pydantic's JSON writes it: Python's shortest repr, but a negative exponent unpadded
    ("1e-7", not "1e-07") and a number of the order 1e-5 in decimals ("0.000015")."""
    text = repr(value)
    mantissa, e, exponent = text.partition("e")
    if not e or exponent[0] == "+":
        return text
    if exponent == "-05":
        sign, digits = ("-", mantissa[1:]) if mantissa[0] == "-" else ("", mantissa)
        return f"{sign}0.0000{digits.replace('.', '')}"
    return f"{mantissa}e-{exponent[1:].lstrip('0')}"


def _json_text(value: Any) -> str:
    """`value` (plain data: a record's JSON dump) as compact JSON text, as pydantic writes it."""
    kind = type(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    if kind is float:
        return float_text(value) if math.isfinite(value) else "null"
    if kind is str:
        return json.dumps(value, ensure_ascii=False)
    if kind is list:
        return "[" + ",".join(_json_text(item) for item in value) + "]"
    if kind is dict and all(type(key) is str for key in value):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_json_text(v)}" for k, v in value.items()) + "}"
    raise _Rejected  # anything else pydantic writes (or refuses) itself


@dataclass_transform(kw_only_default=True, field_specifiers=(field,))
class Record:
    """A typed document: its fields are its class's annotations (see the module's docstring)."""

    # the generated pydantic model's settings beyond extra="forbid" and populate_by_name
    pydantic_config: ClassVar[dict[str, Any]] = {"strict": True}
    model_fields: ClassVar[dict[str, Spec]] = {}
    _plan: ClassVar[_Plan | None] = None
    _adapter: ClassVar[Any] = None
    _pydantic_model: ClassVar[Any] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = dict(cls.model_fields)
        for name, annotation in vars(cls).get("__annotations__", {}).items():
            if str(annotation).startswith(("ClassVar", "typing.ClassVar")):
                continue
            declared = vars(cls).get(name, REQUIRED)
            fields[name] = declared if isinstance(declared, Spec) else Spec(declared)
            if name in vars(cls):
                delattr(cls, name)
        cls.model_fields = fields
        cls._plan = None
        cls._adapter = None

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(type(self)._checked(values))
        self._complete()

    def _complete(self) -> None:
        """What a record fills in from its other fields once they are checked (a subclass's)."""

    # --- building ---------------------------------------------------------------------------------

    @classmethod
    def _checked(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        """The fields of `values`, by the plain checks, or as pydantic validates them (its errors raised)."""
        try:
            return cls._plainly(values)
        except _Rejected:
            return dict(vars(cls.type_adapter().validate_python(dict(values))))

    @classmethod
    def _plainly(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        plan = cls._plan or cls._planned()
        given = {plan.names.get(key, key): value for key, value in values.items()}
        if len(given) != len(values):
            raise _Rejected  # a field given by both its names
        kept: dict[str, Any] = {}
        for name, field in cls.model_fields.items():
            if name not in given:
                if field.default_factory is not None:
                    kept[name] = field.default_factory()
                elif field.default is REQUIRED:
                    raise _Rejected
                else:
                    kept[name] = field.default
                continue
            value = given.pop(name)
            typed, within, own = plan.checks[name]
            if not typed(value) or (within is not None and not within(value)):
                raise _Rejected
            for check in own:
                try:
                    value = check(value)
                except ValueError:
                    raise _Rejected from None
            kept[name] = _copied(value)
        if given:
            raise _Rejected  # a field it does not have
        return kept

    @classmethod
    def field_checks(cls) -> dict[str, tuple[Callable[[Any], Any], tuple[str, ...]]]:
        """Each check (`@checks`) of its fields, by its name: the function and the fields it checks."""
        found: dict[str, tuple[Callable[[Any], Any], tuple[str, ...]]] = {}
        for klass in reversed(cls.__mro__):
            for name, attribute in vars(klass).items():
                function: Any = getattr(attribute, "__func__", None)
                if getattr(function, "checks_fields", None):
                    found[name] = (function, function.checks_fields)
        return found

    @classmethod
    def field_types(cls) -> dict[str, Any]:
        """Each field's type (its annotation, evaluated)."""
        hints = typing.get_type_hints(cls)
        return {name: hints[name] for name in cls.model_fields}

    @classmethod
    def _planned(cls) -> _Plan:
        cls._plan = _Plan(cls)
        return cls._plan

    @classmethod
    def _of(cls, fields: Mapping[str, Any]) -> Self:
        made = cls.__new__(cls)
        made.__dict__.update(fields)
        made._complete()
        return made

    @classmethod
    def model_validate(cls, data: Any) -> Self:
        """`data` (a mapping, or a record) as this record; pydantic's ValidationError where it is not one."""
        if isinstance(data, cls):
            return data
        if isinstance(data, Mapping):
            try:
                return cls._of(cls._plainly(data))
            except _Rejected:
                pass
        validated: Self = cls.type_adapter().validate_python(data)
        return validated

    @classmethod
    def model_validate_json(cls, text: str | bytes) -> Self:
        validated: Self = cls.type_adapter().validate_json(text)
        return validated

    # --- the pydantic model of the same declaration -----------------------------------------------

    @classmethod
    def type_adapter(cls) -> Any:
        """pydantic's TypeAdapter of this record (validation into a record, its serialization and JSON Schema)."""
        if cls._adapter is None:
            from pydantic import TypeAdapter

            cls._adapter = TypeAdapter(cls)
        return cls._adapter

    @classmethod
    def pydantic_model(cls) -> Any:
        """The pydantic model this declaration gives (made once per class)."""
        model = vars(cls).get("_pydantic_model")
        if model is None:
            from pydantic import ConfigDict, create_model, field_validator

            hints = cls.field_types()
            fields: Any = {name: (hints[name], field.pydantic_field()) for name, field in cls.model_fields.items()}
            validators: dict[str, Any] = {
                name: field_validator(*fields)(staticmethod(function))
                for name, (function, fields) in cls.field_checks().items()
            }
            config = ConfigDict(extra="forbid", populate_by_name=True, **cls.pydantic_config)  # type: ignore[typeddict-item]
            model = create_model(
                cls.__name__, __config__=config, __doc__=cls.__doc__, __module__=cls.__module__,
                __validators__=validators, **fields,
            )  # fmt: skip
            cls._pydantic_model = model
        return model

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        model = cls.pydantic_model()
        inner = handler.generate_schema(model)

        def validate(value: Any, validated: Any) -> Any:
            if isinstance(value, cls):
                return value
            return cls._of(vars(validated(value)))

        def serialize(value: Any) -> Any:
            # as the model of its declaration, serialized by that model's schema (as a nested model is)
            return model.model_construct(**vars(value)) if isinstance(value, Record) else value

        return core_schema.no_info_wrap_validator_function(
            validate,
            inner,
            serialization=core_schema.plain_serializer_function_ser_schema(serialize, return_schema=inner),
        )

    @classmethod
    def model_json_schema(cls, by_alias: bool = True) -> dict[str, Any]:
        schema: dict[str, Any] = cls.type_adapter().json_schema(by_alias=by_alias)
        return schema

    # --- what a record gives ------------------------------------------------------------------------

    def model_copy(self, update: Mapping[str, Any] | None = None) -> Self:
        """A copy with `update`'s fields replaced, unchecked (as pydantic's model_copy)."""
        made = type(self).__new__(type(self))
        made.__dict__.update(self.__dict__)
        if update:
            made.__dict__.update(update)
        return made

    def model_dump(self, *, mode: str = "python", by_alias: bool = False, exclude_none: bool = False) -> dict[str, Any]:
        """The fields as plain data (as pydantic's model_dump: its "json" mode and options)."""
        json = mode == "json"
        dumped: dict[str, Any] = {}
        for name, field in type(self).model_fields.items():
            value = self.__dict__[name]
            if exclude_none and value is None:
                continue
            dumped[(field.alias or name) if by_alias else name] = _dumped(value, json, by_alias, exclude_none)
        return dumped

    def model_dump_json(self, *, indent: int | None = None, by_alias: bool = False, exclude_none: bool = False) -> str:
        """The JSON text pydantic writes of it, byte for byte: compact, its float forms, non-finite floats as null
        (written here; by pydantic with an indent, or where a value is of a type the plain writer does not know)."""
        if indent is None:
            try:
                text = _json_text(self.model_dump(mode="json", by_alias=by_alias, exclude_none=exclude_none))
                text.encode()  # a lone surrogate: refused, as pydantic refuses it (a ValueError)
                return text
            except _Rejected:
                pass
        adapter = type(self).type_adapter()
        written: bytes = adapter.dump_json(self, indent=indent, by_alias=by_alias, exclude_none=exclude_none)
        return written.decode()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={self.__dict__.get(name)!r}" for name in type(self).model_fields)
        return f"{type(self).__name__}({fields})"
