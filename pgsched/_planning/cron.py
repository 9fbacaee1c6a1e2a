"""Cron fields as crontab(5) reads them, translated into expressions croniter reads the same way.

croniter computes the wall times (it is fast, and right about most fields), but it departs
from crontab(5) in a few places; :func:`cron_parts` rewrites an expression so that croniter's
answer is crontab(5)'s:

- ``a-a`` and ``a-a/n`` are the single value ``a`` (croniter reads ``a-a`` as the whole
  field, and ``a-a/n`` as ``*/n``);
- the day fields are ORed when both are restricted, a field being unrestricted only when it
  is exactly ``*`` or ``?``. croniter ORs them, except with an ``L``, ``W`` or ``D#n`` (where
  it ignores or ANDs the day of month) and where it collapses a restricted field covering
  every day to ``*``; such an expression becomes two parts, the day-of-month one and the
  day-of-week one, whose union of wall times is the expression's;
- ``a/n`` is ``a-max/n``, a weekday's max being 7 (croniter stops at 6, and reads ``7/n``
  as ``*``);
- macros become their five fields; ``@reboot`` and six- or seven-field forms are refused with
  what to use instead; ``?`` is ``*``; ``5L`` (last Friday) is croniter's ``L5``.
"""

from __future__ import annotations

import functools
import re

from croniter import croniter

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = "jan feb mar apr may jun jul aug sep oct nov dec"
_NAMES: tuple[dict[str, str], ...] = (
    {},
    {},
    {},
    {m: str(i) for i, m in enumerate(_MONTHS.split(), 1)},
    {d: str(i) for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])},
)
_SINGLE_RANGE = re.compile(r"^(\d+)-(\d+)(?:/\d+)?$")
_OPEN_STEP = re.compile(r"^(\d+)/(\d+)$")
_MAX = (59, 23, 31, 12, 7)
_LAST_WEEKDAY = re.compile(r"^([0-7])l$")  # crontab's `5L`, croniter's `L5`


def _field(index: int, text: str) -> str:
    """One field, lower-cased, names as numbers, ``a-a`` and ``a-a/n`` as ``a``."""
    text = text.lower()
    if text == "?" and index in (2, 4):  # "no restriction", in a day field only
        return "*"
    names = _NAMES[index]
    if names:
        text = re.sub(r"[a-z]{3}", lambda m: names.get(m.group(), m.group()), text)
    items = []
    for item in text.split(","):
        open_step = _OPEN_STEP.match(item)
        if open_step:  # croniter ends a weekday `a/n` at 6, or reads `7/n` as `*`
            start, step = open_step.groups()
            item = f"{start}-{max(_MAX[index], int(start))}/{step}"
        single = _SINGLE_RANGE.match(item)
        if single and int(single.group(1)) == int(single.group(2)):
            item = single.group(1)
        elif index == 4 and _LAST_WEEKDAY.match(item):
            item = "l" + item[0]
        elif index == 2 and item == "lw":
            raise ValueError("`LW` is not supported: use `L` (the last day of the month)")
        items.append(item)
    return ",".join(items)


def _fields(expr: str) -> list[str]:
    text = " ".join(expr.split())
    if text.startswith("@"):
        if text.lower() == "@reboot":
            raise ValueError(
                "@reboot is not a schedule: run the code when your process starts, or give "
                "a 5-field expression or every="
            )
        if text.lower() not in MACROS:
            raise ValueError(f"unknown macro {text!r}: use one of {', '.join(MACROS)}")
        text = MACROS[text.lower()]
    fields = text.split(" ") if text else []
    if len(fields) == 6:
        raise ValueError(
            "it has 6 fields; pgsched takes standard 5-field cron (minute hour day month "
            "weekday): drop the seconds (or year) field, and use every= for sub-minute cadences"
        )
    if len(fields) == 7:
        raise ValueError(
            "it has 7 fields; pgsched takes standard 5-field cron (minute hour day month "
            "weekday): drop the seconds and year fields, and use every= for sub-minute cadences"
        )
    if len(fields) != 5:
        raise ValueError(
            f"it has {len(fields)} fields; pgsched takes standard 5-field cron (minute hour day "
            "month weekday; use every= for sub-minute cadences)"
        )
    return [_field(i, f) for i, f in enumerate(fields)]


@functools.lru_cache(maxsize=8192)
def parsed(expr: str) -> croniter:
    """croniter's parse of ``expr`` (a part from :func:`cron_parts`), once per expression:
    schedules in different zones copy it (a copy shares the expanded fields, which croniter
    only reads), and :func:`cron_parts` reads its expanded day fields."""
    return croniter(expr)


@functools.lru_cache(maxsize=8192)
def cron_parts(expr: str) -> tuple[str, ...]:
    """The croniter expressions whose wall times together are ``expr``'s under crontab(5):
    one, or two (day-of-month part, day-of-week part) when both day fields are restricted
    and croniter would not OR them. Raises ValueError (or croniter's errors) when ``expr``
    is not a valid 5-field expression."""
    minute, hour, dom, month, dow = _fields(expr)
    whole = f"{minute} {hour} {dom} {month} {dow}"
    if dom == "*" or dow == "*":
        return (whole,)
    expanded = parsed(whole).expanded  # also raises on a bad field
    if expanded[2] == ["*"] or expanded[4] == ["*"] or len(expanded[4]) == 7:
        # A restricted field covering every day: ORed, every day matches.
        return (f"{minute} {hour} * {month} *",)
    if re.search(r"[lw#]", dom + dow):
        return (f"{minute} {hour} {dom} {month} *", f"{minute} {hour} * {month} {dow}")
    return (whole,)
