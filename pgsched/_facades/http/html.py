"""The dashboard's HTML building blocks: the page frame, its style and its one small script,
and the cells every page uses. Every value that comes from the database or the request goes
through :func:`esc`.

Times are shown in UTC with their zone and how long ago (or ahead) they are, computed here for
the first response; the script keeps the relative forms current and, on a page that refreshes,
fetches the page again every ``refresh`` seconds and replaces the parts that changed (the
top-level blocks of ``main`` with an id, unless one holds a ticked box or the focus): no
reload, no build step, nothing fetched from elsewhere.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any
from urllib.parse import urlencode

from ..._operations.dashboard import COUNT_CAP

STYLE = """
:root{--ink:#1d2330;--muted:#5b6478;--line:#dfe3ea;--bg:#f5f6f8;--card:#fff;--link:#1d4fa3}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:var(--ink);
background:var(--bg)}
a{color:var(--link)}a:focus-visible,button:focus-visible,input:focus-visible,select:focus-visible,
textarea:focus-visible{outline:3px solid #f0a500;outline-offset:1px}
header{background:var(--ink);color:#fff;padding:10px 20px;display:flex;flex-wrap:wrap;
align-items:baseline;gap:6px 18px}
header h1{font-size:18px;margin:0}header h1 a{color:#fff;text-decoration:none}
header nav{display:flex;gap:14px;flex-wrap:wrap}header a{color:#cfe0ff}
header .who{margin-left:auto;color:#c3cad6;font-size:13px}
main{padding:14px 20px;max-width:2400px;margin:0 auto}
main p,main .note,dl.kv,.flash{max-width:110ch}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;margin:0 0 16px;
overflow-x:auto;position:relative}
h2{font-size:15px;margin:0;padding:9px 12px;border-bottom:1px solid var(--line)}
h2 small,.note{color:var(--muted);font-weight:normal;font-size:13px}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:5px 10px;border-bottom:1px solid #eef0f4;vertical-align:top;
overflow-wrap:break-word}
.mono{overflow-wrap:anywhere}time span,.acts{white-space:nowrap}
time .ago{color:var(--muted);font-size:12px}
th{font-size:12px;color:var(--muted);font-weight:600;background:#fafbfc}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.mono,td.err,pre{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px}
pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:4px 0;background:#f7f7f9;padding:6px}
.pill{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;font-weight:600;
white-space:nowrap}
.SUCCESS{background:#d3f0dc;color:#0f5223}.FAILED{background:#fbd9d7;color:#8a1712}
.RUNNING{background:#d6e4fc;color:#173f85}.PENDING{background:#fff0c2;color:#5c4400}
.CANCELLED{background:#e4e7ec;color:#394150}.STALE{background:#ffd4ad;color:#6e2f00}
.NONE{background:#f1f2f5;color:#5b6478}
.paused{background:#e4e7ec;color:#394150}.bad{color:#8a1712;font-weight:700}
.empty{padding:10px 12px;color:var(--muted)}
.tiles{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:10px;
margin:0 0 16px}
.tile{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:8px 12px}
.tile b{display:block;font-size:22px}.tile span{color:var(--muted);font-size:13px}
.strip{display:flex;gap:2px;flex-wrap:wrap;min-width:80px}
.strip a,.strip span{display:inline-block;width:10px;height:18px;border-radius:2px}
.strip .NONE{background:#e8eaef}
.SUCCESS.sq{background:#2f9e57}.FAILED.sq{background:#c8302a}.RUNNING.sq{background:#3b78e7}
.SKIPPED.sq{background:repeating-linear-gradient(45deg,#9aa1ad 0 3px,#f1f2f5 3px 6px)}
.PENDING.sq{background:#d9a400}.CANCELLED.sq{background:#9aa1ad}.STALE.sq{background:#e06c00}
table.grid{width:auto}table.grid td,table.grid th{padding:3px 4px;text-align:center}
table.grid th.scope,table.grid td.scope{text-align:left;max-width:260px}
table.grid a.sq,table.grid span.sq{display:inline-block;width:20px;height:20px;border-radius:3px}
table.grid th.plan{font-size:11px;font-weight:500;white-space:nowrap}
form.inline{display:inline}
form.bar{display:flex;flex-wrap:wrap;gap:8px;align-items:end;padding:10px 12px}
form.bar label{display:flex;flex-direction:column;font-size:12px;color:var(--muted)}
input,select,textarea{font:inherit;padding:4px 6px;border:1px solid #9aa1ad;border-radius:4px;
background:#fff;color:var(--ink)}
button{font:inherit;font-size:13px;padding:3px 10px;border-radius:4px;border:1px solid #1d4fa3;
background:#1d4fa3;color:#fff;cursor:pointer}
button.quiet{background:#fff;color:#1d4fa3}button.danger{background:#8a1712;border-color:#8a1712}
.flash{padding:8px 12px;border-radius:6px;margin:0 0 14px;background:#e3f1ff;
border:1px solid #a9c8f0}.flash.error{background:#fde2e1;border-color:#f0aaa6}
.pager{display:flex;gap:14px;padding:8px 12px;flex-wrap:wrap}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(320px,1fr));gap:10px;
padding:10px}
.chart svg{width:100%;height:auto}.chart figcaption{font-size:13px;color:var(--muted)}
.legend i{display:inline-block;width:18px;height:3px;vertical-align:middle;margin:0 4px}
dl.kv{display:grid;grid-template-columns:max-content 1fr;gap:4px 14px;padding:10px 12px;
margin:0}dl.kv dt{color:var(--muted)}dl.kv dd{margin:0;overflow-wrap:anywhere}
.visually-hidden{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}
@media (max-width:700px){main{padding:10px 8px}header .who{margin-left:0}
table:not(.grid),table:not(.grid) tbody,table:not(.grid) tr,table:not(.grid) td{display:block;
width:100%}table:not(.grid) thead{display:none}
table:not(.grid) tr{border-bottom:1px solid var(--line);padding:4px 0}
table:not(.grid) td{display:flex;gap:10px;border:0;padding:2px 10px;text-align:left}
table:not(.grid) td::before{content:attr(data-label);flex:0 0 34%;color:var(--muted);
font-size:12px}table:not(.grid) td.wide{display:none}}
"""


def esc(value: Any) -> str:
    return escape(str(value), quote=True)


def href(page: str, **params: Any) -> str:
    """A link relative to the dashboard's root (every page lives at its top level)."""
    shown = {k: v for k, v in params.items() if v not in (None, "")}
    return esc(page + ("?" + urlencode(shown) if shown else ""))


def when(value: datetime | None, now: datetime | None = None) -> str:
    """``value`` in UTC with its zone, and how long ago or ahead of ``now`` (the clock's
    now unless given) it is; the page's script keeps the second part current."""
    if value is None:
        return "—"
    text = value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    ago = relative(value, now or datetime.now(UTC))
    return (
        f'<time datetime="{esc(value.isoformat())}" title="{esc(ago)}"><span>{esc(text)}</span>'
        f' <span class="ago">{esc(ago)}</span></time>'
    )


def relative(value: datetime, now: datetime) -> str:
    """ "just now", "42 s ago", "3 min ago", "in 2 h", "5 d ago": the script's same rule."""
    seconds = round((value - now).total_seconds())
    size = abs(seconds)
    if size < 5:
        return "just now"
    for unit, name in ((86400, "d"), (3600, "h"), (60, "min"), (1, "s")):
        if size >= unit:
            count = f"{size // unit} {name}"
            return f"in {count}" if seconds > 0 else f"{count} ago"
    return "just now"  # unreachable: size >= 5 matched a unit


def short_time(value: datetime) -> str:
    return esc(value.astimezone(UTC).strftime("%m-%d %H:%M:%S"))


def pill(status: str | None) -> str:
    if status is None:
        return "—"
    return f'<span class="pill {esc(status)}">{esc(status)}</span>'


def duration(ms: int | None) -> str:
    if ms is None:
        return "—"
    if abs(ms) < 10_000:
        return f"{ms} ms"
    return f"{ms / 1000:.1f} s" if abs(ms) < 600_000 else f"{ms / 60_000:.1f} min"


def num(value: int | None, bad: bool = False) -> str:
    if value is None:
        return "—"
    text = f"{COUNT_CAP:,}+" if value > COUNT_CAP else f"{value:,}"
    return f'<span class="bad">{text}</span>' if bad and value else text


def section(title: str, note: str, body: str, ident: str | None = None) -> str:
    label = f' id="{esc(ident)}" aria-label="{esc(title)}"' if ident else ""
    small = f" <small>{esc(note)}</small>" if note else ""
    return f"<section{label}><h2>{esc(title)}{small}</h2>{body}</section>"


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    numeric: frozenset[int] = frozenset(),
    wide: frozenset[int] = frozenset(),
    caption: str = "",
) -> str:
    """A table of already-escaped cells; ``wide`` columns are hidden on a phone."""

    def cls(i: int) -> str:
        names = ("num " if i in numeric else "") + ("wide" if i in wide else "")
        return f' class="{names.strip()}"' if names.strip() else ""

    labels = [f' data-label="{esc(h)}"' for h in headers]
    body = "".join(
        "<tr>"
        + "".join(f"<td{cls(i)}{labels[i]}>{cell}</td>" for i, cell in enumerate(row))
        + "</tr>"
        for row in rows
    )
    if not body:
        return '<div class="empty">none</div>'
    ths = "".join(f'<th scope="col"{cls(i)}>{esc(h)}</th>' for i, h in enumerate(headers))
    cap = f'<caption class="visually-hidden">{esc(caption)}</caption>' if caption else ""
    return f"<table>{cap}<thead><tr>{ths}</tr></thead><tbody>{body}</tbody></table>"


# Keeps the relative times current and, when the body has data-refresh, replaces the parts of
# the page that changed with those of the page fetched again (the same address, cookie and
# all). The same rule as relative() above.
SCRIPT = """(() => {
const units = [[86400, 'd'], [3600, 'h'], [60, 'min'], [1, 's']];
function ago(iso) {
  const s = Math.round((Date.parse(iso) - Date.now()) / 1000), n = Math.abs(s);
  if (n < 5) return 'just now';
  for (const [u, name] of units) if (n >= u) {
    const c = Math.floor(n / u) + ' ' + name; return s > 0 ? 'in ' + c : c + ' ago'; }
  return 'just now';
}
function stamp(root) {
  for (const t of root.querySelectorAll('time[datetime]')) {
    const text = ago(t.getAttribute('datetime')), out = t.querySelector('.ago');
    t.title = text; if (out) out.textContent = text;
  }
}
async function refresh() {
  if (document.hidden) return;
  let answer;
  try { answer = await fetch(location.href, {credentials: 'same-origin'}); } catch (e) { return; }
  if (!answer.ok) return;
  const fresh = new DOMParser().parseFromString(await answer.text(), 'text/html');
  for (const part of fresh.querySelectorAll('main > [id]')) {
    const now = document.getElementById(part.id);
    if (!now || now.parentElement.tagName !== 'MAIN') continue;
    if (now.contains(document.activeElement) || now.querySelector('input:checked')) continue;
    if (now.innerHTML !== part.innerHTML) now.replaceWith(document.importNode(part, true));
  }
  stamp(document);
  document.body.dataset.refreshed = String(Date.now());
}
const every = Number(document.body.dataset.refresh || 0);
if (every > 0) setInterval(refresh, every * 1000);
setInterval(() => stamp(document), 10000);
})();"""
SCRIPT_HASH = "sha256-" + base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()


def frame(title: str, body: str, *, who: str, refresh: int | None = None, flash: str = "") -> str:
    """The whole page: header with navigation and who is signed in, then ``body``; with
    ``refresh``, the changed parts are fetched again every that many seconds."""
    every = f' data-refresh="{int(refresh)}"' if refresh else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{esc(title)} · pgsched</title><style>{STYLE}</style></head><body{every}>"
        '<header><h1><a href="./">pgsched</a></h1>'
        '<nav aria-label="main"><a href="./">Overview</a></nav>'
        f'<span class="who">{who}</span></header>'
        f"<main>{flash}{body}</main><script>{SCRIPT}</script></body></html>"
    )


def hidden(**fields: Any) -> str:
    return hidden_pairs(fields.items())


def hidden_pairs(pairs: Iterable[tuple[str, Any]]) -> str:
    """Hidden inputs, a name repeated as often as it comes (a form's selection posted again)."""
    return "".join(
        f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">' for k, v in pairs if v is not None
    )


def button_form(action: str, label: str, back: str, *, danger: bool = False, **fields: Any) -> str:
    """A one-button form posting ``action`` to the action endpoint, coming back to ``back``."""
    cls = "danger" if danger else "quiet"
    return (
        '<form class="inline" method="post" action="action">'
        f"{hidden(action=action, back=back, **fields)}"
        f'<button class="{cls}" type="submit">{esc(label)}</button></form>'
    )


def pick(form_id: str, value: Any, label: str) -> str:
    """A checkbox joining the selection form ``form_id`` (forms cannot nest, so the row's own
    buttons stay forms of their own)."""
    return (
        f'<input type="checkbox" form="{esc(form_id)}" name="target" value="{esc(value)}" '
        f'aria-label="select {esc(label)}">'
    )


def selection_form(
    form_id: str, back: str, buttons: Sequence[tuple[str, str]], **fields: Any
) -> str:
    """The form a table's checkboxes join: one submit button per (action, label)."""
    submit = "".join(
        f'<button type="submit" name="action" value="{esc(action)}"'
        f"{' class=danger' if action.endswith('delete') else ''}>{esc(label)}</button>"
        for action, label in buttons
    )
    return (
        f'<form id="{esc(form_id)}" class="pager" method="post" action="action">'
        f"{hidden(back=back, **fields)}{submit}</form>"
    )
