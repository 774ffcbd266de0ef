"""The paper's two figures (producer and consumer throughput) as PNG, with matplotlib.

The paper plots throughput over time; a run here is too short for a time series to
say more than its median, so each figure is a bar chart of the median messages per
second, one bar per system and case, with the value written on the bar and the spread
of the runs as an error bar. A log scale keeps a 100x gap readable.
"""

from __future__ import annotations

from pathlib import Path

from peers.report import CONSUME, PRODUCE_1, PRODUCE_50, Results, throughput_rows

COLORS = {
    "logferry": "#1b7837",
    "RabbitMQ": "#f1a340",
    "ActiveMQ": "#5e3c99",
    "NATS JetStream": "#2166ac",
    "Redis Streams": "#b2182b",
}


def draw(results: Results, out_dir: Path) -> list[Path]:
    """Write producer.png and consumer.png into ``out_dir``; return their paths (none
    when nothing was measured)."""
    if not throughput_rows(results):
        return []
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, title, cases in (
        ("producer.png", "Producer performance (200 B messages)", (PRODUCE_1, PRODUCE_50)),
        ("consumer.png", "Consumer performance (200 B messages)", (CONSUME,)),
    ):
        path = out_dir / name
        _bars(results, title, cases, path)
        paths.append(path)
    return paths


def _bars(results: Results, title: str, cases: tuple[str, ...], path: Path) -> None:
    import matplotlib.pyplot as plt

    rows = {(r.system, r.case): r for r in throughput_rows(results)}
    systems = [s for s in results.systems if any((s, c) in rows for c in cases)]
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    width = 0.8 / max(len(systems), 1)
    for i, system in enumerate(systems):
        xs, heights, low, high = [], [], [], []
        for j, case in enumerate(cases):
            row = rows.get((system, case))
            if row is None:
                continue
            xs.append(j - 0.4 + width * (i + 0.5))
            heights.append(row.rate)
            low.append(row.rate - row.low)
            high.append(row.high - row.rate)
        bars = ax.bar(
            xs,
            heights,
            width * 0.95,
            label=system,
            color=COLORS.get(system, "#888888"),
            yerr=[low, high],
            capsize=3,
            ecolor="#333333",
        )
        for bar, value, above in zip(bars, heights, high, strict=True):
            ax.annotate(
                f"{value:,.0f}",
                (bar.get_x() + bar.get_width() / 2, value + above),
                xytext=(0, 3),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=8,
            )
    ax.set_xticks(range(len(cases)), [c.replace(", ", "\n", 1) for c in cases])
    ax.set_ylabel("messages per second (median of runs)")
    ax.set_yscale("log")
    ax.set_title(f"{title}\n{results.messages:,} messages per run, {results.runs} run(s)", fontsize=10)
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
