"""Turn the runs' records into medians, ratios, a Markdown table and ``RESULTS.md``.

Pure functions of the records, so ``tests/benchmarks`` can check them without running anything.
"""

from __future__ import annotations

import os
import platform
import statistics
from dataclasses import dataclass, field
from typing import Any

MIB = 1 << 20
# What each workload's headline number is, and whether more is better.
HEADLINE = {
    "chess": ("examples/s", "throughput", True),
    "images": ("images/s", "throughput", True),
    "images_tfrecord": ("images/s", "throughput", True),
    "overhead": ("elements/s", "throughput", True),
    "python_heavy": ("lines/s", "throughput", True),
    "startup": ("s to first batch", "first_batch_s", False),
    "shuffle_memory": ("peak MiB over the buffer", "memory_over_buffer", False),
    "feed_chess": ("examples/s", "throughput", True),
    "feed_images": ("images/s", "throughput", True),
}


@dataclass
class Row:
    """The summary of one (workload, system, variant) over its rounds."""

    workload: str
    system: str
    variant: str
    status: str = "ok"  # "ok", or why not (install failed, run failed, check failed, timeout)
    runs: int = 0
    median: float | None = None
    low: float | None = None
    high: float | None = None
    first_batch_s: float | None = None
    cpu_s: float | None = None
    peak_rss: float | None = None
    memory_over_buffer: float | None = None
    # feed: fraction of wall time the trainer waited for input (and after the first batch),
    # its nominal limit batch / (gil + sleep), and its measured rate with input free.
    waited: float | None = None
    steady_waited: float | None = None
    limit: float | None = None
    trainer_alone: float | None = None
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.system} ({self.variant})"


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(records: list[dict[str, Any]], workload: str, system: str, variant: str,
              status: str = "ok") -> Row:
    """Medians (and min–max of the headline value) of one configuration's successful runs.

    A configuration with any failed run keeps the first failure as its status, so a flaky
    peer is visible, while the numbers of its successful runs are still shown.

    Example:
        >>> recs = [{"ok": True, "throughput": t, "first_batch_s": 0.1, "cpu_s": 2.0,
        ...          "peak_rss": 100 * MIB} for t in (10.0, 30.0, 20.0)]
        >>> row = summarize(recs, "chess", "tf", "expert")
        >>> row.median, row.low, row.high, row.runs
        (20.0, 10.0, 30.0, 3)
    """
    row = Row(workload, system, variant, status=status)
    good = [r for r in records if r.get("ok")]
    bad = [r for r in records if not r.get("ok")]
    if bad and row.status == "ok":
        row.status = bad[0].get("error", "failed")
    row.runs = len(good)
    key = HEADLINE.get(workload, ("", "throughput", True))[1]
    values = [r[key] for r in good if r.get(key) is not None]
    row.median = _median(values)
    row.low = min(values) if values else None
    row.high = max(values) if values else None
    row.first_batch_s = _median([r["first_batch_s"] for r in good if "first_batch_s" in r])
    row.cpu_s = _median([r["cpu_s"] for r in good if r.get("cpu_s") is not None])
    peaks = [r["peak_rss"] for r in good if r.get("peak_rss")]
    row.peak_rss = _median(peaks) / MIB if peaks else None
    ratios = [r["memory_over_buffer"] for r in good if r.get("memory_over_buffer") is not None]
    row.memory_over_buffer = _median(ratios)
    for name in ("waited", "steady_waited", "limit", "trainer_alone"):
        setattr(row, name, _median([r[name] for r in good if r.get(name) is not None]))
    for name in ("gil_ms", "sleep_ms", "digest_ms", "epochs"):
        found = next((r[name] for r in good if r.get(name) is not None), None)
        if found is not None:
            row.extra[name] = found
    row.notes = next((r.get("notes", "") for r in good if r.get("notes")), "")
    return row


def best_peer(rows: list[Row]) -> Row | None:
    """The best successful non-feedline row by the workload's headline number."""
    peers = [r for r in rows if r.system != "feedline" and r.status == "ok"
             and r.median is not None]
    if not peers:
        return None
    more_is_better = HEADLINE[peers[0].workload][2]
    return (max if more_is_better else min)(peers, key=lambda r: r.median)


def best_feedline(rows: list[Row]) -> Row | None:
    """feedline's best successful variant by the headline number (else its first row)."""
    mine = [r for r in rows if r.system == "feedline" and r.status == "ok"
            and r.median is not None]
    if not mine:
        return next((r for r in rows if r.system == "feedline"), None)
    more_is_better = HEADLINE[mine[0].workload][2]
    return (max if more_is_better else min)(mine, key=lambda r: r.median)


def ratio(rows: list[Row]) -> tuple[float | None, Row | None]:
    """``feedline / best peer`` of the headline number (``None`` when either is missing).

    feedline's best successful variant counts (``recommended`` or ``processes``).
    """
    mine = best_feedline(rows)
    if mine is not None and (mine.status != "ok" or mine.median is None):
        mine = None
    best = best_peer(rows)
    if mine is None or best is None or not best.median:
        return None, best
    return mine.median / best.median, best


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "–"
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _is_feed(row_workload: str) -> bool:
    return row_workload.startswith("feed_")


def feed_heading(rows: list[Row]) -> str:
    """The trainer of a feed section: its step and its limit (nominal and measured)."""
    known = next((r for r in rows if "gil_ms" in r.extra), None)
    if known is None:
        return ""
    limit = next((r.limit for r in rows if r.limit is not None), None)
    alone = _median([r.trainer_alone for r in rows if r.trainer_alone is not None])
    digest = known.extra.get("digest_ms")
    of_it = f" ({digest:.2f} ms of it the batch's digest)" if digest else ""
    epochs = known.extra.get("epochs", 1)
    repeated = f" The data set is repeated {epochs} times." if epochs > 1 else ""
    return (f"Trainer: {known.extra['gil_ms']:g} ms of Python holding the GIL{of_it} + "
            f"{known.extra['sleep_ms']:g} ms in time.sleep per batch; limit (input free) "
            f"batch / step = {_fmt(limit)}/s (measured with one batch repeated: "
            f"{_fmt(alone)}/s). 'of limit' = median / limit; 'waited' = share of wall time "
            "blocked waiting for input (start-up included); 'after 1st' = the same after "
            f"the first batch.{repeated}\n")


def _section(workload: str, rows: list[Row]) -> list[str]:
    unit, _, more_is_better = HEADLINE[rows[0].workload if rows else workload]
    better = "higher is better" if more_is_better else "lower is better"
    lines = [f"### {workload} — {unit} ({better})\n"]
    if rows and _is_feed(rows[0].workload):
        lines.append(feed_heading(rows))
        lines.append("| system | median | min–max | of limit | waited | after 1st | first batch s "
                     "| CPU s | peak RSS MiB | status | notes |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            spread = f"{_fmt(r.low)}–{_fmt(r.high)}" if r.low is not None else "–"
            share = r.median / r.limit if r.median is not None and r.limit else None
            lines.append(f"| {r.label} | {_fmt(r.median)} | {spread} | {_pct(share)} "
                         f"| {_pct(r.waited)} | {_pct(r.steady_waited)} "
                         f"| {_fmt(r.first_batch_s)} | {_fmt(r.cpu_s)} | {_fmt(r.peak_rss)} "
                         f"| {r.status} | {r.notes} |")
        return [*lines, ""]
    lines.append("| system | median | min–max | first batch s | CPU s | peak RSS MiB "
                 "| status | notes |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for r in rows:
        spread = f"{_fmt(r.low)}–{_fmt(r.high)}" if r.low is not None else "–"
        lines.append(f"| {r.label} | {_fmt(r.median)} | {spread} | {_fmt(r.first_batch_s)} "
                     f"| {_fmt(r.cpu_s)} | {_fmt(r.peak_rss)} | {r.status} | {r.notes} |")
    return [*lines, ""]


def _summary_value(row: Row | None, label: bool) -> str:
    if row is None:
        return "–"
    text = _fmt(row.median)
    if _is_feed(row.workload):
        text += f" (waited {_pct(row.waited)})"
    return f"{row.label}: {text}" if label else text


def markdown(rows_by_workload: dict[str, list[Row]]) -> str:
    """The results table: one section per workload, then the summary of ratios.

    feedline's column is its best variant (named when it has several); feed rows add the
    fraction of time the trainer waited for input.
    """
    lines: list[str] = []
    summary = ["| workload | metric | feedline | best peer | feedline / best peer |",
               "|---|---|---|---|---|"]
    for workload, rows in rows_by_workload.items():
        unit = HEADLINE[rows[0].workload if rows else workload][0]
        lines.extend(_section(workload, rows))
        value, best = ratio(rows)
        mine = best_feedline(rows)
        several = sum(r.system == "feedline" for r in rows) > 1
        summary.append(
            f"| {workload} | {unit} | {_summary_value(mine, several)} | "
            f"{_summary_value(best, True)} | {_fmt(value) if value is not None else '–'} |")
    return "\n".join(["### Summary\n", *summary, "", *lines])


def tuning_markdown(trials: list[dict[str, Any]], chosen: dict[tuple[str, str], int]) -> str:
    """The worker-count trials of the expert DataLoader/Grain pipelines, and the choices.

    Example:
        >>> print(tuning_markdown([{"system": "torch", "workload": "chess", "workers": 2,
        ...                         "throughput": 10.0}], {("torch", "chess"): 2}))
        ### worker processes tried (DataLoader, Grain, feedline processes; short runs)
        <BLANKLINE>
        | system | workload | throughput by num_workers | chosen |
        |---|---|---|---|
        | torch | chess | 2: 10 | 2 |
    """
    lines = ["### worker processes tried (DataLoader, Grain, feedline processes; short runs)", "",
             "| system | workload | throughput by num_workers | chosen |", "|---|---|---|---|"]
    for (system, workload), n in chosen.items():
        tried = [t for t in trials if t["system"] == system and t["workload"] == workload]
        if not tried:
            continue
        text = ", ".join(f"{t['workers']}: {_fmt(t['throughput'])}" for t in tried)
        lines.append(f"| {system} | {workload} | {text} | {n} |")
    return "\n".join(lines)


def sweep_markdown(records: list[dict[str, Any]], counts: list[int]) -> str:
    """Throughput per worker count (medians over rounds) of the systems that have one.

    Systems without a worker count (threads in one process) are one reference value.

    Example:
        >>> recs = [{"system": "torch", "variant": "expert", "workload": "chess", "workers": n,
        ...          "ok": True, "throughput": 10.0 * n} for n in (1, 2)]
        >>> recs.append({"system": "tf", "variant": "expert", "workload": "chess",
        ...              "workers": None, "ok": True, "throughput": 15.0})
        >>> print(sweep_markdown(recs, [1, 2]))
        ### worker-count sweep — throughput (elements/s; median over rounds)
        <BLANKLINE>
        | workload | system | 1 | 2 | best |
        |---|---|---|---|---|
        | chess | torch (expert) | 10 | 20 | 20 (2) |
        | chess | tf (expert), one process | 15 | 15 | 15 |
    """
    lines = ["### worker-count sweep — throughput (elements/s; median over rounds)", "",
             "| workload | system | " + " | ".join(str(n) for n in counts) + " | best |",
             "|---|---|" + "---|" * (len(counts) + 1)]
    keys: list[tuple[str, str, str]] = []
    for r in records:
        key = (r["workload"], r["system"], r["variant"])
        if key not in keys:
            keys.append(key)
    keys.sort(key=lambda k: (k[0], any(r.get("workers") is None for r in records
                                       if (r["workload"], r["system"], r["variant"]) == k)))
    for workload, system, variant in keys:
        mine = [r for r in records if (r["workload"], r["system"], r["variant"])
                == (workload, system, variant)]
        if all(r.get("workers") is None for r in mine):
            good = [r["throughput"] for r in mine if r.get("ok") and r.get("throughput")]
            value = _median(good)
            cell = _fmt(value) if value is not None else _first_error(mine)
            lines.append(f"| {workload} | {system} ({variant}), one process | "
                         + " | ".join(cell for _ in counts) + f" | {cell} |")
            continue
        cells, best = [], None
        for n in counts:
            runs = [r for r in mine if r.get("workers") == n]
            good = [r["throughput"] for r in runs if r.get("ok") and r.get("throughput")]
            value = _median(good)
            if value is not None and (best is None or value > best[0]):
                best = (value, n)
            cells.append(_fmt(value) if value is not None else _first_error(runs))
        best_text = f"{_fmt(best[0])} ({best[1]})" if best else "–"
        lines.append(f"| {workload} | {system} ({variant}) | " + " | ".join(cells)
                     + f" | {best_text} |")
    return "\n".join(lines)


def _first_error(runs: list[dict[str, Any]]) -> str:
    failed = next((r for r in runs if not r.get("ok")), None)
    if failed is None:
        return "–"
    error = str(failed.get("error", "failed"))
    return error.split(":")[0][:40] if error else "failed"


def machine() -> dict[str, Any]:
    """nproc, CPU model, RAM, OS and Python of this machine."""
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    ram = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    ram = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"nproc": os.cpu_count(), "cpu": model,
            "ram_gib": round(ram / (1 << 30), 1) if ram else None,
            "os": platform.platform(), "python": platform.python_version(),
            "loadavg_at_start": [round(x, 2) for x in load] if load else None}


def results_md(date: str, host: dict[str, Any], command: str, table: str,
               checks: list[str], extra_sections: list[str], versions: dict[str, str]) -> str:
    """The text of ``benchmarks/RESULTS.md``."""
    check_text = "\n".join(f"- {c}" for c in checks) or "- (not run)"
    version_text = ", ".join(f"{k} {v}" for k, v in versions.items())
    return "\n".join([
        "# Benchmark results",
        "",
        f"- Date: {date}",
        (f"- Machine: {host['nproc']} CPUs ({host['cpu']}), {host['ram_gib']} GiB RAM, "
         f"{host['os']}, Python {host['python']}; load average at start "
         f"{host.get('loadavg_at_start')}"
         + (f", at the end {host['loadavg_at_end']}" if host.get("loadavg_at_end") else "")
         + " (the machine is shared: a load above its CPU count means other work ran "
           "alongside)"),
        f"- Versions: {version_text}",
        f"- Command: `{command}`",
        "",
        "Throughput counts elements from building the pipeline to the last batch (start-up",
        "included; a run stopped at the time cap counts what it produced until then). CPU s",
        "counts the process and its worker processes; peak RSS is the largest sampled sum of",
        "the proportional set size (PSS) of the process tree, or the main process's own peak",
        "RSS (VmHWM) if larger. Each system's code is in benchmarks/README.md.",
        "",
        "## Correctness checks",
        "",
        check_text,
        "",
        "## Results",
        "",
        table,
        *extra_sections,
        "",
    ])
