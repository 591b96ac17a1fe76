# Conveniences over the same commands the README gives.
venv := ".venv/bin/"

# Install into .venv (idempotent).
install:
    python3 -m venv .venv && {{venv}}pip install -q -e '.[dev]'

# The embedded default: nats-server + simcluster + every service, with a live status.
demo *ARGS: install
    {{venv}}baton up --workload synthetic {{ARGS}}

# The whole suite (what CI runs).
test *ARGS: install
    {{venv}}pytest {{ARGS}}

# Benchmarks; results go to docs/benchmarks.md by hand, with the command and machine.
bench *ARGS: install
    {{venv}}python -m tests.bench {{ARGS}}

# ruff, mypy (strict on libs and cores), the import-linter layer contracts, the alert rules.
lint: install
    {{venv}}ruff check . && {{venv}}ruff format --check . && {{venv}}mypy && {{venv}}lint-imports
    promtool check rules deploy/prometheus/rules.yaml

# baton status: what baton up shows, once (BATON_NATS_URL, or --nats URL).
status *ARGS: install
    {{venv}}baton status {{ARGS}}

# The whole system at size (BATON_WHOLE_NODES, default 7,500 here; see tests/bench/bench_whole.py),
# with a synthetic mix that keeps a queue (load 1.3) at a pace the API budget sustains (speed 10).
scale NODES="7500": install
    BATON_WHOLE_NODES={{NODES}} BATON_WHOLE_SECONDS=420 BATON_WHOLE_LOAD=1.3 BATON_WHOLE_SPEED=10 {{venv}}python -m tests.bench whole

# Regenerate proto/baton/proto/schemas after changing an event type (a unit test fails when stale).
schemas: install
    {{venv}}python -m baton.proto.schema

# The chaos run: replicas killed, NATS restarted, a leader paused; checks the invariants.
chaos *ARGS: install
    {{venv}}python -m tests.chaos {{ARGS}}
