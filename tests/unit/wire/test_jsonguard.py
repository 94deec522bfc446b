from __future__ import annotations

import json

import pytest

from outpost_wire import jsonguard


@pytest.mark.parametrize(
    "text",
    ['{"a": [1, {"b": "[[[[["}]}', '"]]]]}}}}"', '{"k": "\\\\\\"[[[[[[["}', "[]", "3"],
)
def test_brackets_inside_strings_do_not_count(text: str) -> None:
    assert jsonguard.loads(text, max_depth=3) == json.loads(text)


def test_depth_past_the_limit_is_a_value_error_not_a_recursion_error() -> None:
    assert jsonguard.loads("[" * 4 + "]" * 4, max_depth=4) == [[[[]]]]
    with pytest.raises(jsonguard.JsonTooDeep):
        jsonguard.loads("[" * 5 + "]" * 5, max_depth=4)
    with pytest.raises(ValueError, match="deeper than 64"):
        jsonguard.loads(b"[" * 100_000)


def test_malformed_json_is_still_a_value_error() -> None:
    with pytest.raises(ValueError):
        jsonguard.loads("{bad")
