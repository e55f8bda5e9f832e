"""Built-in app specs (YAML)."""
