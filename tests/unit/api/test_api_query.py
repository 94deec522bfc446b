"""Query helpers: bracket arrays, time bounds, cursors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from starlette.datastructures import QueryParams

from control_plane.api.query import decode_cursor, encode_cursor, query_list, time_bounds
from control_plane.errors import InvalidRequest

T = datetime(2030, 1, 1, 12, tzinfo=UTC)


def test_query_list_accepts_both_spellings() -> None:
    params = QueryParams("types[]=a&types[]=b&types=c")
    assert query_list(params, "types") == ["a", "b", "c"]
    with pytest.raises(InvalidRequest, match="'c'"):
        query_list(params, "types", allowed={"a", "b"})


def test_time_bounds() -> None:
    params = QueryParams({"created_at[gt]": T.isoformat(), "created_at_lte": "2030-01-02T00:00:00Z"})
    bounds = time_bounds(params)
    assert bounds.after == T + timedelta(microseconds=1)
    assert bounds.before == datetime(2030, 1, 2, tzinfo=UTC)
    assert not bounds.contains(T)
    assert bounds.contains(T + timedelta(seconds=1))
    naive = time_bounds(QueryParams({"created_at[gte]": "2030-01-01T12:00:00"}))
    assert naive.after == T
    assert time_bounds(QueryParams("")).unbounded
    with pytest.raises(InvalidRequest, match="RFC 3339"):
        time_bounds(QueryParams({"created_at[lt]": "yesterday"}))


def test_cursors() -> None:
    assert decode_cursor(encode_cursor({"s": 5})) == {"s": 5}
    for bad in ("!!!", encode_cursor({"s": 1})[:-3] + "~~", "WzFd"):  # "WzFd" is "[1]"
        with pytest.raises(InvalidRequest, match="page"):
            decode_cursor(bad)
