// A small uPlot chart of counters per hour. uPlot draws on a canvas and styles its elements
// through the CSSOM, which the page's CSP (style-src 'self') allows. A canvas does not follow CSS,
// so its colours are read from the theme's custom properties (styles.css) and the chart is drawn
// again when the theme changes.

import "uplot/dist/uPlot.min.css";

import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";

import { useStore } from "../store";
import { theme as themeStore } from "../theme";

export interface Line {
  label: string;
  values: number[];
  /** A custom property of styles.css that holds the colour in each theme (`--series-deliveries`). */
  color: `--${string}`;
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

/** A colour for the canvas: the custom property's value in the theme shown, as `#rrggbb`. */
export function themeColor(name: `--${string}`, read: (name: string) => string = cssProperty): string {
  const value = read(name).trim();
  return /^#[0-9a-f]{6}$/i.test(value) ? value : "#808080";
}

function cssProperty(name: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name);
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
  const theme = useStore(themeStore);

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const bars = uPlot.paths.bars!({ size: [0.7, 24] });
    // Counts per hour: a flat step across each hour reads truer than a slope between hours.
    const steps = uPlot.paths.stepped!({ align: 1 });
    const axis = themeColor("--chart-axis");
    const grid = themeColor("--chart-grid");
    const opts: uPlot.Options = {
      width: Math.max(200, el.clientWidth),
      height,
      cursor: { drag: { x: false, y: false } },
      legend: { show: true, live: false },
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, niceCeil(max)] } },
      axes: [
        { stroke: axis, grid: { stroke: grid }, ticks: { stroke: grid } },
        {
          stroke: axis,
          grid: { stroke: grid },
          ticks: { stroke: grid },
          size: 48,
          values: (_u, splits) => splits.map((v) => compact(Math.round(v * 100) / 100)),
        },
      ],
      series: [
        {},
        ...lines.map((l) => {
          const color = themeColor(l.color);
          return {
            label: l.label,
            stroke: color,
            width: l.bars ? 0 : 1.5,
            fill: l.bars ? color : `${color}22`,
            points: { show: false },
            paths: l.bars ? bars : steps,
          };
        }),
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
  }, [shape, height, theme]);

  useEffect(() => {
    plot.current?.setData(chartData(hours, lines));
  }, [hours, lines]);

  return <div class="chart" ref={box} data-testid={testId} />;
}
