"""Plain value classes for the launch path, in place of dataclasses.

`platform-run launch` pays for every module and class it defines before the first rank starts:
importing `dataclasses` (with inspect, ast, dis, tokenize) costs ~10 ms, and each dataclass
compiles its generated `__init__`/`__repr__`/`__eq__` from source when it is defined (~1.5 ms
a class; the launch path had 16). A `Record` subclass lists its fields, in order, in
`__slots__` and writes its own `__init__` (its signature is the documentation); `Record`
derives from the slots what a dataclass would: `__repr__`, `__eq__`, `replace()`, `as_dict()`
(shallow: nested records stay records) and pickling. `FrozenRecord` is immutable and
hashable; its `__init__` sets the fields with `self._init(...)`, so its fields are declared as
annotations (what mypy reads) and its slots derived from them:

    class Host(FrozenRecord):
        base_env: dict
        npu_present: bool
        __slots__ = tuple(__annotations__)
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:  # pragma: no cover
    from typing import TypeVar
    R = TypeVar("R", bound="Record")


def _rebuild(cls, values):
    record = object.__new__(cls)
    for name, value in zip(cls.__slots__, values):
        object.__setattr__(record, name, value)
    return record


class Record:
    __slots__ = ()

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    __hash__ = None  # mutable: unhashable, as a dataclass with eq=True

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{self.__class__.__qualname__}({fields})"

    def __reduce__(self):
        return (_rebuild, (self.__class__, self._values()))

    def replace(self: R, **changes) -> R:
        """A copy with `changes` (as dataclasses.replace; an unknown name is a TypeError)."""
        unknown = set(changes).difference(self.__slots__)
        if unknown:
            raise TypeError(f"{self.__class__.__name__} has no field(s) {', '.join(sorted(unknown))}")
        return _rebuild(self.__class__, [changes[name] if name in changes else getattr(self, name)
                                         for name in self.__slots__])

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}


class FrozenRecord(Record):
    __slots__ = ()

    def _init(self, *values) -> None:
        for name, value in zip(self.__slots__, values):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{self.__class__.__name__} is immutable: use .replace({name}=...)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{self.__class__.__name__} is immutable: cannot delete {name}")

    def __hash__(self) -> int:
        return hash(self._values())
