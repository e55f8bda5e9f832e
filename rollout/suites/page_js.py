"""The JavaScript a web suite's page runs for trajforge: the element tree as a user sees it, the
region shown, and `<select>` worked as a user works it (`rollout.suites.webpage`)."""

# The region's part inside the viewport: what a screenshot of it shows (a scrolled page puts the
# region's top above the viewport, and the shot begins at the viewport's edge).
SHOWN_JS = """(sel) => {
  const r = ((sel && document.querySelector(sel)) || document.documentElement).getBoundingClientRect();
  const left = Math.max(0, r.left), top = Math.max(0, r.top);
  return {left, top, right: Math.max(left + 1, Math.min(r.right, innerWidth)),
          bottom: Math.max(top + 1, Math.min(r.bottom, innerHeight))};
}"""
ELEMENTS_JS = """(sel) => {
  const box = (SHOWN)(sel);
  // bounds are clipped to the region the screenshot shows (an open list may run past its foot)
  const wide = Math.floor(box.right - box.left), high = Math.floor(box.bottom - box.top);
  const BUTTONS = ['button', 'submit', 'reset'];
  const ROLES = ['button', 'link', 'tab', 'checkbox', 'radio', 'option', 'menuitem', 'switch'];
  const control = (el) => {
    const tag = el.tagName.toLowerCase(), role = el.getAttribute('role');
    if (['button', 'a', 'input', 'select', 'textarea', 'option'].includes(tag)) return true;
    if (role && ROLES.includes(role)) return true;
    const cur = getComputedStyle(el).cursor;
    const up = el.parentElement;
    return cur === 'pointer' && (!up || getComputedStyle(up).cursor !== 'pointer');
  };
  const ownText = (el) => Array.from(el.childNodes).filter(n => n.nodeType === 3)
    .map(n => n.data).join(' ').replace(/\\s+/g, ' ').trim();
  // accessible names, as a screen reader would say them: aria-labelledby, aria-label, a <label>
  const named = (el) => {
    const by = (el.getAttribute('aria-labelledby') || '').split(/\\s+/).filter(Boolean)
      .map(i => document.getElementById(i)).filter(Boolean).map(e => e.innerText).join(' ');
    return by || el.getAttribute('aria-label') || '';
  };
  const labelOf = (el) => {
    const lab = (el.id && document.querySelector(`label[for="${CSS.escape(el.id)}"]`)) || el.closest('label');
    return lab ? lab.innerText : '';
  };
  const words = (s) => /[\\p{L}\\p{N}]/u.test(s || '');  // not only a glyph such as "×" or "☰"
  const altOf = (el) => Array.from(el.querySelectorAll('img[alt], svg[aria-label]'))
    .map(i => i.getAttribute('alt') || i.getAttribute('aria-label')).join(' ');
  const textAfter = (el) => {  // an unlabelled checkbox's words: the text right after it
    const next = el.nextSibling;
    return next ? (next.nodeType === 3 ? next.data : (next.innerText || '')).trim() : '';
  };
  const out = [];
  const walk = (el, inControl, inText) => {
    const r = el.getBoundingClientRect(), st = getComputedStyle(el);
    if (st.display === 'none' || st.visibility === 'hidden') return;
    const isControl = !inControl && control(el);
    const visible = r.width > 0 && r.height > 0 && r.right > box.left && r.bottom > box.top
      && r.left < box.right && r.top < box.bottom;
    const text = isControl || inControl || inText || !ownText(el) ? '' : el.innerText;
    if (visible && (isControl || text)) {
      const hit = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
      if (hit && (el === hit || el.contains(hit) || hit.contains(el))) {
        const tag = el.tagName.toLowerCase(), type = (el.getAttribute('type') || '').toLowerCase();
        let kind = 'text', label = text, checked = null;
        if (isControl) {
          if (tag === 'input' && (type === 'checkbox' || type === 'radio')) {
            kind = 'toggle'; checked = el.checked;
            label = named(el) || labelOf(el) || el.title || textAfter(el);
          } else if (tag === 'textarea' || (tag === 'input' && !BUTTONS.includes(type))) {
            kind = 'input';
            label = el.value || named(el) || labelOf(el) || el.placeholder || el.title || '';
          } else if (tag === 'select') {  // its name and the option it shows: "Size: Medium"
            kind = 'button';
            const name = named(el) || labelOf(el) || el.title, shown = el.selectedOptions[0];
            label = [name, shown ? shown.text : ''].filter(Boolean).join(': ');
          } else if (tag === 'option') {
            kind = 'button'; label = el.text; checked = el.selected;
          } else {
            kind = 'button';
            const content = (el.innerText || '').trim();
            label = named(el) || (words(content) ? content : '') || el.value || altOf(el) || el.title
              || content || '';
          }
        }
        out.push({id: el.id || '', kind, tag, text: label.replace(/\\s+/g, ' ').trim(), checked,
                  focused: document.activeElement === el,
                  bounds: [r.left - box.left, r.top - box.top, r.right - box.left, r.bottom - box.top]
                    .map((v, i) => Math.max(0, Math.min(i % 2 ? high : wide, Math.round(v))))});
      }
    }
    const listbox = el.tagName === 'SELECT' && (el.multiple || el.size > 1);  // its options show
    for (const child of el.children) walk(child, (inControl || isControl) && !listbox, inText || !!text);
  };
  walk(document.body, false, false);
  return out;
}""".replace("(SHOWN)", f"({SHOWN_JS})")
REGION_JS = """(sel) => {
  const b = (SHOWN)(sel); return [b.left, b.top, b.right - b.left, b.bottom - b.top];
}""".replace("(SHOWN)", f"({SHOWN_JS})")
# Every select opened in place, closed again (its own size back).
CLOSE_SELECTS_JS = """() => document.querySelectorAll('select[data-trajforge-open]').forEach(s => {
  s.size = Number(s.dataset.trajforgeOpen); delete s.dataset.trajforgeOpen; })"""
# A `<select>` as a user works it, in a headless page whose native drop-down never reaches the
# screenshot: a click on a closed select opens it in place as a list (its options become elements
# to click); the next click, on an option or anywhere else, closes it. Typing into a select picks
# the option of that text (else the first starting with it), as a user types to choose.
SELECT_JS = """([x, y, text]) => {
  const open = Array.from(document.querySelectorAll('select[data-trajforge-open]'));
  const close = (CLOSE_SELECTS);
  const hit = document.elementFromPoint(x, y), sel = hit && hit.closest('select');
  if (sel && text !== null) {
    const want = text.trim().toLowerCase(), opts = Array.from(sel.options).filter(o => !o.disabled);
    const pick = opts.find(o => o.text.trim().toLowerCase() === want)
      || opts.find(o => o.text.trim().toLowerCase().startsWith(want));
    close(); sel.focus();
    if (pick && !pick.selected) {
      sel.value = pick.value;
      for (const type of ['input', 'change']) sel.dispatchEvent(new Event(type, {bubbles: true}));
    }
    return 'chosen';
  }
  if (sel && !sel.multiple && sel.size <= 1 && !sel.disabled && !open.includes(sel)) {
    close(); sel.dataset.trajforgeOpen = String(sel.size);
    sel.size = Math.max(2, Math.min(sel.options.length, 10)); sel.focus();
    return 'opened';
  }
  return open.length ? 'close' : 'click';
}""".replace("CLOSE_SELECTS", CLOSE_SELECTS_JS)
