"""Built-in model providers, each a platform plugin: ``anthropic``, ``openai-compatible`` and ``scripted``."""
