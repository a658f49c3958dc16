// A small uPlot chart of counters per hour. uPlot draws on a canvas and styles its elements
// through the CSSOM, which the page's CSP (style-src 'self') allows.

import "uplot/dist/uPlot.min.css";

import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";

export interface Line {
  label: string;
  values: number[];
  color: string;
  /** Bars rather than a line. */
  bars?: boolean;
}

/** The smallest 1, 2 or 5 × 10^k at or above n (at least 1): a top tick that gets a label. */
export function niceCeil(n: number): number {
  if (!(n > 1)) return 1;
  const p = 10 ** Math.floor(Math.log10(n));
  for (const m of [1, 2, 5, 10]) if (m * p >= n) return m * p;
  return 10 * p;
}

/** Compact axis numbers: 950, 1.2k, 35k, 1.5M. */
export function compact(n: number): string {
  const a = Math.abs(n);
  if (a >= 1e6) return `${+(n / 1e6).toFixed(1)}M`;
  if (a >= 1e3) return `${+(n / 1e3).toFixed(1)}k`;
  return String(n);
}

/**
 * uPlot's data for hourly buckets. One more x, at the end of the current hour, lets each step
 * (and the hour still running) show as a plateau; bars leave it empty.
 */
export function chartData(hours: number[], lines: Line[]): uPlot.AlignedData {
  const last = hours[hours.length - 1];
  if (last === undefined) return [hours, ...lines.map((l) => l.values)];
  return [[...hours, last + 3600], ...lines.map((l) => [...l.values, l.bars ? null : (l.values[l.values.length - 1] ?? null)])];
}

export function HourlyChart({ hours, lines, height = 160, testId }: { hours: number[]; lines: Line[]; height?: number; testId?: string }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const shape = lines.map((l) => `${l.label}:${l.bars ? 1 : 0}`).join("|");

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const bars = uPlot.paths.bars!({ size: [0.7, 24] });
    // Counts per hour: a flat step across each hour reads truer than a slope between hours.
    const steps = uPlot.paths.stepped!({ align: 1 });
    const opts: uPlot.Options = {
      width: Math.max(200, el.clientWidth),
      height,
      cursor: { drag: { x: false, y: false } },
      legend: { show: true, live: false },
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, niceCeil(max)] } },
      axes: [
        { stroke: "#6b7780", grid: { stroke: "#eef1f3" }, ticks: { stroke: "#eef1f3" } },
        {
          stroke: "#6b7780",
          grid: { stroke: "#eef1f3" },
          ticks: { stroke: "#eef1f3" },
          size: 48,
          values: (_u, splits) => splits.map((v) => compact(Math.round(v * 100) / 100)),
        },
      ],
      series: [
        {},
        ...lines.map((l) => ({
          label: l.label,
          stroke: l.color,
          width: l.bars ? 0 : 1.5,
          fill: l.bars ? l.color : `${l.color}22`,
          points: { show: false },
          paths: l.bars ? bars : steps,
        })),
      ],
    };
    plot.current = new uPlot(opts, chartData(hours, lines), el);
    const resize = new ResizeObserver(() => plot.current?.setSize({ width: Math.max(200, el.clientWidth), height }));
    resize.observe(el);
    return () => {
      resize.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
  }, [shape, height]);

  useEffect(() => {
    plot.current?.setData(chartData(hours, lines));
  }, [hours, lines]);

  return <div class="chart" ref={box} data-testid={testId} />;
}
