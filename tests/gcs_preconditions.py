"""The generation preconditions GCS checks on a write, for the fault proxy (tests/gcs_faults.py).

fake-gcs-server ignores `ifGenerationMatch` on media uploads, so a conditional write retried
after its reply was lost lands a second time where GCS answers 412. The proxy checks the
JSON API's `ifGenerationMatch` (0: the object must not exist) and `ifMetagenerationMatch`
itself, against the object's metadata, before it forwards a write that carries them:

- uploads (media, multipart, and resumable: at the session's start and at its last chunk),
  where a missing object fails any condition but `ifGenerationMatch=0`;
- metadata patches and updates, and deletes, where a missing object is left to the
  server's 404, as GCS answers.
"""

import dataclasses
import json
import re
from urllib.parse import parse_qs, unquote, urlsplit

CONDITIONS = {"ifGenerationMatch": "generation", "ifMetagenerationMatch": "metageneration"}
_UPLOAD = re.compile(r"/upload/storage/v1/b/([^/]+)/o/?")
_OBJECT = re.compile(r"/storage/v1/b/([^/]+)/o/([^/]+)")
_LAST_CHUNK = re.compile(r"bytes (\d+-\d+|\*)/(\d+)")


@dataclasses.dataclass(frozen=True)
class Write:
    """A write under preconditions: its object and the conditions, by query name."""

    bucket: str
    name: str
    conditions: dict[str, str]
    upload: bool  # it creates or replaces the object (an upload or a resumable session)

    def failure(self, current: dict | None) -> str | None:
        """Why the write fails against the object's `current` metadata (None: absent), or
        None when it may go ahead."""
        if current is None:
            if not self.upload or self.conditions == {"ifGenerationMatch": "0"}:
                return None
            return "the object does not exist"
        for condition, field in CONDITIONS.items():
            want = self.conditions.get(condition)
            if want is not None and str(current.get(field)) != want:
                return f"{condition}={want} but the object's {field} is {current.get(field)}"
        return None


def conditional_write(method: str, url: str, content_type: str, body: bytes) -> Write | None:
    """The conditional write that `method url` is, or None (a read, or no conditions)."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    conditions = {name: query[name][0] for name in CONDITIONS if name in query}
    if not conditions:
        return None
    upload = _UPLOAD.fullmatch(parts.path)
    if upload and method == "POST":
        name = query.get("name", [""])[0] or _name_in_metadata(content_type, body)
        return Write(upload[1], name, conditions, upload=True) if name else None
    target = _OBJECT.fullmatch(parts.path)
    if target and method in ("PATCH", "PUT", "DELETE"):
        return Write(target[1], unquote(target[2]), conditions, upload=False)
    return None


def is_resumable_start(method: str, url: str) -> bool:
    """Whether `method url` opens a resumable session (its chunks' URLs carry the same
    uploadType, with an upload_id)."""
    query = parse_qs(urlsplit(url).query)
    opening = method == "POST" and "upload_id" not in query
    return opening and query.get("uploadType") == ["resumable"]


def session_key(url: str) -> str:
    """What names a resumable session in its start's Location and in its chunks' URLs."""
    parts = urlsplit(url)
    upload_id = parse_qs(parts.query).get("upload_id")
    return upload_id[0] if upload_id else parts.path


def is_last_chunk(content_range: str) -> bool:
    """Whether a chunk with this Content-Range completes its session (the total is known)."""
    return _LAST_CHUNK.fullmatch(content_range.strip()) is not None


def _name_in_metadata(content_type: str, body: bytes) -> str:
    """The object name in a multipart upload's JSON part or a resumable start's JSON body."""
    if not content_type.startswith(("multipart/related", "application/json")):
        return ""
    start = body.find(b"{")
    if start < 0:
        return ""
    try:
        metadata, _ = json.JSONDecoder().raw_decode(
            body[start : start + 65536].decode("utf-8", "replace")
        )
    except ValueError:
        return ""
    return metadata.get("name", "") if isinstance(metadata, dict) else ""
