"""Teaches Schemathesis what the OpenAPI document cannot say with a schema.

Loaded through SCHEMATHESIS_HOOKS by Reliability/contract.py:
- `format: cursor`: a real list cursor is base64url (no padding) of `<RFC 3339 time with ms>|<UUID>`; any
  other string is 400 by contract, so schema-valid cursors must be drawn from that shape.
- tus bodies (`application/offset+octet-stream`) are raw bytes.
- media bodies: the server checks the bytes' signature (magic bytes) against the declared type (415 when they
  differ), so a schema-valid upload starts with its type's signature.
"""

import base64

import schemathesis
from hypothesis import strategies as st

HEX = "0123456789abcdef"


@st.composite
def _cursor(draw):
    year = draw(st.integers(2000, 2099))
    month = draw(st.integers(1, 12))
    day = draw(st.integers(1, 28))
    hour, minute, second = draw(st.integers(0, 23)), draw(st.integers(0, 59)), draw(st.integers(0, 59))
    millis = draw(st.integers(0, 999))
    stamp = f"{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{millis:03}Z"
    digits = draw(st.text(alphabet=HEX, min_size=32, max_size=32))
    uuid = f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"
    return base64.urlsafe_b64encode(f"{stamp}|{uuid}".encode()).decode().rstrip("=")


schemathesis.openapi.format("cursor", _cursor())

# The first bytes each accepted type must start with (Sources/HeraldCore/MediaType.swift).
SIGNATURES = {
    "image/jpeg": [b"\xff\xd8\xff\xe0"],
    "image/png": [b"\x89PNG\r\n\x1a\n"],
    "image/gif": [b"GIF87a", b"GIF89a"],
    "image/webp": [b"RIFF\x10\x00\x00\x00WEBP"],
    "video/mp4": [b"\x00\x00\x00\x18ftypisom", b"\x00\x00\x00\x20ftypmp42"],
    "video/quicktime": [b"\x00\x00\x00\x14ftypqt  ", b"\x00\x00\x00\x08moov"],
    "video/webm": [b"\x1a\x45\xdf\xa3"],
}

for media_type, prefixes in SIGNATURES.items():
    body = st.tuples(st.sampled_from(prefixes), st.binary(min_size=0, max_size=256)).map(lambda pair: pair[0] + pair[1])
    schemathesis.openapi.media_type(media_type, body)

# tus bodies (`/v1/uploads`): raw bytes, a piece of an upload.
schemathesis.openapi.media_type("application/offset+octet-stream", st.binary(min_size=0, max_size=256))


@schemathesis.hook
def filter_failure(ctx, failure, case, response):
    """Drops one false "schema-violating request accepted": a number, boolean or null drawn for a string field of a form.

    A multipart form carries every field as text, so `text=-1.5` is the string "-1.5" and a null the string "null",
    both valid for a string field;
    Schemathesis' fuzzing phase still counts it as a type violation (its coverage phase already knows better).
    Only failures whose every violation is of that kind are dropped.
    """
    media_type = (getattr(case, "media_type", None) or "").lower()
    if failure.code != "ST201" or not media_type.startswith("multipart/form-data"):
        return True
    violations = [line for line in failure.message.splitlines() if "violates" in line]
    textual = ("became number", "became integer", "became boolean", "became null")
    only_textual = all("violates `type`" in line and "was string" in line and any(t in line for t in textual) for line in violations)
    return not (violations and only_textual)


@schemathesis.hook("filter_failure")
def cancel_is_not_a_delete(ctx, failure, case, response):
    """`DELETE /v1/jobs/{id}` cancels (the contract makes it the same as `POST /v1/jobs/{id}/cancel`): the job stays
    readable as `cancelled`, so reading it afterwards is no use after free. Other deletes keep the check."""
    return not (failure.code == "ST301" and failure.free.startswith("DELETE /v1/jobs/"))
