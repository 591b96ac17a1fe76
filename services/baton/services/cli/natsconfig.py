"""``baton nats-config``: the nats-server configuration with one user per service.

Each user is an nkey; each service's permissions follow from its ``Spec``
(``libs.runner.access``): what it publishes, which lease key it holds, which inbox it
reads. Node agents get one user per node (``--node``, repeated, or ``--nodes-file``
with one name a line). The configuration holds only public keys.

With ``--credentials DIR`` (files mode 0600), each user's nkey seed (``SU...``),
reused when present (adding a node changes no other user's key):

- ``DIR/services/<service>``: what each service reads from
  ``BATON_NATS_NKEY_SEED_FILE`` (in ``deploy/``: the ``baton-nats`` Secret, one key
  per service, each pod mounting only its own);
- ``DIR/agents/<user>``: each node agent's (the ``baton-nats-agents`` Secret; an agent
  reads its own with ``BATON_AGENT_NATS_CREDENTIALS_DIR``);
- ``DIR/admin``: the operator's, for ``baton status``, ``tail`` and ``why``
  (``BATON_NATS_NKEY_SEED_FILE=DIR/admin``);
- ``DIR/inspect``: read only, for the same tools and the ``nats`` CLI: it reads every
  subject and stream of the cluster and may publish nothing of Baton's
  (``access.inspect_permissions``; ``baton health pause`` needs admin).

``--callout`` (with ``--credentials``): node agents connect with their pod's
ServiceAccount token, let in by the auth callout (``baton callout``, docs/security.md):
the config gets an ``auth_callout`` block (``issuer``: the public key of the account
seed kept in ``DIR/callout-issuer``, made once; ``auth_users``: every user written
here, who keep their permissions and bypass the callout) and the callout's own users
(``DIR/services/callout`` and ``DIR/services/callout-kick``). Per-node users
(``--node``) are then needed only while agents still use seeds. nats-server must
restart to take it (not reloadable).

``--auth-only`` writes just the ``authorization`` block (with ``--callout`` also
``accounts`` and ``system_account``: the system account's one user, ``callout-kick``,
``DIR/services/callout-kick``, with which the callout closes a gone pod's agent), for a
server config that includes it (``deploy/base/nats.yaml``: the ``nats-auth`` Secret).

``--make-tls DIR`` writes NATS's server certificate instead, for clusters without
cert-manager: ``tls.crt`` and ``tls.key`` (self-signed, ECDSA P-256, a year, made as
admission's webhook certificate is) for NATS's Service names, and ``ca.crt`` (the same
certificate: a self-signed certificate is its own CA), what clients check the server
against (``BATON_NATS_CA_FILE``). Kept while they exist.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from baton.libs.runner import access
from baton.libs.runner.spec import Spec
from baton.libs.runtime.nkey import account_public_key, new_account_seed, public_key
from baton.services.admission.certificates import CertificateError, self_signed

# deploy/base/nats.yaml's names (and localhost, for kubectl port-forward).
TLS_HOSTS = ("nats.baton-system.svc", "nats.baton-system.svc.cluster.local",
             "*.nats-headless.baton-system.svc", "localhost", "127.0.0.1")  # fmt: skip
CALLOUT_ISSUER = "callout-issuer"  # in --credentials: the callout's account seed (SA...)
RUNNERS = ("bridge", "actuator", "admission", "gang", "reporter", "bandwidth", "health",
           "balloon", "autoscaler")  # fmt: skip


def specs(names: Sequence[str] = RUNNERS) -> list[Spec[Any]]:
    """The ``SPEC`` of each named service that is part of this build."""
    found = []
    for name in names:
        try:
            module = importlib.import_module(f"baton.services.{name}.main")
        except ModuleNotFoundError:
            continue
        found.append(module.SPEC)
    return found


def seed_path(folder: Path, user: str) -> Path:
    """Where ``--credentials`` keeps ``user``'s seed (see the module doc)."""
    if user in (access.ADMIN, access.INSPECT):
        return folder / user
    return folder / ("agents" if user.startswith("agent-") else "services") / user


def read_seeds(folder: Path) -> dict[str, str]:
    """The seeds kept in ``folder`` by user name; ``ValueError`` naming a file that
    holds no seed."""
    files = [folder / access.ADMIN, folder / access.INSPECT]
    for sub in ("services", "agents"):
        if (folder / sub).is_dir():
            files += [p for p in (folder / sub).iterdir() if p.is_file()]
    found: dict[str, str] = {}
    for path in (p for p in files if p.is_file()):
        seed = path.read_text().strip()
        try:
            public_key(seed)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from exc
        found[path.name] = seed
    return found


def write_credentials(folder: Path, found: Sequence[access.User]) -> None:
    for sub in ("services", "agents"):
        (folder / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
    for user in found:
        write_seed(seed_path(folder, user.name), user.seed)


def write_seed(path: Path, seed: str) -> None:
    """A seed file (0600), as nats-py's ``nkeys_seed`` and ``BATON_NATS_NKEY_SEED_FILE`` read it."""
    _secret(path, seed)


def _secret(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text + "\n")


def callout_issuer(folder: Path) -> str:
    """The public key of the issuer account seed kept in ``folder/callout-issuer``
    (made when missing); ``ValueError`` naming the file when it holds no account seed."""
    path = folder / CALLOUT_ISSUER
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        _secret(path, new_account_seed())
    try:
        return account_public_key(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def write_config(path: Path, config: dict[str, Any], users: Sequence[access.User] = ()) -> None:
    _secret(path, render(config, users=users))


AUTH_KEYS = ("authorization", "accounts", "system_account")  # what --auth-only writes


def render(
    config: dict[str, Any], *, auth_only: bool = False, users: Sequence[access.User] = ()
) -> str:
    """The config as nats-server reads it (JSON is its syntax too); ``auth_only``: the
    ``authorization`` block alone, for ``include``. First, as comments, which user each
    key is: nats-server's log names a client by its key alone."""
    said = [f"# {user.public_key} {user.name}" for user in users]
    if auth_only:  # and the system account of the callout's kick user, when there is one
        blocks = [f"{k}: {json.dumps(config[k], indent=2)}" for k in AUTH_KEYS if k in config]
        return "\n".join([*said, *blocks])
    return "\n".join([*said, json.dumps(config, indent=2)])


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="baton nats-config", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--cluster", default="c1", help="cluster token in subjects (default c1)")
    p.add_argument("--node", action="append", default=[], help="a node agent's user (repeat)")
    p.add_argument("--nodes-file", type=Path, help="node names, one a line")
    p.add_argument("--fleet", action="store_true", help="add the simulated fleet agent's user")
    p.add_argument(
        "--credentials", type=Path, help="keep every user's nkey seed in this folder (required)"
    )
    p.add_argument("--callout", action="store_true",
                   help="agents by pod token, let in by baton callout")  # fmt: skip
    p.add_argument("--port", type=int, default=4222)
    p.add_argument("--store-dir", default="/data/jetstream", help="JetStream store directory")
    p.add_argument("--tls-dir", help="serve TLS with tls.crt, tls.key (and ca.crt) from here")
    p.add_argument("--auth-only", action="store_true",
                   help="only the authorization block, for a config that includes it")  # fmt: skip
    p.add_argument("--out", type=Path, help="write the config here (default: print it)")
    p.add_argument("--make-tls", metavar="DIR", type=Path,
                   help="instead: write NATS's tls.crt, tls.key, ca.crt there; exit")  # fmt: skip
    p.add_argument("--tls-hosts", default=",".join(TLS_HOSTS),
                   help="names in --make-tls's certificate, comma separated")  # fmt: skip
    return p.parse_args(argv)


def make_tls(folder: Path, hosts: Sequence[str]) -> Path:
    """NATS's self-signed certificate and key in ``folder``, and ``ca.crt``: the servers'
    own, and the one they present to each other on the cluster's routes."""
    cert, _ = self_signed(str(folder), hosts=tuple(hosts), routes=True)
    ca = folder / "ca.crt"
    ca.write_bytes(Path(cert).read_bytes())
    return ca


def run(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.make_tls:
        hosts = [h.strip() for h in args.tls_hosts.split(",") if h.strip()]
        try:
            ca = make_tls(args.make_tls, hosts)
        except (CertificateError, OSError) as exc:
            print(f"baton nats-config: --make-tls: {exc}", file=sys.stderr)
            return 2
        print(f"baton nats-config: wrote tls.crt, tls.key and {ca.name} in {args.make_tls}")
        return 0
    if not args.credentials:  # the server keeps only public keys: the seeds must go somewhere
        print("baton nats-config: --credentials DIR: required (where every user's seed is "
              "kept: the only copy)", file=sys.stderr)  # fmt: skip
        return 2
    nodes = list(args.node)
    if args.nodes_file:
        try:
            nodes += [n.strip() for n in args.nodes_file.read_text().splitlines() if n.strip()]
        except OSError as exc:
            print(f"baton nats-config: --nodes-file: {exc.strerror}", file=sys.stderr)
            return 2
    try:
        known = read_seeds(args.credentials)
        found = access.users(specs(), args.cluster, nodes=nodes, fleet=args.fleet, seeds=known,
                             callout=args.callout)  # fmt: skip
        issuer = callout_issuer(args.credentials) if args.callout else ""
    except ValueError as exc:  # a node name that cannot be a subject token, a bad seed
        print(f"baton nats-config: {exc}", file=sys.stderr)
        return 2
    tls = None
    if args.tls_dir:
        tls = {"cert_file": f"{args.tls_dir}/tls.crt", "key_file": f"{args.tls_dir}/tls.key",
               "ca_file": f"{args.tls_dir}/ca.crt"}  # fmt: skip
    config = access.server_config(found, port=args.port, store_dir=args.store_dir, tls=tls,
                                  callout_issuer=issuer)  # fmt: skip
    write_credentials(args.credentials, found)
    text = render(config, auth_only=args.auth_only, users=found)
    if args.out:
        _secret(args.out, text)
    else:
        print(text)
    return 0
