"""The job link's messages: what each one may hold, how it is signed, how a received one is
checked before anything acts on it.

A message is two ZeroMQ frames, `[signature, body]`, as in Jupyter's wire protocol
(jupyter_client/session.py): `body` is one JSON object, `signature` the hex HMAC-SHA256 of
`body` under the job key (empty when the job has no key: the channel is then unauthenticated).
The signature is checked first (constant time), the JSON parsed only then, and the object
checked against the table of its op: every field present, of its type, within its range, and
nothing else. Every body carries its sender's session (`sid`, random per launcher) and a
counter (`seq`) that only grows; every body after the greeting names the receiver's session
(`to`): a message recorded from one launcher is refused when replayed to it (its counter is not
new) and when replayed to another launcher or a later job (`to` names another session).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from typing import Any, Callable, Dict, Optional, Tuple

from platform_plugin.launcher.servers.identity import RESUME_STEP, STEP_TEXT

MAX_MESSAGE = 64 * 1024  # ZMQ_MAXMSGSIZE: a larger frame closes the sender's connection
MAX_NODES = 4096
MAX_ATTEMPT = 100_000
MAX_TEXT = 4096
MAX_IDENTITY_KEYS = 16
PROTOCOL = 2

Check = Callable[[Any], bool]


def _text(limit: int) -> Check:
    return lambda v: isinstance(v, str) and len(v) <= limit


def _count(high: int) -> Check:
    return lambda v: type(v) is int and 0 <= v <= high


def _session(v: Any) -> bool:
    return isinstance(v, str) and 16 <= len(v) <= 64 and all(c in "0123456789abcdef" for c in v)


def _identity(v: Any) -> bool:
    """Node 0's job identity: a flat str -> str dict, keys `[a-z_]{1,32}`; a resume step
    (launcher/resume.py) is 1 to 10 ASCII digits, as a checkpoint folder's name has."""
    return (isinstance(v, dict) and len(v) <= MAX_IDENTITY_KEYS
            and all(isinstance(k, str) and 1 <= len(k) <= 32
                    and all("a" <= c <= "z" or c == "_" for c in k)
                    and isinstance(x, str) and len(x) <= MAX_TEXT for k, x in v.items())
            and (RESUME_STEP not in v or STEP_TEXT.fullmatch(v[RESUME_STEP]) is not None))


def _servers(v: Any) -> bool:
    return isinstance(v, list) and len(v) <= MAX_NODES and all(_text(256)(s) for s in v)


_COMMON: Dict[str, Check] = {"op": _text(16), "sid": _session, "seq": _count(2 ** 62)}
_ADDRESSED: Dict[str, Check] = {**_COMMON, "to": _session}

# op -> its fields, one table per direction (node 0 never takes "go", the others never "join")
TO_NODE_0: Dict[str, Dict[str, Check]] = {
    "hello": {**_COMMON, "protocol": _count(1000)},
    "join": {**_ADDRESSED, "node": _count(MAX_NODES), "server": _text(256),
             "attempt": _count(MAX_ATTEMPT), "nnodes": _count(MAX_NODES)},
    "failed": {**_ADDRESSED, "server": _text(256), "reason": _text(MAX_TEXT),
               "attempt": _count(MAX_ATTEMPT)},
    "ended": {**_ADDRESSED, "attempt": _count(MAX_ATTEMPT), "ok": lambda v: type(v) is bool,
              "server": _text(256)},
    "ping": _ADDRESSED,
    "bye": _ADDRESSED,
}
FROM_NODE_0: Dict[str, Dict[str, Check]] = {
    "welcome": {**_ADDRESSED, "protocol": _count(1000)},
    "go": {**_ADDRESSED, "attempt": _count(MAX_ATTEMPT), "identity": _identity},
    "stop": {**_ADDRESSED, "server": _text(256), "reason": _text(MAX_TEXT),
             "attempt": _count(MAX_ATTEMPT)},
    "refused": {**_ADDRESSED, "reason": _text(MAX_TEXT)},
    "outcome": {**_ADDRESSED, "attempt": _count(MAX_ATTEMPT), "failed": _servers},
    "ping": _ADDRESSED,
    "bye": _ADDRESSED,
}


def valid_identity(identity: Any) -> bool:
    """What `agree` may send in "go" (the same rule the receiving side applies)."""
    return _identity(identity)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class Wire:
    """One launcher's end of the link: its session, its counter, the job key."""

    def __init__(self, key: Optional[bytes]):
        self.key = key
        self.sid = secrets.token_hex(16)
        self.seq = 0

    def pack(self, op: str, to: str | None = None, **fields: Any) -> list[bytes]:
        """The frames of a new message (a fresh counter value each time)."""
        self.seq += 1
        body = {"op": op, "sid": self.sid, "seq": self.seq, **fields}
        if to is not None:
            body["to"] = to
        data = json.dumps(body, separators=(",", ":")).encode()
        return [self._sign(data), data]

    def _sign(self, data: bytes) -> bytes:
        if self.key is None:
            return b""
        return hmac.new(self.key, data, hashlib.sha256).hexdigest().encode()

    def unpack(self, frames: list[bytes], table: Dict[str, Dict[str, Check]]
               ) -> Tuple[Optional[dict], str]:
        """(the checked message, "") or (None, why it is refused). Never raises."""
        if len(frames) != 2:
            return None, f"{len(frames)} frames, not 2"
        signature, data = frames
        if not hmac.compare_digest(signature, self._sign(data)):
            return None, "bad signature (another job key, or none)"
        try:
            message = json.loads(data, parse_constant=_refuse_constant)
        except (ValueError, RecursionError):  # not UTF-8 / not JSON / nested too deep
            return None, "not a JSON object"
        if not isinstance(message, dict):
            return None, "not a JSON object"
        op = message.get("op")
        fields = table.get(op) if isinstance(op, str) else None
        if fields is None:
            return None, f"unknown op {str(message.get('op'))[:20]!r}"
        if set(message) != set(fields):
            return None, f"{message['op']}: fields {sorted(message)[:12]} are not {sorted(fields)}"
        bad = [name for name, check in fields.items() if not check(message[name])]
        if bad:
            return None, f"{message['op']}: bad {', '.join(bad)}"
        if "to" in message and message["to"] != self.sid:
            return None, f"replayed: {message['op']} meant for another session"
        return message, ""


class Counters:
    """The last counter seen of each sender session: a message whose counter is not new was
    seen before (a replay). Sessions are kept for the life of the link (a session forgotten
    would take its own messages again), up to MAX_SESSIONS: only a message whose signature
    held adds one, so with a job key only the job's launchers do."""

    MAX_SESSIONS = 10_000

    def __init__(self) -> None:
        self.last: Dict[str, int] = {}

    def fresh(self, message: dict) -> bool:
        sid, seq = message["sid"], message["seq"]
        if seq <= self.last.get(sid, 0):
            return False
        if sid not in self.last and len(self.last) >= self.MAX_SESSIONS:
            del self.last[next(iter(self.last))]  # the oldest session
        self.last[sid] = seq
        return True
