"""NATS users are nkeys: an Ed25519 key pair whose seed (``SU...``) a client keeps in a
file and whose public key (``U...``) the server's configuration names.

The seed never travels: the server sends a nonce, the client signs it (nats-py does
this given ``nkeys_seed``). ``baton nats-config`` and ``baton up`` make the seeds.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import nkeys

from baton.libs.runtime.settings import SettingsError

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


def account_public_key(seed: str) -> str:
    """The public key (``A...``) of an account seed; ``ValueError`` when it is not one."""
    text = seed.strip()
    if not text.startswith("SA"):
        raise ValueError("not a NATS account nkey seed (one line starting SA)")
    try:
        pair = nkeys.from_seed(bytearray(text.encode()))
        found: str = pair.public_key.decode()
    except (nkeys.NkeysError, ValueError) as exc:
        raise ValueError(f"not a valid NATS account nkey seed ({exc})") from exc
    pair.wipe()
    return found


def public_key(seed: str) -> str:
    """The public key (``U...``) of a user seed; ``ValueError`` when it is not one."""
    text = seed.strip()
    if not text.startswith("SU"):
        raise ValueError("not a NATS user nkey seed (one line starting SU)")
    try:
        pair = nkeys.from_seed(bytearray(text.encode()))
        found: str = pair.public_key.decode()
    except (nkeys.NkeysError, ValueError) as exc:
        raise ValueError(f"not a valid NATS user nkey seed ({exc})") from exc
    pair.wipe()
    return found


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
