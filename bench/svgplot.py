"""The benchmarks' line plots: SVG drawn here as text, and PNG drawn by matplotlib.

The benchmark reports want a latency CDF per system and RSS over time, as PNGs next to
docs/benchmarks.md (issue 17). A PNG is a binary, and the project commits none: so
`write` puts both forms in the folder, the SVG (text, small, diff-able, drawn here
without a plotting library) is what docs link and git keeps, and the PNG (matplotlib,
from the `demo` extra; skipped without it) is for viewers that want a raster image
and is ignored by git (docs/plots/.gitignore).
"""

from __future__ import annotations

from html import escape
from pathlib import Path

WIDTH, HEIGHT = 640, 360
LEFT, RIGHT, TOP, BOTTOM = 60, 150, 20, 40
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")


def _nice(top: float) -> float:
    if top <= 0:
        return 1.0
    step = 10 ** len(str(int(top))) / 10
    for factor in (1, 2, 2.5, 5, 10):
        if top <= step * factor:
            return step * factor
    return top


def lines_svg(series: dict[str, list[tuple[float, float]]], x_label: str, y_label: str) -> str:
    """One polyline per named series of (x, y) points."""
    points = [p for values in series.values() for p in values]
    x_max = _nice(max((x for x, _ in points), default=1.0))
    y_max = _nice(max((y for _, y in points), default=1.0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def at(x: float, y: float) -> str:
        return f"{LEFT + x / x_max * plot_w:.1f},{TOP + plot_h - y / y_max * plot_h:.1f}"

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" '
        'stroke="black"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="black"/>',
    ]
    for i in range(5):
        fx, fy = x_max * i / 4, y_max * i / 4
        x, y = LEFT + plot_w * i / 4, TOP + plot_h - plot_h * i / 4
        out.append(f'<text x="{x:.0f}" y="{TOP + plot_h + 14}" text-anchor="middle">{fx:g}</text>')
        out.append(f'<text x="{LEFT - 4}" y="{y + 4:.0f}" text-anchor="end">{fy:g}</text>')
        out.append(
            f'<line x1="{LEFT}" y1="{y:.0f}" x2="{LEFT + plot_w}" y2="{y:.0f}" stroke="#ddd"/>'
        )
    out.append(
        f'<text x="{LEFT + plot_w / 2:.0f}" y="{HEIGHT - 8}" text-anchor="middle">'
        f"{escape(x_label)}</text>"
    )
    out.append(
        f'<text x="14" y="{TOP + plot_h / 2:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {TOP + plot_h / 2:.0f})">{escape(y_label)}</text>'
    )
    for n, (name, values) in enumerate(series.items()):
        colour = COLOURS[n % len(COLOURS)]
        path = " ".join(at(x, y) for x, y in values)
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/>')
        ly = TOP + 14 + 16 * n
        out.append(
            f'<line x1="{WIDTH - RIGHT + 10}" y1="{ly - 4}" x2="{WIDTH - RIGHT + 30}" '
            f'y2="{ly - 4}" stroke="{colour}" stroke-width="2"/>'
        )
        out.append(f'<text x="{WIDTH - RIGHT + 34}" y="{ly}">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def cdf_series(samples: dict[str, list[float]]) -> dict[str, list[tuple[float, float]]]:
    """The cumulative share of samples at or below x, per named sample set (at most
    200 points each, so the file stays small)."""
    series: dict[str, list[tuple[float, float]]] = {}
    for name, values in samples.items():
        ordered = sorted(values)
        if not ordered:
            continue
        step = max(1, len(ordered) // 200)
        points = [(v, (i + 1) / len(ordered)) for i, v in enumerate(ordered)][::step]
        points.append((ordered[-1], 1.0))
        series[name] = points
    return series


def write(
    folder: Path,
    stem: str,
    series: dict[str, list[tuple[float, float]]],
    x_label: str,
    y_label: str,
) -> list[Path]:
    """`stem`.svg and (with matplotlib) `stem`.png of `series` in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / f"{stem}.svg"]
    written[0].write_text(lines_svg(series, x_label, y_label))
    try:
        import matplotlib  # noqa: PLC0415 - the optional `demo` extra

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return written
    figure, axes = plt.subplots(figsize=(WIDTH / 100, HEIGHT / 100))
    for name, values in series.items():
        axes.plot([x for x, _ in values], [y for _, y in values], label=name)
    axes.set_xlabel(x_label)
    axes.set_ylabel(y_label)
    axes.grid(color="#ddd")
    axes.legend(loc="best")
    figure.tight_layout()
    written.append(folder / f"{stem}.png")
    figure.savefig(written[-1], dpi=100)
    plt.close(figure)
    return written
