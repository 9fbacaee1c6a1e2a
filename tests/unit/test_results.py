"""What a handler may return (README, "Python API"): None, an int, or a small JSON Result."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

import pgsched
from pgsched._engine.outcomes import MAX_RESULT_BYTES, Encoded, InvalidResult, encode_result
from pgsched._errors import MAX_ERROR_CHARS, MAX_TRACEBACK_BYTES, describe_error, describe_traceback
from pgsched._storage.statements import naming


def test_none() -> None:
    assert encode_result(None) == Encoded(None, None)


@pytest.mark.parametrize("rows", [0, 1, 12345, -1, 2**63 - 1, -(2**63)])
def test_int_rows(rows: int) -> None:
    assert encode_result(rows) == Encoded(rows, None)


def test_result_with_data_round_trips() -> None:
    data = {"tenant": "é", "n": [1, 2.5, None, True], "nested": {"a": {"b": []}}}
    encoded = encode_result(pgsched.Result(rows_affected=7, data=data))
    assert encoded.rows_affected == 7
    assert encoded.result_json is not None
    assert json.loads(encoded.result_json) == data


def test_default_result() -> None:
    encoded = encode_result(pgsched.Result())
    assert encoded.rows_affected == 0
    assert json.loads(encoded.result_json or "null") == {}


def test_result_at_exactly_16_kib_is_accepted_and_one_byte_more_is_not() -> None:
    fits = "x" * (MAX_RESULT_BYTES - 2)  # plus two quotes
    assert MAX_RESULT_BYTES == 16 * 1024
    encoded = encode_result(pgsched.Result(data=fits))
    assert len((encoded.result_json or "").encode()) == MAX_RESULT_BYTES
    with pytest.raises(InvalidResult, match="16 KiB"):
        encode_result(pgsched.Result(data=fits + "x"))


def test_size_is_measured_in_utf8_bytes() -> None:
    # 6000 two-byte characters: 6002 characters but 12002 bytes -> fits
    encode_result(pgsched.Result(data="é" * 6000))
    # 9000 two-byte characters: 9002 characters but 18002 bytes -> too big
    with pytest.raises(InvalidResult):
        encode_result(pgsched.Result(data="é" * 9000))


def _deep(n: int) -> list[Any]:
    root: list[Any] = []
    node = root
    for _ in range(n):
        child: list[Any] = []
        node.append(child)
        node = child
    return root


@pytest.mark.parametrize(
    "value",
    [
        True,
        False,
        "ok",
        b"ok",
        1.5,
        2**63,
        -(2**63) - 1,
        [1, 2],
        {"rows": 1},
        object(),
        pgsched.Result(rows_affected=True),
        pgsched.Result(rows_affected="3"),  # type: ignore[arg-type]
        pgsched.Result(rows_affected=1.0),  # type: ignore[arg-type]
        pgsched.Result(rows_affected=2**63),
        pgsched.Result(data={"x": float("nan")}),
        pgsched.Result(data={"x": float("inf")}),
        pgsched.Result(data=float("-inf")),
        pgsched.Result(data={float("nan"): 1}),
        pgsched.Result(data={"x": "a\u0000b"}),
        pgsched.Result(data={"a\u0000": 1}),
        pgsched.Result(data="x" * (17 * 1024)),
        pgsched.Result(data={"x": object()}),
        pgsched.Result(data={"x": b"bytes"}),
        pgsched.Result(data={1, 2}),
        pgsched.Result(data={(1, 2): "tuple key"}),
        pgsched.Result(data={"big": 10**5000}),
        pgsched.Result(data=_deep(10_000)),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, pgsched.Result) else "Result",
)
def test_invalid_results_raise_invalid_result(value: object) -> None:
    with pytest.raises(InvalidResult):
        encode_result(value)


def test_deep_dict_nesting_is_invalid_not_a_crash() -> None:
    root: dict[str, Any] = {}
    node = root
    for _ in range(10_000):
        node["k"] = {}
        node = node["k"]
    with pytest.raises(InvalidResult):
        encode_result(pgsched.Result(data=root))


def test_a_literal_backslash_u0000_text_is_not_a_nul() -> None:
    text = "C:\\u0000\\file"  # backslash, 'u', '0000': no NUL character
    assert "\x00" not in text
    encoded = encode_result(pgsched.Result(data={"path": text}))
    assert json.loads(encoded.result_json or "null") == {"path": text}


def test_lone_surrogate_is_an_invalid_result() -> None:
    with pytest.raises(InvalidResult):
        encode_result(pgsched.Result(data={"s": "\ud800"}))


def test_describe_error() -> None:
    assert describe_error(ValueError("boom")) == "ValueError: boom"
    long = describe_error(RuntimeError("x" * 10_000))
    assert len(long) == MAX_ERROR_CHARS
    assert long.startswith("RuntimeError: xxx")
    assert "\x00" not in describe_error(ValueError("a\x00b"))


def test_an_error_of_a_named_statement_says_which_statement() -> None:
    # the innermost name is the statement's
    with pytest.raises(psycopg.errors.QueryCanceled) as raised, naming("finish"), naming("inner"):
        raise psycopg.errors.QueryCanceled("canceling statement due to statement timeout")
    assert describe_error(raised.value) == (
        "QueryCanceled: canceling statement due to statement timeout (statement inner)"
    )
    with pytest.raises(ValueError) as other, naming("finish"):
        raise ValueError("not the database's")
    assert describe_error(other.value) == "ValueError: not the database's"


def _raised(message: str) -> BaseException:
    try:
        raise ValueError(message)
    except ValueError as exc:
        return exc


def test_traceback_is_formatted_with_the_raising_frame_and_error() -> None:
    text = describe_traceback(_raised("postgresql://u:hunter2@db/x failed"))
    assert text.startswith("Traceback (most recent call last):")
    assert "in _raised" in text
    assert text.rstrip().endswith("failed")
    assert "hunter2" not in text, "a DSN password in the message is redacted"


def test_traceback_is_cut_to_its_last_16_kib() -> None:
    text = describe_traceback(_raised("é" * 20_000 + " the end"))
    assert len(text.encode("utf-8")) <= MAX_TRACEBACK_BYTES
    assert text.startswith("... (traceback cut to its last 16 KiB)")
    assert text.rstrip().endswith(" the end"), "the end names the error: it is kept"
