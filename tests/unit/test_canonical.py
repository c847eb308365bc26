"""Golden-vector tests for ``bot.canonical`` (RFC 8785 / JCS canonical JSON).

How the expected values in this file were produced -- independently of the code under
test and of the Python ``rfc8785`` package:

1. Every expected canonical text was first derived by hand from the rules of RFC 8785
   (sec. 3.2.2 serialisation of primitives incl. ECMAScript Number-to-String, sec. 3.2.3
   key sorting by UTF-16 code units) and then checked byte-for-byte against the output
   of the JavaScript implementation by one of the RFC's authors:
   npm package ``canonicalize`` version 4.0.0, run on node v20.20.2.
2. Each input below was serialised with Python's stdlib ``json.dumps`` (round-trip
   checked to mean exactly the same value: same types, same float bits, -0.0 sign kept),
   then in node: ``canonicalize(JSON.parse(text))``; the expected bytes are the UTF-8
   encoding of that string and the expected hash is
   ``createHash("sha256").update(Buffer.from(canon, "utf8")).digest("hex")``.
   To reproduce one vector by hand:

       npm install canonicalize@4.0.0
       node --input-type=module -e 'import c from "canonicalize";
         import {createHash} from "node:crypto";
         const s = c(JSON.parse(process.argv[1]));
         console.log(s, createHash("sha256").update(Buffer.from(s, "utf8")).digest("hex"))' \
         '{"b": 2, "a": 1}'

   For the approval_hash vectors the JSON fed to node was the full envelope
   {"kind", "capability", "presentation", "tool": {"name", "arguments"}}.

Do not "fix" a failing vector by regenerating it from bot.canonical: a mismatch means
the encoding changed, which changes every approval hash.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from bot.canonical import MAX_DEPTH, approval_hash, canonical_json, check_canonical
from bot.errors import NotCanonical, SignoffError

# --------------------------------------------------------------------------------------
# canonical_json golden vectors: (input, expected canonical UTF-8 bytes, sha256 hex)
# --------------------------------------------------------------------------------------

RFC_SEC_3_2_2_STRING = "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/"

CANONICAL_VECTORS = [
    pytest.param(
        {"b": 2, "a": 1, "c": {"z": True, "y": None, "x": False}},
        b'{"a":1,"b":2,"c":{"x":false,"y":null,"z":true}}',
        "bcf927f055ab4b6329b6ae0be079d2c2665bf79811de976435eb60fc634f0c8f",
        id="key_order_nested",
    ),
    pytest.param(
        # RFC 8785 sec. 3.2.2 example, input and output verbatim from the RFC.
        {
            "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": RFC_SEC_3_2_2_STRING,
            "literals": [None, True, False],
        },
        (
            b'{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"st'
            b'ring":"\xe2\x82\xac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
        ),
        "2d5e01a318d0f0879ab568c4be289c8b1f64ef8921a53c6277d5e069978baacb",
        id="rfc8785_sec3_2_2_example",
    ),
    pytest.param(
        # RFC 8785 sec. 3.2.3 sorting example.
        {
            "\u20ac": "Euro Sign",
            "\r": "Carriage Return",
            "\ufb33": "Hebrew Letter Dalet With Dagesh",
            "1": "One",
            "\U0001f600": "Emoji: Grinning Face",
            "\u0080": "Control",
            "\u00f6": "Latin Small Letter O With Diaeresis",
        },
        (
            b'{"\\r":"Carriage Return","1":"One","\xc2\x80":"Control","\xc3\xb6":"Latin Small Lette'
            b'r O With Diaeresis","\xe2\x82\xac":"Euro Sign","\xf0\x9f\x98\x80":"Emoji: Grinning Fa'
            b'ce","\xef\xac\xb3":"Hebrew Letter Dalet With Dagesh"}'
        ),
        "5e321556d22018a9656991a9e94f77ec175fa193e52a2429d312f8419ec8b08c",
        id="rfc8785_sec3_2_3_sort_example",
    ),
    pytest.param(
        # UTF-16 order: U+1F600 is D83D DE00 and U+10000 is D800 DC00, so both sort
        # *before* U+E000 / U+FFFF (code-point or UTF-8 order would put them last).
        {"\ue000": 1, "\U0001f600": 2, "\uffff": 3, "a": 4, "\U00010000": 5, "\ud7ff": 6},
        (
            b'{"a":4,"\xed\x9f\xbf":6,"\xf0\x90\x80\x80":5,"\xf0\x9f\x98\x80":2,"\xee\x80\x80":1,"'
            b'\xef\xbf\xbf":3}'
        ),
        "40bf3d0696831c464e4fcc99da68a18b5bc2f114507e97060181d5449decc8bb",
        id="utf16_key_order_astral_before_bmp_private_use",
    ),
    pytest.param(
        {"ab": 8, "a\\b": 3, 'a"b': 2, "a b": 9, "a\nb": 1, "aa": 7, "a": 6, "A": 5, "": 0},
        b'{"":0,"A":5,"a":6,"a\\nb":1,"a b":9,"a\\"b":2,"a\\\\b":3,"aa":7,"ab":8}',
        "bacab834e0be703c2f02c80e4b19fe7cd9f0235d00f9b4490168ac7726e6224d",
        id="ascii_key_order_with_escapes",
    ),
    pytest.param(
        # Only U+0000..U+001F, '"' and '\\' are escaped; short forms \b \t \n \f \r,
        # otherwise lowercase \u00xx. '/' and DEL (U+007F) are emitted as-is.
        ["\u0000\u0001\u0007\b\t\n\u000b\f\r\u000e\u001f", '"', "\\", "/", "\u007f", "'<>&"],
        (
            b'["\\u0000\\u0001\\u0007\\b\\t\\n\\u000b\\f\\r\\u000e\\u001f","\\"","\\\\","/","\x7f",'
            b'"\'<>&"]'
        ),
        "23830a848ba8cb3d0cedf08d5057d78bf63bf630f0ae74bcbadaeb7eb77d095c",
        id="control_chars_and_escapes",
    ),
    pytest.param(
        # U+2028 / U+2029 / NBSP / BOM are NOT escaped, emitted as raw UTF-8.
        {"ls": "a\u2028b", "ps": "c\u2029d", "nbsp": "\u00a0", "bom": "\ufeff"},
        b'{"bom":"\xef\xbb\xbf","ls":"a\xe2\x80\xa8b","nbsp":"\xc2\xa0","ps":"c\xe2\x80\xa9d"}',
        "515f91285fb7a8f016cea2048e8ea83c36a9338305e7c484e8c47103408a3434",
        id="line_separators_not_escaped",
    ),
    pytest.param(
        # No Unicode normalisation: "e\u0301" stays decomposed.
        {
            "name": "Zo\u00eb \u00c5ngstr\u00f6m",
            "city": "Z\u00fcrich",
            "jp": "\u65e5\u672c\u8a9e",
            "euro": "\u20ac",
            "emoji": "\U0001f600\U0001f44d\U0001f3fd",
            "combining": "e\u0301",
        },
        (
            b'{"city":"Z\xc3\xbcrich","combining":"e\xcc\x81","emoji":"\xf0\x9f\x98\x80\xf0\x9f\x91'
            b'\x8d\xf0\x9f\x8f\xbd","euro":"\xe2\x82\xac","jp":"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa'
            b'\x9e","name":"Zo\xc3\xab \xc3\x85ngstr\xc3\xb6m"}'
        ),
        "f906d15aec33c7698465bb4473934bb703bef3ae90757913b9384619ba34bff9",
        id="unicode_text_and_emoji",
    ),
    pytest.param(
        [[[]], [[1, [2, [3]]]], [], {}, [{}], [[[[[]]]]], [None, [True, [False]]]],
        b"[[[]],[[1,[2,[3]]]],[],{},[{}],[[[[[]]]]],[null,[true,[false]]]]",
        "05b0002a0c434b7d5d2fa3b0b03a0265884c3fbe8b780d23ff543267dffd0fa4",
        id="nested_arrays",
    ),
    pytest.param(
        {"outer": {"b": [1, {"d": 4, "c": 3}], "a": {}}, "arr": [{"z": 0, "y": [True]}], "e": []},
        b'{"arr":[{"y":[true],"z":0}],"e":[],"outer":{"a":{},"b":[1,{"c":3,"d":4}]}}',
        "69d6b242bf84ae98cc449b504ff6f2e96fdd4fe0ffe1759d45fd911df9dd4aba",
        id="nested_objects_and_arrays",
    ),
    pytest.param(
        {},
        b"{}",
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
        id="empty_object",
    ),
    pytest.param(
        [],
        b"[]",
        "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945",
        id="empty_array",
    ),
    pytest.param(
        [True, False, None],
        b"[true,false,null]",
        "4d0f18de2133118249c26acc481838d4f6bb6bc1de882d99abbd19ae9397e8df",
        id="literals",
    ),
    pytest.param(
        'caf\u00e9 "quoted"\n',
        b'"caf\xc3\xa9 \\"quoted\\"\\n"',
        "e6b9bef4600dabac960a850cb1614b787bdc3f1b93f349a45289c1c5202ce960",
        id="top_level_string",
    ),
    pytest.param(
        # Integral floats print without ".0"; -0.0 prints as 0.
        [1.0, -1.0, 2.50, 100.0, 1e2, -0.0, 0.0, 0, -0.5],
        b"[1,-1,2.5,100,100,0,0,0,-0.5]",
        "700885da49e3e3c5d541a700d647f09b96eda122c02c7bbfbc52532e52dc1ecb",
        id="floats_integral_and_negative_zero",
    ),
    pytest.param(
        # ECMAScript switches to exponent form at >= 1e21 and < 1e-6; exponent has a sign.
        # (From 2^53 up to 1e21 a double is written as a bare integer: refused, below.)
        [1e21, 1e-7, 1e-6, 1.5e-7, -1e21, 1e23, 9007199254740991.0, -9007199254740991.0],
        b"[1e+21,1e-7,0.000001,1.5e-7,-1e+21,1e+23,9007199254740991,-9007199254740991]",
        # printf '%s' '[1e+21,...,-9007199254740991]' | sha256sum; node's JSON.stringify of
        # the same doubles prints the same text.
        "c0e8bb971d5ae686f05c4f65c9a369b565df800c6724a4f6568e623563be2b16",
        id="float_exponent_boundaries",
    ),
    pytest.param(
        # Shortest round-trip digits (several from RFC 8785 Appendix B).
        [
            0.30000000000000004,
            0.1,
            5e-324,
            1.7976931348623157e308,
            2.2250738585072014e-308,
            9.999999999999997e-7,
            333333333.3333332,
            9.999999999999997e22,
            0.0000010000000000000002,
        ],
        (
            b"[0.30000000000000004,0.1,5e-324,1.7976931348623157e+308,2.2250738585072014e-308,9.999"
            b"999999999997e-7,333333333.3333332,9.999999999999997e+22,0.0000010000000000000002]"
        ),
        "8ceaf6602ba533731a238008467bc2da0adbcce3d247ecab5094e0d2613177b1",
        id="float_precision_edges",
    ),
    pytest.param(
        [9007199254740991, -9007199254740991, 0, -1, 1000000, 2147483648, 4294967297],
        b"[9007199254740991,-9007199254740991,0,-1,1000000,2147483648,4294967297]",
        "b091a6672d2bd34b3f82f722d316316b2a568d01105d5c688b06f989ad229cd2",
        id="safe_integers",
    ),
]


@pytest.mark.parametrize(("value", "expected", "expected_sha256"), CANONICAL_VECTORS)
def test_canonical_json_golden_bytes(value: Any, expected: bytes, expected_sha256: str) -> None:
    out = canonical_json(value)
    assert isinstance(out, bytes)
    assert out == expected


@pytest.mark.parametrize(("value", "expected", "expected_sha256"), CANONICAL_VECTORS)
def test_canonical_json_golden_sha256(value: Any, expected: bytes, expected_sha256: str) -> None:
    assert hashlib.sha256(canonical_json(value)).hexdigest() == expected_sha256


@pytest.mark.parametrize(("value", "expected", "expected_sha256"), CANONICAL_VECTORS)
def test_golden_literals_are_self_consistent(
    value: Any, expected: bytes, expected_sha256: str
) -> None:
    # Guards against editing an expected text without its hash (or vice versa).
    assert hashlib.sha256(expected).hexdigest() == expected_sha256


# --------------------------------------------------------------------------------------
# approval_hash golden vectors. Expected hashes are sha256 over the JS-canonicalised
# envelope {"kind", "capability", "presentation", "tool": {"name", "arguments"}}.
# --------------------------------------------------------------------------------------

REFUND_ARGUMENTS = {
    "order_id": "A-1001",
    "amount": 120.5,
    "currency": "EUR",
    "customer": {"name": "Zo\u00eb \u00c5ngstr\u00f6m", "email": "zoe@example.com"},
    "line_items": [
        {"sku": "SKU-1", "qty": 2, "unit_price": 50.25},
        {"sku": "SKU-2", "qty": 1, "unit_price": 20.0},
    ],
    "reason": 'Damaged "in transit"\nsee ticket #42',
    "notify": True,
}

APPROVAL_VECTORS = [
    pytest.param(
        "tool_call",
        "payments.refund",
        {
            "title": "Refund order A-1001",
            "summary": "Refund \u20ac120.50 to Zo\u00eb \u00c5ngstr\u00f6m",
            "risk": "high",
            "fields": [["Amount", "120.50 EUR"], ["Items", 2]],
        },
        "payments.refund",
        REFUND_ARGUMENTS,
        (
            b'{"capability":"payments.refund","kind":"tool_call","presentation":{"fields":[["Amount'
            b'","120.50 EUR"],["Items",2]],"risk":"high","summary":"Refund \xe2\x82\xac120.50 to Zo'
            b'\xc3\xab \xc3\x85ngstr\xc3\xb6m","title":"Refund order A-1001"},"tool":{"arguments":{'
            b'"amount":120.5,"currency":"EUR","customer":{"email":"zoe@example.com","name":"Zo\xc3'
            b'\xab \xc3\x85ngstr\xc3\xb6m"},"line_items":[{"qty":2,"sku":"SKU-1","unit_price":50.25'
            b'},{"qty":1,"sku":"SKU-2","unit_price":20}],"notify":true,"order_id":"A-1001","reason"'
            b':"Damaged \\"in transit\\"\\nsee ticket #42"},"name":"payments.refund"}}'
        ),
        "8e53e3d0a2f6cec83460e8a22af318b67a6509b4ad36460d6eb2e10b94ae243e",
        id="payments_refund",
    ),
    pytest.param(
        "tool_call",
        "email.send",
        {"title": "Send email \U0001f4e7", "to": ["ops@example.com"]},
        "email.send",
        {
            "to": ["ops@example.com"],
            "cc": [],
            "subject": "R\u00e9sum\u00e9 \u2014 Q3",
            "body": "Line1\u2028Line2\tTabbed\r\n\U0001f680 \\o/",
            "headers": {"X-B": "2", "X-A": "1"},
        },
        (
            b'{"capability":"email.send","kind":"tool_call","presentation":{"title":"Send email '
            b'\xf0\x9f\x93\xa7","to":["ops@example.com"]},"tool":{"arguments":{"body":"Line1\xe2'
            b'\x80\xa8Line2\\tTabbed\\r\\n\xf0\x9f\x9a\x80 \\\\o/","cc":[],"headers":{"X-A":"1","X-'
            b'B":"2"},"subject":"R\xc3\xa9sum\xc3\xa9 \xe2\x80\x94 Q3","to":["ops@example.com"]},"n'
            b'ame":"email.send"}}'
        ),
        "0f617269781cd472242d5f2b64a100823fd03e6e3b0d3f457b675653acc9f064",
        id="email_send_unicode_body",
    ),
    pytest.param(
        "tool_call",
        "db.write",
        {},
        "db.delete_rows",
        {
            "table": "invoices",
            "where": {
                "id": [1, 2, 9007199254740991],
                "amount_gte": 1e21,
                "balance": -0.0,
                "ratio": 1.0,
                "archived": None,
                "active": False,
            },
            "limit": 100,
            "dry_run": False,
            "opts": {},
        },
        (
            b'{"capability":"db.write","kind":"tool_call","presentation":{},"tool":{"arguments":{"d'
            b'ry_run":false,"limit":100,"opts":{},"table":"invoices","where":{"active":false,"amoun'
            b't_gte":1e+21,"archived":null,"balance":0,"id":[1,2,9007199254740991],"ratio":1}},"nam'
            b'e":"db.delete_rows"}}'
        ),
        "7d772146c3f921e35697dc86c68c3581c90f56112140b50c5dd7ab5289f17daa",
        id="db_delete_numbers_and_empty",
    ),
    pytest.param(
        "approval",
        "misc",
        {"\ue000": "pua", "\U0001f600": "emoji"},
        "noop",
        {},
        (
            b'{"capability":"misc","kind":"approval","presentation":{"\xf0\x9f\x98\x80":"emoji","'
            b'\xee\x80\x80":"pua"},"tool":{"arguments":{},"name":"noop"}}'
        ),
        "7c08d36c9d82037d19904619f653999ba96021c0183f5378f0631a751268f6e9",
        id="empty_arguments_utf16_keys",
    ),
]

APPROVAL_ARGNAMES = (
    "kind",
    "capability",
    "presentation",
    "tool_name",
    "arguments",
    "expected_envelope",
    "expected_sha256",
)


@pytest.mark.parametrize(APPROVAL_ARGNAMES, APPROVAL_VECTORS)
def test_approval_hash_golden(
    kind: str,
    capability: str,
    presentation: dict[str, Any],
    tool_name: str,
    arguments: dict[str, Any],
    expected_envelope: bytes,
    expected_sha256: str,
) -> None:
    got = approval_hash(kind, capability, presentation, tool_name, arguments)
    assert re.fullmatch(r"[0-9a-f]{64}", got)
    assert got == expected_sha256


@pytest.mark.parametrize(APPROVAL_ARGNAMES, APPROVAL_VECTORS)
def test_approval_envelope_golden_bytes(
    kind: str,
    capability: str,
    presentation: dict[str, Any],
    tool_name: str,
    arguments: dict[str, Any],
    expected_envelope: bytes,
    expected_sha256: str,
) -> None:
    envelope = {
        "kind": kind,
        "capability": capability,
        "presentation": presentation,
        "tool": {"name": tool_name, "arguments": arguments},
    }
    assert canonical_json(envelope) == expected_envelope
    assert hashlib.sha256(expected_envelope).hexdigest() == expected_sha256


def _reversed_dicts(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _reversed_dicts(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reversed_dicts(v) for v in value]
    return value


@pytest.mark.parametrize(APPROVAL_ARGNAMES, APPROVAL_VECTORS)
def test_approval_hash_ignores_dict_insertion_order(
    kind: str,
    capability: str,
    presentation: dict[str, Any],
    tool_name: str,
    arguments: dict[str, Any],
    expected_envelope: bytes,
    expected_sha256: str,
) -> None:
    got = approval_hash(
        kind, capability, _reversed_dicts(presentation), tool_name, _reversed_dicts(arguments)
    )
    assert got == expected_sha256


def test_approval_hash_is_sensitive_to_every_field() -> None:
    base = ("tool_call", "payments.refund", {"t": "x"}, "payments.refund", {"amount": 120.5})
    seen = {approval_hash(*base)}
    variants = [
        ("tool_call2", *base[1:]),
        (base[0], "payments.refund2", *base[2:]),
        (*base[:2], {"t": "y"}, *base[3:]),
        (*base[:3], "payments.refund2", base[4]),
        (*base[:4], {"amount": 120.51}),
    ]
    for variant in variants:
        seen.add(approval_hash(*variant))
    assert len(seen) == 1 + len(variants)


# --------------------------------------------------------------------------------------
# Refusals
# --------------------------------------------------------------------------------------


def _nest_lists(depth: int, leaf: Any = 0) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def _nest_dicts(depth: int, leaf: Any = 0) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def _nest_mixed(depth: int) -> Any:
    value: Any = 0
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


class _Custom:
    pass


REFUSED = [
    pytest.param(float("nan"), id="nan"),
    pytest.param(float("inf"), id="inf"),
    pytest.param(float("-inf"), id="-inf"),
    pytest.param([1.0, float("nan")], id="nan_nested_in_list"),
    pytest.param({"a": {"b": float("inf")}}, id="inf_nested_in_dict"),
    pytest.param(2**53, id="int_2**53"),
    pytest.param(-(2**53), id="int_-(2**53)"),
    pytest.param(10**30, id="int_10**30"),
    pytest.param(-(10**30), id="int_-(10**30)"),
    pytest.param({"n": [2**53]}, id="int_2**53_nested"),
    # Doubles that JCS would write as bare integers beyond ±(2^53 - 1): sent back as written,
    # they would be the refused integers above.
    pytest.param(2.0**53, id="float_2**53"),
    pytest.param(1e16, id="float_1e16"),
    pytest.param(-1e20, id="float_-1e20"),
    pytest.param(999999999999999900000.0, id="float_just_below_1e21"),
    pytest.param({"amount": 123e18}, id="float_123e18_nested"),
    pytest.param("\ud800", id="lone_high_surrogate_value"),
    pytest.param("a\udfffb", id="lone_low_surrogate_inside_value"),
    pytest.param("\ud83d\ude00", id="surrogate_pair_as_two_code_points"),
    pytest.param(["ok", {"k": "\ud800"}], id="lone_surrogate_nested_value"),
    pytest.param({"\udfff": 1}, id="lone_surrogate_key"),
    pytest.param({"a": 1, "\udfff": 2}, id="lone_surrogate_key_among_others"),
    pytest.param({1: "x"}, id="int_key"),
    pytest.param({"a": 1, 2: "x"}, id="int_key_among_str_keys"),
    pytest.param({None: "x"}, id="none_key"),
    pytest.param({True: "x"}, id="bool_key"),
    pytest.param({1.5: "x"}, id="float_key"),
    pytest.param({("a",): "x"}, id="tuple_key"),
    pytest.param({"ok": {2: "x"}}, id="int_key_nested"),
    pytest.param(_nest_lists(65), id="nested_65_lists"),
    pytest.param(_nest_lists(64, []), id="nested_65_lists_innermost_empty"),
    pytest.param(_nest_dicts(65), id="nested_65_dicts"),
    pytest.param(_nest_dicts(64, {}), id="nested_65_dicts_innermost_empty"),
    pytest.param(_nest_mixed(65), id="nested_65_mixed"),
    pytest.param(_nest_lists(1000), id="nested_1000_lists"),
    pytest.param((1, 2), id="tuple"),
    pytest.param(["x", (1,)], id="tuple_nested"),
    pytest.param({1, 2}, id="set"),
    pytest.param(frozenset({1}), id="frozenset"),
    pytest.param(b"x", id="bytes"),
    pytest.param(bytearray(b"x"), id="bytearray"),
    pytest.param(decimal.Decimal(1), id="decimal"),
    pytest.param({"amount": decimal.Decimal("120.5")}, id="decimal_nested"),
    pytest.param(datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC), id="datetime"),
    pytest.param(datetime.date(2024, 1, 1), id="date"),
    pytest.param(_Custom(), id="custom_object"),
    pytest.param(1j, id="complex"),
]


@pytest.mark.parametrize("value", REFUSED)
def test_canonical_json_refuses(value: Any) -> None:
    with pytest.raises(NotCanonical):
        canonical_json(value)


@pytest.mark.parametrize("value", REFUSED)
def test_check_canonical_refuses_what_canonical_json_refuses(value: Any) -> None:
    # A create body is checked whole with check_canonical and hashed in part, so the two
    # must refuse the same things (test_properties_create_body.py compares them on generated
    # values).
    with pytest.raises(NotCanonical):
        check_canonical(value)


def test_not_canonical_is_a_signoff_error() -> None:
    assert issubclass(NotCanonical, SignoffError)


def test_max_depth_is_64() -> None:
    assert MAX_DEPTH == 64


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(_nest_lists(64), b"[" * 64 + b"0" + b"]" * 64, id="64_lists"),
        pytest.param(_nest_lists(63, []), b"[" * 64 + b"]" * 64, id="64_lists_innermost_empty"),
        pytest.param(_nest_dicts(64), b'{"a":' * 64 + b"0" + b"}" * 64, id="64_dicts"),
        pytest.param(
            _nest_dicts(63, {}), b'{"a":' * 63 + b"{}" + b"}" * 63, id="64_dicts_innermost_empty"
        ),
        pytest.param(
            _nest_mixed(64), b'[{"a":' * 32 + b"0" + b"}]" * 32, id="64_mixed_lists_dicts"
        ),
    ],
)
def test_canonical_json_accepts_exactly_max_depth(value: Any, expected: bytes) -> None:
    assert canonical_json(value) == expected


@pytest.mark.parametrize(
    ("presentation", "arguments"),
    [
        pytest.param({}, {"amount": float("nan")}, id="nan_in_arguments"),
        pytest.param({}, {"amount": [float("inf")]}, id="inf_nested_in_arguments"),
        pytest.param({}, {"id": 2**53}, id="unsafe_int_in_arguments"),
        pytest.param({1: "x"}, {}, id="int_key_in_presentation"),
        pytest.param({"t": "\ud800"}, {}, id="lone_surrogate_in_presentation"),
        pytest.param({}, {"when": datetime.date(2024, 1, 1)}, id="date_in_arguments"),
    ],
)
def test_approval_hash_propagates_not_canonical(
    presentation: dict[Any, Any], arguments: dict[str, Any]
) -> None:
    with pytest.raises(NotCanonical):
        approval_hash("tool_call", "payments.refund", presentation, "payments.refund", arguments)


def test_the_worked_example_in_docs_hashing_md() -> None:
    """docs/hashing.md promises this value for examples/refund-request.json (checked there
    against the JavaScript canonicalize package); keep the two in step."""
    root = Path(__file__).resolve().parents[2]
    body = json.loads((root / "examples" / "refund-request.json").read_text(encoding="utf-8"))
    expected = "b7251afae0c624b26f7ffa39f29987d46301c342c9e05c529e98bb37c2c046ca"
    assert expected in (root / "docs" / "hashing.md").read_text(encoding="utf-8")
    tool = body["tool"]
    got = approval_hash(
        "tool_call", body["capability"], body["presentation"], tool["name"], tool["arguments"]
    )
    assert got == expected
