"""The android backend: adb against real emulators or devices (tested here against a fake adb)."""
