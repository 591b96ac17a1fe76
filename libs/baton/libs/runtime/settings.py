"""Settings: one frozen msgspec Struct per service, from env (and an optional file).

Each field ``max_x`` of the struct is read from ``<PREFIX>MAX_X`` (e.g.
``BATON_GANG_MAX_X``), falling back to ``BATON_MAX_X`` for the settings every
service shares (``BATON_NATS_URL``, ``BATON_CLUSTER``, ...). A YAML or JSON file
gives defaults under the field names; the environment wins over the file.

Values are converted by msgspec (non-strict: ``"3"`` -> 3, ``"true"`` -> True);
lists, tuples and sets also take ``a,b,c``; containers take JSON. Anything wrong
raises ``SettingsError`` naming the key, at start-up, before any work is done.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import yaml

from baton.libs.runtime.errors import SettingsError
from baton.libs.runtime.nkey import seed_file_public_key
from baton.proto.codec import field_error

S = TypeVar("S", bound=msgspec.Struct)
P = TypeVar("P")
COMMON_PREFIX = "BATON_"


class Base(msgspec.Struct, frozen=True, kw_only=True):
    """The settings every service has; a service's own ``Settings`` adds its fields
    (and may redeclare a default, e.g. its ``ops_port``)."""

    nats_url: str = "nats://127.0.0.1:4222"  # tls://... in deploy/ (docs/security.md)
    nats_ca_file: str = ""  # CA that signed NATS's certificate, for a tls:// URL (PEM)
    nats_nkey_seed_file: str = ""  # this service's NATS user: its nkey seed (SU...)
    cluster: str = "c1"
    ops_port: int = 9090  # /metrics, /healthz, /readyz
    dry_run: bool = False  # decide and publish decisions; withhold actions
    stop_grace_s: float = 10.0  # on SIGTERM: time to store the outputs in hand, then exit
    lease_ttl_s: float = 3.0  # a standby replica takes over this long after the leader's death
    stream_replicas: int = 1  # copies of each stream in a NATS cluster (3 in deploy/)
    cluster_nodes: int = 0  # nodes in the cluster: sizes HISTORY (0: not known, 10 GiB)

    def __post_init__(self) -> None:
        if not 0 <= self.ops_port <= 65535:
            raise ValueError(f"ops_port {self.ops_port}: expected 0..65535")
        if self.stop_grace_s <= 0:
            raise ValueError("stop_grace_s must be positive")
        if self.lease_ttl_s <= 0:
            raise ValueError("lease_ttl_s must be positive")
        if self.cluster_nodes < 0:
            raise ValueError(f"cluster_nodes {self.cluster_nodes}: expected 0 or more")
        if self.stream_replicas not in (1, 3, 5):
            raise ValueError(f"stream_replicas {self.stream_replicas}: expected 1, 3 or 5")
        if self.nats_nkey_seed_file:  # a bad seed stops start-up, not the first connect
            seed_file_public_key(self.nats_nkey_seed_file)


def require(prefix: str, checks: Mapping[str, bool], *, problem: str = "is out of range") -> None:
    """In a ``__post_init__``: raise naming the first key whose check is False
    (``require(PREFIX, {"TICK_S": self.tick_s > 0})``); ``load_settings`` reports it."""
    bad = [key for key, ok in checks.items() if not ok]
    if bad:
        raise ValueError(f"{prefix}{bad[0]} {problem}")


def policy_from(
    settings: msgspec.Struct, type_: type[P], *, error: type[ValueError] = ValueError, **values: Any
) -> P:
    """A service's policy (a msgspec Struct or dataclass) from its settings: each field
    takes the setting of the same name, or ``values[name]``; a field in neither keeps its
    default. Checked as a decoded message is: a value the field's type or range refuses
    raises ``error`` naming the field (``share: Expected float <= 1``)."""
    info = msgspec.inspect.type_info(type_)
    if not isinstance(info, msgspec.inspect.StructType | msgspec.inspect.DataclassType):
        raise TypeError(f"{type_!r}: a policy is a msgspec Struct or a dataclass")
    data = {f.name: getattr(settings, f.name) for f in info.fields if hasattr(settings, f.name)}
    data.update(values)
    try:
        return msgspec.convert(data, type_, from_attributes=True)
    except msgspec.ValidationError as exc:
        raise error(field_error(exc)) from None


def load_settings(
    type_: type[S],
    prefix: str,
    file: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] = os.environ,
) -> S:
    """Build ``type_`` from ``file`` (else the one ``<prefix>CONFIG`` names, if any)
    overlaid with ``env``; see the module doc."""
    file = file or env.get(f"{prefix}CONFIG") or None
    fields = {f.name: f for f in msgspec.structs.fields(type_)}
    raw: dict[str, tuple[str, Any]] = {}  # field -> (where it came from, value)
    if file:
        for name, value in _read_file(Path(file), fields).items():
            raw[name] = (f"{file}: {name}", value)
    for name in fields:
        for key in (f"{prefix}{name.upper()}", f"{COMMON_PREFIX}{name.upper()}"):
            if key in env:
                raw[name] = (key, env[key])
                break
    _refuse_unknown(env, prefix=prefix, fields=fields)
    values = {name: _convert(key, value, fields[name].type) for name, (key, value) in raw.items()}
    missing = [n for n, f in fields.items() if f.required and n not in values]
    if missing:
        keys = ", ".join(f"{prefix}{n.upper()}" for n in missing)
        raise SettingsError(f"{keys}: required, not set")
    try:
        return msgspec.convert(values, type_)
    except msgspec.ValidationError as exc:  # from __post_init__ checks
        said = str(exc)  # a check that names its variable says it first
        named = said.startswith(COMMON_PREFIX)
        raise SettingsError(said if named else f"{prefix}*: {said}") from exc


def _read_file(path: Path, fields: Mapping[str, Any]) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise SettingsError(f"{path}: cannot read settings file ({exc.strerror})") from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise SettingsError(
            f"{path}: not valid {path.suffix.lstrip('.') or 'YAML'}: {exc}"
        ) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: expected a mapping of setting names to values")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise SettingsError(f"{path}: {unknown[0]}: unknown setting (known: {', '.join(fields)})")
    return data


def _refuse_unknown(env: Mapping[str, str], *, prefix: str, fields: Mapping[str, Any]) -> None:
    """A typo such as BATON_GANG_MAX_GNAGS must not be silently ignored."""
    if prefix == COMMON_PREFIX:
        return  # the shared prefix also carries other services' settings
    for key in sorted(env):
        if key.startswith(prefix) and key[len(prefix) :].lower() not in fields:
            known = ", ".join(f"{prefix}{n.upper()}" for n in fields)
            raise SettingsError(f"{key}: unknown setting (known: {known})")


def _convert(key: str, value: Any, type_: Any) -> Any:
    if isinstance(value, str):
        value = _unpack_string(value, type_)
    try:
        return msgspec.convert(value, type_, strict=False)
    except msgspec.ValidationError as exc:
        where = str(exc).partition(" - at ")[2]
        detail = f" (at {where.replace('$', 'value')})" if where else ""
        raise SettingsError(f"{key}: expected {_describe(type_)}, got {value!r}{detail}") from exc


def _unpack_string(value: str, type_: Any) -> Any:
    """Env values are strings: JSON for containers, ``a,b`` for flat sequences."""
    origin = getattr(type_, "__origin__", type_)
    if origin in (list, tuple, set, frozenset, dict) or _is_struct(type_):
        stripped = value.strip()
        if stripped.startswith(("[", "{")):
            try:
                return json.loads(stripped)
            except ValueError:
                return value
        if origin in (list, tuple, set, frozenset):
            return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _is_struct(type_: Any) -> bool:
    return isinstance(type_, type) and issubclass(type_, msgspec.Struct)


def _describe(type_: Any) -> str:
    if isinstance(type_, type) and not getattr(type_, "__args__", None):
        return type_.__name__
    return str(type_).replace("typing.", "")
