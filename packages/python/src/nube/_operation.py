"""One row of the generated operation table (_operations_gen.py)."""
from typing import NamedTuple, Tuple


class Operation(NamedTuple):
    method: str
    #: Full path including /api/v2, with `{param}` placeholders.
    path: str
    path_params: Tuple[str, ...]
    query: Tuple[str, ...]
    #: "none", "optional" or "required".
    body: str
    content_type: str
    success: int
    implemented: bool
    #: Served by a hand-written method (the terminal's WebSocket), not by `_call`.
    hand_written: bool
