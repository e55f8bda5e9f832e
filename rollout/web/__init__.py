"""The web backend: app specs served as HTML on 127.0.0.1 and driven by Chromium (Playwright)."""
