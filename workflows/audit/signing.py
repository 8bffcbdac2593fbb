"""The Ed25519 signing key set (docs/explanation/trust-core.md#keyed-audit, reused for approval proofs,
docs/explanation/approval-proofs.md#approval-proof): it signs audit checkpoints, and its public half is published at
`/.well-known/jwks.json`. Keys never live in the database.

The set is a JSON file, `SIGNING_KEYS_FILE`:

    {"current": KID, "keys": [{"kid", "x", "d"?, "created", "retired"}]}

`x` and `d` are the raw public and private keys, base64url without padding.
`signing_key --new` adds a key and makes it current; `--retire KID` drops
its private half at once, so nothing is signed with it again, and the key
stays published for `SIGNING_KEY_OVERLAP_HOURS`. A retired key's public
half stays in the file after that, so that checkpoints it signed can still
be verified here. With `DEBUG=1` and no `SIGNING_KEYS_FILE`, a set is
generated once into `VAR_DIR/signing-keys.json`, whichever process of this
checkout gets there first.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import secrets
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone


class SigningKeyError(Exception):
    """A request to change the key set that cannot be done (unknown or current key)."""


@dataclass(frozen=True)
class SigningKey:
    kid: str
    public: Ed25519PublicKey
    created: datetime
    retired: datetime | None
    private: Ed25519PrivateKey | None = None

    def __repr__(self) -> str:  # never print the private key
        return f"SigningKey({self.kid!r})"

    def sign(self, data: bytes) -> str:
        """Ed25519 signature of `data`, base64url without padding."""
        if self.private is None:
            raise SigningKeyError(f"signing key {self.kid!r} is retired")
        return b64(self.private.sign(data))

    def verifies(self, data: bytes, signature: str) -> bool:
        try:
            self.public.verify(unb64(signature), data)
        except (InvalidSignature, ValueError):
            return False
        return True

    def jwk(self) -> dict:
        return {
            "kty": "OKP",
            "crv": "Ed25519",
            "x": b64(_raw_public(self.public)),
            "kid": self.kid,
            "alg": "EdDSA",
            "use": "sig",
        }


@dataclass(frozen=True)
class KeySet:
    current: SigningKey
    keys: tuple[SigningKey, ...]

    def by_id(self, kid: str) -> SigningKey | None:
        return next((key for key in self.keys if key.kid == kid), None)

    def published(self, now: datetime | None = None) -> list[SigningKey]:
        """The current key first, then the others not retired or retired
        within the overlap."""
        now = now or timezone.now()
        overlap = timedelta(hours=settings.SIGNING_KEY_OVERLAP_HOURS)
        others = [
            key for key in self.keys if key is not self.current and (key.retired is None or now - key.retired < overlap)
        ]
        return [self.current, *others]


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def public_from_jwk(jwk: dict) -> Ed25519PublicKey:
    """The key of one JWK, refusing anything but an Ed25519 signing key."""
    if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519" or jwk.get("alg", "EdDSA") != "EdDSA":
        raise ValueError(f"key {jwk.get('kid')!r} is not an Ed25519 (EdDSA) key")
    return Ed25519PublicKey.from_public_bytes(unb64(jwk["x"]))


def keys_path() -> Path:
    # Unset only under DEBUG: settings refuse to start otherwise.
    if settings.SIGNING_KEYS_FILE:
        return Path(settings.SIGNING_KEYS_FILE)
    return settings.VAR_DIR / "signing-keys.json"


_loaded: dict[Path, tuple[tuple, KeySet]] = {}


def keyset() -> KeySet:
    """The key set, read again whenever its file changed (a key added or
    retired by `signing_key` reaches running processes without a restart)."""
    path = keys_path()
    if not path.exists() and not settings.SIGNING_KEYS_FILE:
        _create_development_set(path)
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise ImproperlyConfigured(
            f"SIGNING_KEYS_FILE {path} does not exist: create it with `python manage.py signing_key --new`"
        ) from None
    stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
    cached = _loaded.get(path)
    if cached is None or cached[0] != stamp:
        cached = (stamp, _parse(path.read_text(), path))
        _loaded[path] = cached
    return cached[1]


def current() -> SigningKey:
    return keyset().current


def jwks() -> dict:
    return {"keys": [key.jwk() for key in keyset().published()]}


def new_key() -> SigningKey:
    """Add a key and make it current (creating the set when there is none)."""
    with _editing() as data:
        entry = _new_entry()
        data["keys"].append(entry)
        data["current"] = entry["kid"]
    return keyset().current


def retire(kid: str) -> SigningKey:
    """Stop signing with `kid`: its private half is dropped now, its public
    half stays published for SIGNING_KEY_OVERLAP_HOURS."""
    with _editing() as data:
        entry = next((entry for entry in data["keys"] if entry["kid"] == kid), None)
        if entry is None:
            raise SigningKeyError(f"no signing key {kid!r}")
        if data["current"] == kid:
            raise SigningKeyError(f"{kid!r} is the current key: make a new one current first (signing_key --new)")
        if entry.get("retired") is None:
            entry["retired"] = timezone.now().isoformat()
        entry.pop("d", None)
    return keyset().by_id(kid)


# --- the file ---------------------------------------------------------------


def raw_private(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())


def _raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def _new_entry() -> dict:
    private = Ed25519PrivateKey.generate()
    now = timezone.now()
    return {
        "kid": f"{now:%Y%m%d}-{secrets.token_hex(4)}",
        "x": b64(_raw_public(private.public_key())),
        "d": b64(raw_private(private)),
        "created": now.isoformat(),
        "retired": None,
    }


def _parse(text: str, path: Path) -> KeySet:
    try:
        data = json.loads(text)
        keys = []
        for entry in data["keys"]:
            private = Ed25519PrivateKey.from_private_bytes(unb64(entry["d"])) if entry.get("d") else None
            public = Ed25519PublicKey.from_public_bytes(unb64(entry["x"]))
            if private is not None and _raw_public(private.public_key()) != _raw_public(public):
                raise ValueError(f"key {entry['kid']!r}: x is not the public half of d")
            retired = datetime.fromisoformat(entry["retired"]) if entry.get("retired") else None
            keys.append(SigningKey(entry["kid"], public, datetime.fromisoformat(entry["created"]), retired, private))
        current = next(key for key in keys if key.kid == data["current"])
    except (ValueError, KeyError, TypeError, StopIteration) as exc:
        raise ImproperlyConfigured(f"SIGNING_KEYS_FILE {path} is not a valid key set ({exc!r})") from None
    if current.private is None:
        raise ImproperlyConfigured(f"SIGNING_KEYS_FILE {path}: the current key {current.kid!r} has no private half")
    return KeySet(current, tuple(keys))


def _write_new(path: Path, data: dict) -> Path:
    """A complete file beside `path`, not yet in its place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as out:
        json.dump(data, out, indent=1)
        out.flush()
        os.fsync(out.fileno())
    return Path(tmp)


def _create_development_set(path: Path) -> None:
    """Several processes may start at once: each writes a whole set aside and
    links it into place, and only the first link succeeds, so no process
    ever reads a half-written or a different set."""
    entry = _new_entry()
    tmp = _write_new(path, {"current": entry["kid"], "keys": [entry]})
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()


@contextmanager
def _editing():
    """Read, change and replace the set under an exclusive lock, so two
    `signing_key` runs at once lose neither change."""
    path = keys_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(path.read_text()) if path.exists() else {"current": None, "keys": []}
        yield data
        tmp = _write_new(path, data)
        os.replace(tmp, path)
