"""Baton's event contract: every payload on the bus, its subject and its stream.

Only msgspec and the standard library are imported here, so a consumer in any
service (or another language, via the JSON Schemas in ``proto/baton/proto/schemas``) can
depend on it without pulling in the rest of Baton.
"""
