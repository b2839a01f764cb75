#!/usr/bin/env python3
"""Writes the seed corpus fuzz/corpus/ for fuzz/FuzzParsing.swift (deterministic; re-run after editing).

Each seed starts with the byte that picks the harness's entry point:
  0 raw JSON, 1 SET from `header 0x00 payload` JSON (payload only: under a valid header), 2 ID token from
  parts, 3 SET compact text, 4 ID token compact text, 5 base64 / JWS framing / token identifiers,
  6 SET parts under a framing-flags byte.
Names say what the seed is: `ok` seeds are accepted by the parser, `bad` ones refused (check with
RISC_FUZZ_VERBOSE=1 .build/fuzz/fuzz-parsing fuzz/corpus/*). Signatures are placeholders: the parser
checks none.
"""

import base64
import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")

JSON, SET, IDT, SET_COMPACT, IDT_COMPACT, B64, SET_FRAMING, SUBSCRIBER_URL = range(8)
GOOGLE = "https://accounts.google.com/"
NOW = 1_700_000_000
RISC = "https://schemas.openid.net/secevent/risc/event-type/"
OAUTH = "https://schemas.openid.net/secevent/oauth/event-type/"
CAEP = "https://schemas.openid.net/secevent/caep/event-type/"
SSF = "https://schemas.openid.net/secevent/ssf/event-type/"
HEADER = {"alg": "RS256", "kid": "key-1", "typ": "secevent+jwt"}
HASH = base64.b64encode(bytes(range(64))).decode()  # 64 bytes: the size of a SHA-512 digest

seeds = {}


def dumps(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def add(name, mode, body):
    assert name not in seeds, name
    seeds[name] = bytes([mode]) + body


def claims(events, **changes):
    value = {"iss": GOOGLE, "aud": "a", "iat": NOW - 60, "jti": "756E69717565206964656E746966696572",
             "events": events}
    value.update(changes)
    return {k: v for k, v in value.items() if v is not None}


def legacy(kind="iss-sub", iss=GOOGLE, sub="7375626A656374", **extra):
    return {"subject": dict({"subject_type": kind, "iss": iss, "sub": sub}, **extra)}


def set_parts(payload, header=None):
    if header is None:
        return dumps(payload)
    return dumps(header) + b"\x00" + dumps(payload)


def compact(header, payload, signature=b"c2lnbmF0dXJl"):
    return b64url(dumps(header)) + b"." + b64url(dumps(payload)) + b"." + signature


# --- SETs of every event type, legacy `subject` form and Shared Signals `sub_id` form -------------
user_events = {
    "sessions-revoked": RISC + "sessions-revoked",
    "tokens-revoked": OAUTH + "tokens-revoked",
    "account-disabled": RISC + "account-disabled",
    "account-enabled": RISC + "account-enabled",
    "credential-change-required": RISC + "account-credential-change-required",
    "caep-session-revoked": CAEP + "session-revoked",
    "caep-credential-change": CAEP + "credential-change",
}
for short, uri in user_events.items():
    add(f"set-ok-{short}-legacy", SET, set_parts(claims({uri: legacy()})))
    add(f"set-ok-{short}-ssf", SET, set_parts(claims(
        {uri: {}}, sub_id={"format": "iss_sub", "iss": "https://accounts.google.com", "sub": "7375626A656374"})))
add("set-ok-account-disabled-hijacking", SET, set_parts(claims({RISC + "account-disabled": dict(legacy(), reason="hijacking")})))
add("set-ok-account-disabled-bulk", SET, set_parts(claims({RISC + "account-disabled": dict(legacy(), reason="bulk-account")})))
add("set-ok-id-token-claims", SET, set_parts(claims(
    {RISC + "sessions-revoked": legacy("id_token_claims", iss="accounts.google.com", email="u@example.com")})))
add("set-ok-event-subject-ssf-format", SET, set_parts(claims(
    {CAEP + "session-revoked": {"subject": {"format": "iss_sub", "iss": GOOGLE, "sub": "42"}}})))
add("set-ok-token-revoked-prefix", SET, set_parts(claims({OAUTH + "token-revoked": {"subject": {
    "subject_type": "oauth_token", "token_type": "refresh_token", "token_identifier_alg": "prefix",
    "token": "1/fFAGRNJru1FTz7"}}})))
add("set-ok-token-revoked-hash", SET, set_parts(claims({OAUTH + "token-revoked": {"subject": {
    "subject_type": "oauth_token", "token_type": "refresh_token", "token_identifier_alg": "hash_base64_sha512_sha512",
    "token": HASH.rstrip("=").replace("+", "-").replace("/", "_")}}}, aud=["b", "a"])))
add("set-ok-token-revoked-access-token", SET, set_parts(claims({OAUTH + "token-revoked": {"subject": {
    "subject_type": "oauth_token", "token_type": "access_token", "token_identifier_alg": "prefix",
    "token": "ya29.a0AfH6SMBx1"}}})))
add("set-ok-verification", SET, set_parts(claims({RISC + "verification": {"state": "c3RhdGU="}})))
add("set-ok-ssf-verification", SET, set_parts(claims({SSF + "verification": {"state": "s"}})))
add("set-ok-unknown-type", SET, set_parts(claims({"https://example.com/event/other": legacy()})))
add("set-ok-several-events", SET, set_parts(claims({
    RISC + "account-enabled": legacy(), RISC + "account-disabled": dict(legacy(), reason="hijacking"),
    "urn:x": {}})))
add("set-ok-email-subject", SET, set_parts(claims({CAEP + "credential-change": {}}, sub_id={"format": "email", "email": "u@example.com"})))
add("set-ok-opaque-subject", SET, set_parts(claims({CAEP + "session-revoked": {}}, sub_id={"format": "opaque", "id": "x"})))
add("set-ok-other-issuer-subject", SET, set_parts(claims({RISC + "sessions-revoked": legacy(iss="https://evil.example")})))
add("set-ok-explicit-header", SET, set_parts(claims({RISC + "sessions-revoked": legacy()}),
                                             {"alg": "RS256", "kid": "k", "typ": "JWT", "x": [1, {"y": None}]}))
add("set-ok-unicode-claims", SET, set_parts(claims({RISC + "sessions-revoked": legacy(sub="s\u00e9\U0001F600\u2028")},
                                                    jti="\u00e9t\u00e9", aud=["\u00e9", "a"])))
add("set-ok-number-edge-iat", SET, set_parts(claims({RISC + "sessions-revoked": legacy()}, iat=-0.0)))

# --- SETs the parser refuses ------------------------------------------------------------------------------
ok = {RISC + "sessions-revoked": legacy()}
add("set-bad-alg-none", SET, set_parts(claims(ok), {"alg": "none", "kid": "k"}))
add("set-bad-alg-hs256", SET, set_parts(claims(ok), {"alg": "HS256", "kid": "k"}))
add("set-bad-no-kid", SET, set_parts(claims(ok), {"alg": "RS256"}))
add("set-bad-typ", SET, set_parts(claims(ok), {"alg": "RS256", "kid": "k", "typ": "at+jwt"}))
add("set-bad-crit", SET, set_parts(claims(ok), {"alg": "RS256", "kid": "k", "crit": ["exp"]}))
add("set-bad-header-array", SET, b"[]\x00" + dumps(claims(ok)))
add("set-bad-iat-future", SET, set_parts(claims(ok, iat=NOW + 3600)))
add("set-bad-iat-string", SET, set_parts(claims(ok, iat="1700000000")))
add("set-bad-no-jti", SET, set_parts(claims(ok, jti=None)))
add("set-bad-empty-jti", SET, set_parts(claims(ok, jti="")))
add("set-bad-events-empty", SET, set_parts(claims({})))
add("set-bad-events-array", SET, set_parts(claims([ok])))
add("set-bad-event-not-object", SET, set_parts(claims({RISC + "sessions-revoked": "x"})))
add("set-bad-long-iss", SET, set_parts(claims(ok, iss="https://" + "i" * 300)))
add("set-bad-long-sub", SET, set_parts(claims({RISC + "sessions-revoked": legacy(sub="s" * 300)})))
add("set-bad-payload-nul", SET, b'{"iss":"a\\u0000","iat":1,"jti":"j","events":{"x":{}}}')
add("set-bad-payload-lone-surrogate", SET, b'{"iss":"\\ud800","iat":1,"jti":"j","events":{"x":{}}}')
add("set-bad-payload-duplicate-jti", SET, b'{"iss":"i","iat":1,"jti":"j","jti":"k","events":{"x":{}}}')

# --- SETs as compact text, and framing variants --------------------------------------------------------
add("set-compact-ok", SET_COMPACT, compact(HEADER, claims(ok)))
add("set-compact-bad-empty-signature", SET_COMPACT, compact(HEADER, claims(ok), b""))
add("set-compact-bad-alg-none-unsecured", SET_COMPACT, compact({"alg": "none"}, claims(ok), b""))
add("set-compact-bad-empty-payload", SET_COMPACT, b64url(dumps(HEADER)) + b"..c2ln")
add("set-compact-bad-two-segments", SET_COMPACT, b64url(dumps(HEADER)) + b".e30")
add("set-compact-bad-five-segments", SET_COMPACT, b"eyJhbGciOiJSU0EtT0FFUCJ9.a.b.c.d")
add("set-compact-bad-padding", SET_COMPACT, b64url(dumps(HEADER)) + b"=.e30.c2ln")
add("set-compact-bad-invalid-utf8", SET_COMPACT, b"\xff\xfe.\xc0\xaf.c2ln")
for flags in (0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40):
    add(f"set-framing-{flags:02x}", SET_FRAMING, bytes([flags]) + set_parts(claims(ok)))

# --- Google ID tokens -------------------------------------------------------------------------------------
idt = {"iss": "https://accounts.google.com", "azp": "a", "aud": "a", "sub": "110169484474386276334",
       "email": "u@example.com", "email_verified": True, "hd": "example.com", "name": "U", "picture": "https://p",
       "iat": NOW - 60, "exp": NOW + 3540}
id_header = {"alg": "RS256", "kid": "k", "typ": "JWT"}
add("idt-ok", IDT, dumps(id_header) + b"\x00" + dumps(idt))
add("idt-ok-payload-only", IDT, dumps(idt))
add("idt-ok-aud-array-email-verified-string", IDT, dumps(dict(idt, aud=["x", "a"], email_verified="true", hd=None)))
add("idt-bad-expired", IDT, dumps(dict(idt, exp=NOW - 120)))
add("idt-bad-nbf-future", IDT, dumps(dict(idt, nbf=NOW + 600)))
add("idt-bad-no-iat", IDT, dumps({k: v for k, v in idt.items() if k != "iat"}))
add("idt-bad-aud", IDT, dumps(dict(idt, aud="b")))
add("idt-bad-empty-sub", IDT, dumps(dict(idt, sub="")))
add("idt-bad-alg-none", IDT, dumps({"alg": "none", "kid": "k"}) + b"\x00" + dumps(idt))
add("idt-compact-ok", IDT_COMPACT, compact(id_header, idt))
add("idt-compact-bad-empty-signature", IDT_COMPACT, compact(id_header, idt, b""))

# --- JSON edge cases -------------------------------------------------------------------------------------
json_seeds = {
    "json-ok-object": b' {"a": [1, -2.5e3, true, false, null, "x"], "b": {}} ',
    "json-ok-escapes": b'"a\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u00e9\\u2603\\ud83d\\ude00\\u001f"',
    "json-ok-utf8": '"\u00fcn\u00efc\u00f8d\u00e9 \u2028 \U0001F600 \x7f"'.encode(),
    "json-ok-numbers": b"[0,-0,-0.0,1e308,-1e-400,1E+2,0.1,123456789012345678901234567890,9007199254740993,1e15,999999999999999.9]",
    "json-ok-nfc-nfd-values": '["\u00e9","e\u0301"]'.encode(),
    "json-ok-depth-64": b"[" * 64 + b"]" * 64,
    "json-ok-whitespace": b" \t\r\n[ \t\r\n1 \t\r\n, {\"k\" : \"v\" } ] \n",
    "json-ok-empty-key": b'{"":""}',
    "json-bad-depth-65": b"[" * 65 + b"]" * 65,
    "json-bad-depth-objects": b'{"a":' * 70 + b"1" + b"}" * 70,
    "json-bad-duplicate-keys": b'{"a":1,"a":2}',
    "json-bad-nfc-nfd-duplicate-keys": '{"\u00e9":1,"e\u0301":2}'.encode(),
    "json-bad-lone-high-surrogate": b'"\\ud800"',
    "json-bad-lone-low-surrogate": b'"\\udc00x"',
    "json-bad-reversed-surrogates": b'"\\udc00\\ud800"',
    "json-bad-escaped-nul": b'"a\\u0000b"',
    "json-bad-raw-nul": b'"a\x00b"',
    "json-bad-raw-control": b'"a\x01b"',
    "json-bad-1e309": b"1e309",
    "json-bad-minus-1e999": b"[-1e999]",
    "json-bad-invalid-utf8": b'"\xff"',
    "json-bad-overlong-utf8": b'"\xc0\xaf"',
    "json-bad-utf8-surrogate": b'"\xed\xa0\x80"',
    "json-bad-truncated-utf8": b'"\xe2\x82"',
    "json-bad-bom": b'\xef\xbb\xbf{}',
    "json-bad-empty": b"",
    "json-bad-trailing-comma": b'{"a":1,}',
    "json-bad-leading-zero": b"01",
    "json-bad-bare-dot": b"[1.]",
    "json-bad-nan": b"NaN",
    "json-bad-single-quotes": b"{'a':1}",
    "json-bad-trailing-garbage": b"[1] x",
    "json-bad-unterminated": b'{"a":"b',
    "json-bad-short-unicode-escape": b'"\\u12"',
}
for name, body in json_seeds.items():
    add(name, JSON, body)
# Objects in JSON mode are also decoded as event bodies (the type is picked by the input's length).
add("json-event-body-legacy", JSON, dumps(dict(legacy(), reason="hijacking", state="s")))
add("json-event-body-sub-id", JSON, dumps({"sub_id": {"format": "iss_sub", "iss": "accounts.google.com", "sub": "1"},
                                           "aud": ["a", "b"]}))
add("json-event-body-oauth-hash", JSON, dumps({"subject": {
    "subject_type": "oauth_token", "token_identifier_alg": "hash_base64_sha512_sha512", "token": HASH}}))
add("json-event-body-unrecognized", JSON, dumps({"subject": {"format": "phone_number", "phone_number": "+1"}}))

# --- base64, JWS framing, token identifiers ----------------------------------------------------------------
b64_seeds = {
    "b64-padded": b"YWJjZA==",
    "b64-unpadded-url": b"-_-_YWI",
    "b64-standard": b"+/+/YWI=",
    "b64-bad-inner-padding": b"YW=JjZA",
    "b64-bad-length": b"YWJjZ",
    "b64-bad-three-pads": b"YQ===",
    "b64-hash-identifier": HASH.encode(),
    "b64-prefix-identifier": b"1/fFAGRNJru1FTz7",
    "b64-compact-jws": compact(HEADER, {"a": 1}),
    "b64-compact-jws-empty-signature": compact(HEADER, {"a": 1}, b""),
}
for name, body in b64_seeds.items():
    add(name, B64, body)

# --- where a subscriber may point: addresses in every spelling -------------------------------------------------
url_seeds = {
    "url-metadata": b"https://169.254.169.254/latest/meta-data",
    "url-decimal": b"https://2852039166/",
    "url-hex": b"0xa9fea9fe",
    "url-octal": b"0251.0376.0251.0376",
    "url-short": b"169.254.43518",
    "url-mapped": b"https://[::ffff:169.254.169.254]/",
    "url-nat64": b"64:ff9b::a9fe:a9fe",
    "url-zone": b"fe80::1%eth0",
    "url-space": b"https://127.0.0.1%20x/",
    "url-private": b"https://10.0.0.7:8443/hook?x=1",
    "url-name": b"https://user:pw@metadata.google.internal./",
}
for name, body in url_seeds.items():
    add(name, SUBSCRIBER_URL, body)

if __name__ == "__main__":
    shutil.rmtree(CORPUS, ignore_errors=True)
    os.makedirs(CORPUS)
    for name, data in sorted(seeds.items()):
        with open(os.path.join(CORPUS, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds)} seeds to {CORPUS}")
