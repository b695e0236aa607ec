"""Built-in platform plugins (storage, model providers, exec backends, secret providers, tool packs)."""
