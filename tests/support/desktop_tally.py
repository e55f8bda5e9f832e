"""A small GTK app of a user's own, for the desktop suite tests: type an item, add it, save the list.

Runs under the system Python (Debian's python3-gi with gir1.2-gtk-3.0), as an app of any language
would: `python3 desktop_tally.py [FILE]` saves its list to FILE (default tally.txt in the working
folder), one item per line. Nothing of trajforge is imported.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gi  # type: ignore[import-not-found,unused-ignore]

gi.require_version("Gtk", "3.0")
from gi.repository import Gtk  # type: ignore[import-not-found,unused-ignore]  # noqa: E402


def main() -> None:
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "tally.txt")
    items: list[str] = []
    window = Gtk.Window(title="Tally")
    box = Gtk.Box(orientation=Gtk.Orientation.VERTICAL, spacing=8)
    entry = Gtk.Entry(placeholder_text="Item")
    shown = Gtk.Label(label="No items yet")
    add, save = Gtk.Button(label="Add"), Gtk.Button(label="Save")

    def on_add(_: object) -> None:
        if entry.get_text().strip():
            items.append(entry.get_text().strip())
            entry.set_text("")
            shown.set_text(", ".join(items))

    add.connect("clicked", on_add)
    save.connect("clicked", lambda _: target.write_text("".join(f"{i}\n" for i in items)))
    for widget in (entry, add, shown, save):
        box.pack_start(widget, False, False, 0)
    window.add(box)
    window.connect("destroy", Gtk.main_quit)
    window.show_all()
    Gtk.main()


if __name__ == "__main__":
    main()
