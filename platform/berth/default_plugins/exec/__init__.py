"""Built-in exec backends: ``local`` (bubblewrap, or ``unshare`` + setuid, on the host)."""
