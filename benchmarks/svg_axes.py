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
