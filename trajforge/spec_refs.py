"""The references an app spec's text may hold: `{slot}` in a label, a phrase or an intent, and
`{value}`, a list row's own value. The spec's types (`trajforge.appspec`), its checks
(`trajforge.spec_check`) and its warnings (`trajforge.spec_lint`) all read them from here."""

from __future__ import annotations

import re

ROW_VALUE = "value"  # in a list's label or phrase, {value} is the row's own value
SLOT_REF = re.compile(r"\{(\w+)\}")
