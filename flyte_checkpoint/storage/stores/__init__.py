"""The built-in stores, registered through the same hook as any plugin."""
