"""The log-log SVG plot of `python -m isozyme bench --plot` (no plotting library needed): pre/post and
gradient/primal against problem size, one line per benchmark, the rows whose checks passed."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from isozyme.benchmarking import Row


COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
          "#7f7f7f", "#bcbd22")


def _log_ticks(low: float, high: float) -> list[float]:
    return [10.0 ** e for e in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)]


def _panel(series: Mapping[str, list[tuple[float, float]]], title: str, left: float, colors: Mapping[str, str],
           width: float = 420, height: float = 300, top: float = 40) -> list[str]:
    points = [p for values in series.values() for p in values if p[0] > 0 and p[1] > 0]
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x_ticks, y_ticks = _log_ticks(min(xs), max(xs)), _log_ticks(min(min(ys), 1.0), max(ys))
    x_lo, x_hi = math.log10(x_ticks[0]), math.log10(x_ticks[-1]) or 1.0
    y_lo, y_hi = math.log10(y_ticks[0]), math.log10(y_ticks[-1])
    x_hi, y_hi = (x_hi if x_hi > x_lo else x_lo + 1), (y_hi if y_hi > y_lo else y_lo + 1)

    def px(x: float) -> float:
        return left + (math.log10(x) - x_lo) / (x_hi - x_lo) * width

    def py(y: float) -> float:
        return top + height - (math.log10(y) - y_lo) / (y_hi - y_lo) * height
    out = [f'<text x="{left + width / 2}" y="{top - 14}" text-anchor="middle" font-size="14">{title}</text>',
           f'<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="none" stroke="#444"/>']
    for tick in x_ticks:
        out.append(f'<line x1="{px(tick):.1f}" y1="{top}" x2="{px(tick):.1f}" y2="{top + height}" stroke="#ddd"/>')
        out.append(f'<text x="{px(tick):.1f}" y="{top + height + 16}" text-anchor="middle" font-size="11">'
                   f'{tick:g}</text>')
    for tick in y_ticks:
        out.append(f'<line x1="{left}" y1="{py(tick):.1f}" x2="{left + width}" y2="{py(tick):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{py(tick) + 4:.1f}" text-anchor="end" font-size="11">{tick:g}</text>')
    out.append(f'<text x="{left + width / 2}" y="{top + height + 34}" text-anchor="middle" font-size="12">'
               f'problem size</text>')
    for name, values in series.items():
        values = sorted(p for p in values if p[0] > 0 and p[1] > 0)
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in values)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colors[name]}" stroke-width="2"/>')
        out.extend(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colors[name]}"/>' for x, y in values)
    return out


def plot_svg(rows: Sequence[Row], path: str) -> bool:
    """Write the two panels of the module docstring to `path`, of the rows whose checks passed; False (and
    nothing written) if there is none."""
    rows = [row for row in rows if row.passed]
    if not rows:
        return False
    names = list(dict.fromkeys(row.benchmark for row in rows))
    colors = {name: COLORS[i % len(COLORS)] for i, name in enumerate(names)}
    speedups = {n: [(r.scale, r.speedup) for r in rows if r.benchmark == n] for n in names}
    ratios = {n: [(r.scale, r.ratio) for r in rows if r.benchmark == n] for n in names}
    body = _panel(speedups, "gradient pre/post (higher: optimizing first wins)", 70, colors)
    body += _panel(ratios, "gradient/primal (post)", 580, colors)
    for i, name in enumerate(names):
        y = 400 + 18 * (i // 5)
        x = 70 + 190 * (i % 5)
        body.append(f'<rect x="{x}" y="{y - 9}" width="12" height="12" fill="{colors[name]}"/>')
        body.append(f'<text x="{x + 18}" y="{y + 2}" font-size="12">{name}</text>')
    height = 420 + 18 * ((len(names) - 1) // 5 + 1)
    with open(path, "w", encoding="utf-8") as out:
        out.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="1040" height="{height}" '
                  f'font-family="sans-serif">\n<rect width="100%" height="100%" fill="white"/>\n')
        out.write("\n".join(body))
        out.write("\n</svg>\n")
    return True
