"""The plugin host: platform plugins, bundle discovery, generations and reload."""
