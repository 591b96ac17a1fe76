"""The bridge: the one watcher of the Kubernetes API, fanning slim object events out over NATS.

``core`` decides what to publish (subjects, dedup ids, tombstone TTLs, what the K8S
stream already holds); ``shell`` runs one list+watch per kind and publishes;
``main`` reads settings and wires it up (``baton bridge``).
"""
