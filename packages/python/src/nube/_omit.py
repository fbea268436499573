"""The default of every optional argument: the key is left out of the request (None would send null)."""
from typing import Any


class _Omit:
    __slots__ = ()

    def __repr__(self) -> str:
        return "OMIT"

    def __bool__(self) -> bool:
        return False


# Typed Any so that `access: Literal["public", "private"] = OMIT` type-checks for every argument type.
OMIT: Any = _Omit()


def is_omitted(value: object) -> bool:
    return value is OMIT
