"""NATS users are nkeys: an Ed25519 key pair whose seed (``SU...``) a client keeps in a
file and whose public key (``U...``) the server's configuration names.

The seed never travels: the server sends a nonce, the client signs it (nats-py does
this given ``nkeys_seed``). ``baton nats-config`` and ``baton up`` make the seeds.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import nkeys

from baton.libs.runtime.errors import SettingsError

SEED_SETTING = "BATON_NATS_NKEY_SEED_FILE"


def new_user_seed() -> str:
    """A new random user seed, ``SU...`` (56 characters)."""
    seed: bytes = nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER)
    return seed.decode()


def new_account_seed() -> str:
    """A new random account seed, ``SA...``: the auth callout's issuer (its public key,
    ``A...``, is ``auth_callout.issuer`` in the server's configuration)."""
    seed: bytes = nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_ACCOUNT)
    return seed.decode()


def _pair(seed: str, prefix: str, kind: str) -> Any:
    """The ``nkeys`` key pair of a seed starting ``prefix``; ``ValueError`` naming ``kind``."""
    text = seed.strip()
    if not text.startswith(prefix):
        raise ValueError(f"not a NATS {kind} nkey seed (one line starting {prefix})")
    try:
        return nkeys.from_seed(bytearray(text.encode()))
    except (nkeys.NkeysError, ValueError) as exc:
        raise ValueError(f"not a valid NATS {kind} nkey seed ({exc})") from exc


def _public(pair: Any) -> str:
    found: str = pair.public_key.decode()
    pair.wipe()
    return found


def account_pair(seed: str) -> Any:
    """The key pair of an account seed (``SA...``): the auth callout signs with it;
    ``ValueError`` when it is not one."""
    return _pair(seed, "SA", "account")


def account_public_key(seed: str) -> str:
    """The public key (``A...``) of an account seed; ``ValueError`` when it is not one."""
    return _public(account_pair(seed))


def public_key(seed: str) -> str:
    """The public key (``U...``) of a user seed; ``ValueError`` when it is not one."""
    return _public(_pair(seed, "SU", "user"))


def seed_file_public_key(path: str, *, setting: str = SEED_SETTING) -> str:
    """The public key of the seed in ``path``; ``SettingsError`` naming ``setting``."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SettingsError(f"{setting}: cannot read {path} ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise SettingsError(f"{setting}: {path}: not a NATS user nkey seed (not text)") from exc
    try:
        return public_key(text)
    except ValueError as exc:
        hint = "generate it with baton nats-config --credentials DIR"
        raise SettingsError(f"{setting}: {path}: {exc}; {hint}") from exc
