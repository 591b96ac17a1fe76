"""``baton autoscaler``: whole-gang scale-ups and idle scale-downs of Cluster API pools."""
