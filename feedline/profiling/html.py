"""A profile report as one self-contained HTML file: no network, no JavaScript.

:func:`render_html` lays out a :class:`~feedline.profiling.records.ProfileReport` as

* a summary: throughput, elements and seconds measured, whether the consumer is input-bound
  (with the share of its time it waited in ``next()``), the cores, the report's notes;
* the bottleneck: its name, its share of the critical path, the speed-up without it;
* the advice: what to change, the rewrite as code, the predicted and the verified speed-up;
* what AUTOTUNE changed while the pipeline ran, and why;
* charts drawn here as inline SVG: self time per stage (horizontal bars, the bottleneck in
  its own colour), throughput over time (from the timeline's element counts) and the
  occupancy of every buffer over time;
* every stage's statistics in a table.

Every string that comes from the pipeline (stage names come from user functions, advice
quotes them) is escaped. Sections with nothing to show say so in a sentence.
"""

from __future__ import annotations

import dataclasses
import html
import itertools
import math
from collections.abc import Sequence
from pathlib import Path

from feedline.profiling.records import ProfileReport, StageStatistics, TimelinePoint

BAR_COLOUR = "#4e79a7"
"""Fill of the self-time bars."""
BOTTLENECK_COLOUR = "#e15759"
"""Fill of the bottleneck's bar."""
THROUGHPUT_COLOUR = "#f28e2b"
"""Stroke of the throughput line."""
BUFFER_COLOURS = ("#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#ff9da7",
                  "#86bcb6", "#8cd17d")
"""Strokes of the buffer-occupancy lines, one per buffered stage (repeating past eight)."""

MAX_THROUGHPUT_POINTS = 200
"""Throughput is drawn over at most this many intervals (samples merged beyond it): a long
run sampled every 50 ms would otherwise draw noise wider than the chart has pixels."""

_WIDTH = 1000
LABEL_CHARACTERS = 34
"""A stage's name is cut to this many characters beside its bar (the whole in its tooltip)."""
_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #222;
       margin: 0; background: #fff; }
main { max-width: 1200px; margin: 0 auto; padding: 16px 20px; box-sizing: border-box; }
h1 { font-size: 24px; margin: 8px 0 16px; }
h2 { font-size: 18px; margin: 24px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
dl.summary { display: grid; grid-template-columns: max-content auto; gap: 4px 16px; margin: 0; }
dl.summary dt { font-weight: 600; }
dl.summary dd { margin: 0; }
table { border-collapse: collapse; font-size: 12px; }
th, td { border: 1px solid #ddd; padding: 3px 4px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.number { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
div.wide { overflow-x: auto; }
table.stages, table.advice { width: 100%; }
table.stages { font-size: 11px; }
table.advice code { overflow-wrap: anywhere; }
table.stages th, table.stages td.name { overflow-wrap: anywhere; }
tr.bottleneck td { background: #fbe4e4; }
code { background: #f4f4f4; padding: 1px 3px; font-size: 12px; }
svg { display: block; font-size: 12px; }
ul.legend { list-style: none; padding: 0; margin: 4px 0; font-size: 13px; }
ul.legend li { display: inline-block; margin-right: 16px; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
p.empty { color: #666; font-style: italic; }
""".strip()


def render_html(report: ProfileReport) -> str:
    """The report as one HTML page (inline CSS and SVG, nothing fetched, no scripts).

    Args:
        report: What :func:`feedline.profile` found.

    Returns:
        The whole document, ``<!DOCTYPE html>`` first.

    Example:
        >>> from feedline.profiling.records import (
        ...     ConsumerStatistics, PipelineStatistics, ProfileReport, StageStatistics)
        >>> stage = StageStatistics(id=0, parent=None, name="map(<f>)", operation="map",
        ...     elements=50, bytes=400, self_seconds=0.5, input_seconds=0.1,
        ...     wait_seconds=0.6, parallelism=1, asynchronous=False)
        >>> statistics = PipelineStatistics(seconds=1.0, stages=(stage,),
        ...     consumer=ConsumerStatistics(calls=50, wait_seconds=0.6, between_seconds=0.4))
        >>> page = render_html(ProfileReport(statistics, input_bound=True, bottleneck=None))
        >>> "map(&lt;f&gt;)" in page, "<script" in page, "50.0 elements/s" in page
        (True, False, True)
    """
    sections = [
        _section("summary", "Summary", _summary(report)),
        _section("bottleneck", "Bottleneck", _bottleneck(report)),
        _section("advice", "Advice", _advice(report)),
        _section("tuning", "AUTOTUNE decisions", _tuning(report)),
        _section("self-time", "Self time per stage", _self_time_chart(report)),
        _section("throughput", "Throughput over time", _throughput_chart(report)),
        _section("buffers", "Buffer occupancy over time", _buffer_chart(report)),
        _section("stages", "Stages", _stage_table(report)),
    ]
    title = f"feedline profile: {_rate(report.throughput)} elements/s"
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{_e(title)}</title>",
        f"<style>\n{_CSS}\n</style>",
        "</head>",
        "<body>",
        "<main>",
        "<h1>feedline profile</h1>",
        *sections,
        "</main>",
        "</body>",
        "</html>",
        "",
    ])


def write_html(report: ProfileReport, path: str | Path) -> Path:
    """Write :func:`render_html`'s page to ``path`` (UTF-8, parent folders created).

    Args:
        report: What :func:`feedline.profile` found.
        path: The ``.html`` file to write; open it in any browser, offline.

    Returns:
        The path written.

    Example:
        >>> import tempfile
        >>> from feedline.profiling.records import (
        ...     ConsumerStatistics, PipelineStatistics, ProfileReport)
        >>> nothing = PipelineStatistics(seconds=0.0, stages=(),
        ...     consumer=ConsumerStatistics(calls=0, wait_seconds=0.0, between_seconds=0.0))
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     page = write_html(ProfileReport(nothing, False, None), Path(folder) / "p.html")
        ...     page.read_text().startswith("<!DOCTYPE html>")
        True
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(report), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------- sections
def _section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{anchor}">\n<h2>{title}</h2>\n{body}\n</section>'


def _summary(report: ProfileReport) -> str:
    statistics, consumer = report.statistics, report.statistics.consumer
    waited = f"the consumer waited {consumer.wait_fraction:.1%} of its time in next()"
    rows = [
        ("Throughput", f"{_rate(report.throughput)} elements/s"),
        ("Measured", f"{statistics.elements:,} elements in {statistics.seconds:.2f} s"),
        ("Input-bound", f"{'yes' if report.input_bound else 'no'} ({waited})"),
        ("Consumer", (f"{consumer.calls:,} next() calls: {consumer.wait_seconds:.3f} s "
                      f"waiting, {consumer.between_seconds:.3f} s between calls")),
        ("Cores", str(report.cores)),
    ]
    items = "\n".join(f"<dt>{_e(term)}</dt><dd>{_e(value)}</dd>" for term, value in rows)
    notes = ""
    if report.notes:
        notes = "\n<ul class=\"notes\">\n" + "\n".join(
            f"<li>{_e(note)}</li>" for note in report.notes) + "\n</ul>"
    return f'<dl class="summary">\n{items}\n</dl>{notes}'


def _bottleneck(report: ProfileReport) -> str:
    bottleneck = report.bottleneck
    if bottleneck is None:
        return _empty("No bottleneck was found: no stage time was measured.")
    return (f"<p><strong>{_e(bottleneck.name)}</strong> (stage {bottleneck.stage}) takes "
            f"{bottleneck.share:.1%} of the critical path's time; without it the pipeline "
            f"would be {_speedup(bottleneck.speedup_without)} faster.</p>")


def _advice(report: ProfileReport) -> str:
    if not report.advice:
        return _empty("No advice: no rewrite is predicted to make this pipeline faster.")
    rows = []
    for number, advice in enumerate(report.advice, 1):
        verified = "not verified"
        if advice.verified_speedup is not None:
            verified = _speedup(advice.verified_speedup)
        if advice.verified_range is not None:
            low, high = advice.verified_range
            verified += f"<br><small>{_speedup(low)}–{_speedup(high)}</small>"
        rows.append(f'<tr><td class="number">{number}</td><td>{_e(advice.message)}</td>'
                    f"<td><code>{_e(advice.rewrite)}</code></td>"
                    f'<td class="number">{_speedup(advice.predicted_speedup)}</td>'
                    f'<td class="number">{verified}</td></tr>')
    return ('<table class="advice">\n<tr><th>#</th><th>advice</th><th>rewrite</th>'
            "<th>predicted speed-up</th><th>verified speed-up</th></tr>\n"
            + "\n".join(rows) + "\n</table>")


def _tuning(report: ProfileReport) -> str:
    decisions = report.statistics.tuning
    if not decisions:
        return _empty("AUTOTUNE changed no setting while the pipeline was measured.")
    rows = [f'<tr><td class="number">{d.seconds:.2f}</td><td>{_e(d.stage)}</td>'
            f'<td>{_e(d.setting)}</td><td class="number">{d.old} → {d.new}</td>'
            f"<td>{_e(d.reason)}</td></tr>" for d in decisions]
    return ("<table>\n<tr><th>seconds</th><th>stage</th><th>setting</th><th>change</th>"
            "<th>reason</th></tr>\n" + "\n".join(rows) + "\n</table>")


def _stage_table(report: ProfileReport) -> str:
    stages = report.statistics.stages
    if not stages:
        return _empty("No stage was measured.")
    fields = dataclasses.fields(StageStatistics)
    names = [f.name for f in fields]
    # Formatted by the field's declared type: a float field may hold an int (0).
    floats = {f.name for f in fields if "float" in str(f.type)}
    bottleneck = report.bottleneck.stage if report.bottleneck else None
    # A break after each underscore lets the long field names wrap, so the table fits.
    header = "".join(f"<th>{name.replace('_', '_<wbr>')}</th>" for name in names)
    header += "<th>µs per element</th>"
    rows = []
    for stage in stages:
        cells = []
        for name in names:
            text, number = _stage_cell(name, getattr(stage, name), name in floats)
            kind = "number" if number else "name" if name == "name" else ""
            cells.append(f'<td class="{kind}">{text}</td>' if kind else f"<td>{text}</td>")
        cells.append(f'<td class="number">{stage.seconds_per_element * 1e6:,.1f}</td>')
        marker = ' class="bottleneck"' if stage.id == bottleneck else ""
        rows.append(f"<tr{marker}>{''.join(cells)}</tr>")
    return (f'<div class="wide"><table class="stages">\n<tr>{header}</tr>\n' + "\n".join(rows)
            + "\n</table></div>")


def _stage_cell(field_name: str, value: object, is_float: bool) -> tuple[str, bool]:
    """One cell of the stage table: its escaped text, and whether it is a number."""
    if value is None:
        return "—", False
    if isinstance(value, bool):
        return ("yes" if value else "no"), False
    if field_name == "bytes" and isinstance(value, int | float):
        return _bytes(round(value)), True
    if field_name == "buffer_mean" and isinstance(value, int | float):
        return f"{value:.1%}", True
    if is_float and isinstance(value, int | float):
        return f"{value:,.3f}", True
    if isinstance(value, int):
        return f"{value:,}", True
    return _e(str(value)), False


# --------------------------------------------------------------------------------- charts
def _self_time_chart(report: ProfileReport) -> str:
    stages = report.statistics.stages
    total = sum(stage.self_seconds for stage in stages)
    if not stages or total <= 0:
        return _empty("No stage time was measured.")
    bottleneck = report.bottleneck.stage if report.bottleneck else None
    # 34 characters of 12 px text fit the labels' 290 px even in wide letters (m, w, _).
    label_width, value_width, row, bar = 290, 140, 26, 18
    span = _WIDTH - label_width - value_width
    longest = max(stage.self_seconds for stage in stages)
    height = row * len(stages) + 10
    parts = [_svg_open(height, "Self time per stage")]
    for index, stage in enumerate(stages):
        y = 5 + index * row
        width = span * stage.self_seconds / longest
        colour = BOTTLENECK_COLOUR if stage.id == bottleneck else BAR_COLOUR
        name = _e(stage.name)
        parts.append(
            f'<text x="{label_width - 8}" y="{y + bar - 4}" text-anchor="end">'
            f"<title>{name}</title>{_e(_shorten(stage.name, LABEL_CHARACTERS))}</text>")
        parts.append(f'<rect x="{label_width}" y="{y}" width="{width:.1f}" height="{bar}" '
                     f'fill="{colour}"><title>{name}</title></rect>')
        parts.append(f'<text x="{label_width + width + 6:.1f}" y="{y + bar - 4}">'
                     f"{stage.self_seconds:.3f} s ({stage.self_seconds / total:.1%})</text>")
    parts.append(f'<line x1="{label_width}" y1="0" x2="{label_width}" y2="{height}" '
                 'stroke="#888"/>')
    parts.append("</svg>")
    caption = ("<p>Time each stage spent in its own code over all of its threads (its "
               "inputs' time excluded)")
    caption += "; the bottleneck in red.</p>" if bottleneck is not None else ".</p>"
    return "\n".join(parts) + "\n" + caption


def _throughput_chart(report: ProfileReport) -> str:
    points = _throughput(report.statistics.timeline)
    if not points:
        return _empty("No throughput over time: the timeline has fewer than two samples.")
    mean = report.throughput
    chart = _line_chart(
        [(THROUGHPUT_COLOUR, points)],
        x_max=report.statistics.timeline[-1].seconds,
        y_max=max([rate for _, rate in points] + [mean]),
        y_label="elements/s",
        reference=mean,
        title="Throughput over time")
    return chart + ("\n<p>Elements handed out per second between timeline samples; the dashed "
                    f"line is the mean over the run ({_rate(mean)} elements/s).</p>")


def _buffer_chart(report: ProfileReport) -> str:
    timeline = report.statistics.timeline
    ids = sorted({int(key) for point in timeline for key in point.buffers})
    if not timeline or not ids:
        return _empty("No buffer occupancy: no buffered stage was sampled.")
    stages = {stage.id: stage for stage in report.statistics.stages}
    series = []
    legend = []
    for index, stage_id in enumerate(ids):
        colour = BUFFER_COLOURS[index % len(BUFFER_COLOURS)]
        values = [(point.seconds, 100.0 * share) for point in timeline
                  for key, share in point.buffers.items() if int(key) == stage_id]
        series.append((colour, values))
        stage = stages.get(stage_id)
        if stage is None:
            label = f"stage {stage_id}"
        else:
            size = f", {stage.buffer_size} elements" if stage.buffer_size else ""
            label = f"{stage.name} (stage {stage_id}{size})"
        legend.append(f'<li><span class="swatch" style="background:{colour}"></span>'
                      f"{_e(label)}</li>")
    chart = _line_chart(series, x_max=max(point.seconds for point in timeline), y_max=100.0,
                        y_label="% filled", title="Buffer occupancy over time", percent=True)
    return chart + '\n<ul class="legend">\n' + "\n".join(legend) + "\n</ul>"


def _throughput(timeline: Sequence[TimelinePoint]) -> list[tuple[float, float]]:
    """(time, elements/s) per interval between samples, at the interval's middle; merged
    samples beyond :data:`MAX_THROUGHPUT_POINTS` intervals."""
    if len(timeline) < 2:
        return []
    stride = max(1, math.ceil((len(timeline) - 1) / MAX_THROUGHPUT_POINTS))
    picked = list(timeline[::stride])
    if picked[-1] is not timeline[-1]:
        picked.append(timeline[-1])
    points = []
    for before, after in itertools.pairwise(picked):
        elapsed = after.seconds - before.seconds
        if elapsed > 0:
            points.append(((before.seconds + after.seconds) / 2,
                           (after.elements - before.elements) / elapsed))
    return points


def _line_chart(series: Sequence[tuple[str, Sequence[tuple[float, float]]]], *, x_max: float,
                y_max: float, y_label: str, title: str, percent: bool = False,
                reference: float | None = None) -> str:
    """An SVG line chart of (seconds, value) series from 0, with gridlines and axis labels;
    ``reference`` draws a dashed horizontal line at that value."""
    height, left, right, top, bottom = 260, 76, 24, 16, 40
    plot_w, plot_h = _WIDTH - left - right, height - top - bottom
    x_ticks = _ticks(x_max)
    y_ticks = [0.0, 25.0, 50.0, 75.0, 100.0] if percent else _ticks(y_max)
    x_top, y_top = x_ticks[-1], y_ticks[-1]

    def x(value: float) -> float:
        return left + plot_w * value / x_top

    def y(value: float) -> float:
        return top + plot_h * (1 - max(0.0, value) / y_top)

    parts = [_svg_open(height, title)]
    for tick in y_ticks:
        parts.append(f'<line x1="{left}" y1="{y(tick):.1f}" x2="{left + plot_w}" '
                     f'y2="{y(tick):.1f}" stroke="#e3e3e3"/>')
        text = f"{tick:.0f}%" if percent else _tick_label(tick)
        parts.append(f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">'
                     f"{text}</text>")
    for tick in x_ticks:
        parts.append(f'<line x1="{x(tick):.1f}" y1="{top + plot_h}" x2="{x(tick):.1f}" '
                     f'y2="{top + plot_h + 4}" stroke="#888"/>')
        parts.append(f'<text x="{x(tick):.1f}" y="{top + plot_h + 18}" text-anchor="middle">'
                     f"{_tick_label(tick)}</text>")
    parts.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" '
                 f'y2="{top + plot_h}" stroke="#888"/>')
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 4}" text-anchor="middle">'
                 "seconds</text>")
    parts.append(f'<text transform="translate(14 {top + plot_h / 2:.1f}) rotate(-90)" '
                 f'text-anchor="middle">{_e(y_label)}</text>')
    if reference is not None:
        parts.append(f'<line x1="{left}" y1="{y(reference):.1f}" x2="{left + plot_w}" '
                     f'y2="{y(reference):.1f}" stroke="#555" stroke-dasharray="6 4"/>')
    for colour, values in series:
        coordinates = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in values)
        parts.append(f'<polyline points="{coordinates}" fill="none" stroke="{colour}" '
                     'stroke-width="2.5" stroke-linejoin="round"/>')
    parts.append("</svg>")
    return "\n".join(parts)


def _ticks(maximum: float, count: int = 5) -> list[float]:
    """Round tick values from 0 past ``maximum`` (steps of 1, 2 or 5 times a power of 10)."""
    if not maximum > 0:
        return [0.0, 1.0]
    raw = maximum / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(math.ceil(maximum / step - 1e-9) + 1)]


def _tick_label(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) else f"{value:,.3g}"


def _svg_open(height: int, label: str) -> str:
    # Inline SVG in HTML needs no xmlns; leaving it out keeps the page free of any URL.
    return (f'<svg width="{_WIDTH}" height="{height}" viewBox="0 0 {_WIDTH} {height}" '
            f'role="img" aria-label="{_e(label)}">')


# ------------------------------------------------------------------------------ formatting
def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _empty(sentence: str) -> str:
    return f'<p class="empty">{_e(sentence)}</p>'


def _rate(value: float) -> str:
    return f"{value:,.1f}"


def _speedup(value: float) -> str:
    return f"{value:.2f}×"


def _bytes(value: int) -> str:
    """Decimal units, as disks and networks count: ``1.5 MB`` is 1,500,000 bytes."""
    if value < 1000:
        return f"{value} B"
    scaled = float(value)
    for unit in ("kB", "MB", "GB", "TB"):
        scaled /= 1000
        if scaled < 1000:
            break
    return f"{scaled:,.1f} {unit}"


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"
