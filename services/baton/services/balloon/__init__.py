"""``baton balloon``: placeholder pods that hold GPU nodes warm for the next large gang."""
