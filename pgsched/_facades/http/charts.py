"""Charts as inline SVG, drawn on the server: no script, nothing fetched."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from .html import duration, esc, short_time

_W, _H = 560, 200
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 12, 12, 34
Point = tuple[datetime, int | None, int | None]  # plan time, median, max (ms)


def line_chart(title: str, points: Sequence[Point]) -> str:
    """Median (solid) and max (dashed) of a value over plan times, oldest on the left."""
    shown = sorted((p for p in points if p[1] is not None), key=lambda p: p[0])
    if not shown:
        return (
            f'<figure class="chart"><figcaption>{esc(title)}</figcaption>'
            '<div class="empty">no started runs yet</div></figure>'
        )
    top = max(max(p[2] or 0, p[1] or 0) for p in shown)
    low = min(min(p[1] or 0, p[2] or 0) for p in shown)
    low = min(low, 0)
    span = max(top - low, 1)
    first, last = shown[0][0].timestamp(), shown[-1][0].timestamp()
    width = _W - _LEFT - _RIGHT
    height = _H - _TOP - _BOTTOM

    def x(at: datetime) -> float:
        if last == first:
            return _LEFT + width / 2
        return _LEFT + (at.timestamp() - first) / (last - first) * width

    def y(value: int) -> float:
        return _TOP + height - (value - low) / span * height

    medians = " ".join(f"{x(t):.1f},{y(m or 0):.1f}" for t, m, _ in shown)
    maxima = " ".join(f"{x(t):.1f},{y(h if h is not None else m or 0):.1f}" for t, m, h in shown)
    dots = "".join(
        f'<circle cx="{x(t):.1f}" cy="{y(m or 0):.1f}" r="3" fill="#1d4fa3">'
        f"<title>{short_time(t)}: median {esc(duration(m))}, max {esc(duration(h))}</title>"
        "</circle>"
        for t, m, h in shown
    )
    grid = "".join(
        f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e3e6ec"/>'
        f'<text x="{_LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="11" '
        f'fill="#5b6478">{esc(duration(v))}</text>'
        for v in sorted({low, low + span // 2, top})
    )
    labels = (
        f'<text x="{_LEFT}" y="{_H - 10}" font-size="11" fill="#5b6478">'
        f"{short_time(shown[0][0])}</text>"
        f'<text x="{_W - _RIGHT}" y="{_H - 10}" font-size="11" fill="#5b6478" '
        f'text-anchor="end">{short_time(shown[-1][0])}</text>'
    )
    summary = f"{title}: {len(shown)} plans, highest {duration(top)}"
    return (
        f'<figure class="chart"><figcaption>{esc(title)} <span class="legend">'
        '<i style="background:#1d4fa3"></i>median <i style="background:#c8302a"></i>max'
        f'</span></figcaption><svg viewBox="0 0 {_W} {_H}" role="img" '
        f'aria-label="{esc(summary)}">{grid}{labels}'
        f'<polyline points="{maxima}" fill="none" stroke="#c8302a" stroke-width="1.5" '
        f'stroke-dasharray="4 3"/><polyline points="{medians}" fill="none" stroke="#1d4fa3" '
        f'stroke-width="2"/>{dots}</svg></figure>'
    )
