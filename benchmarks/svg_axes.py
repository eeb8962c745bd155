"""The plot area the benchmarks' SVG plots share: data to pixels, and the picture's opening elements."""

from __future__ import annotations

from typing import Callable


def plot_area(
    w: int, h: int, pad: int, right: float, top: float
) -> tuple[Callable[[float], float], Callable[[float], float], list[str]]:
    """``px`` and ``py`` map x in [0, right] and y in [0, top] into a ``w`` x ``h`` picture with ``pad`` margins;
    the list opens the SVG on a white background."""

    def px(x: float) -> float:
        return pad + x / right * (w - 2 * pad)

    def py(y: float) -> float:
        return h - pad - y / top * (h - 2 * pad)

    head = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
    ]
    return px, py, head


COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")


def _tick(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def line_plot(
    series: list[tuple[str, list[tuple[float, float]]]],
    *,
    x_label: str,
    y_label: str,
    title: str,
    w: int = 640,
    h: int = 380,
    pad: int = 64,
) -> str:
    """An SVG picture of named lines through ``(x, y)`` points, axes from 0, one colour per line, a legend
    top left and the points' x values as ticks."""
    points = [p for _, line in series for p in line]
    right = max(x for x, _ in points) * 1.05 or 1.0
    top = max(y for _, y in points) * 1.15 or 1.0
    px, py, head = plot_area(w, h, pad, right, top)
    parts = [
        *head,
        f'<text x="{w / 2}" y="18" text-anchor="middle" font-size="13">{title}</text>',
        f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>',
    ]
    for frac in (0, 0.25, 0.5, 0.75, 1):
        y = top * frac
        parts.append(f'<text x="{pad - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{_tick(y)}</text>')
        parts.append(f'<line x1="{pad}" y1="{py(y):.1f}" x2="{w - pad}" y2="{py(y):.1f}" stroke="#ddd"/>')
    last = -1e9
    for x in sorted({x for x, _ in points}):
        if px(x) - last >= 36:  # ticks closer than that would print over each other
            parts.append(f'<text x="{px(x):.1f}" y="{h - pad + 14}" text-anchor="middle">{_tick(x)}</text>')
            last = px(x)
    for i, (name, line) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in line)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>' for x, y in line]
        parts.append(f'<text x="{pad + 10}" y="{pad + 4 + 14 * i}" fill="{colour}">{name}</text>')
    parts += [
        f'<text x="{w / 2}" y="{h - 20}" text-anchor="middle">{x_label}</text>',
        f'<text x="16" y="{h / 2}" transform="rotate(-90 16 {h / 2})" text-anchor="middle">{y_label}</text>',
        "</svg>",
    ]
    return "\n".join(parts) + "\n"
