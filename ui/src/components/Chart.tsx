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
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, Math.ceil(max * 1.15))] } },
      axes: [
        { stroke: "#6b7780", grid: { stroke: "#eef1f3" }, ticks: { stroke: "#eef1f3" } },
        { stroke: "#6b7780", grid: { stroke: "#eef1f3" }, ticks: { stroke: "#eef1f3" }, size: 44 },
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
    plot.current = new uPlot(opts, [hours, ...lines.map((l) => l.values)], el);
    const resize = new ResizeObserver(() => plot.current?.setSize({ width: Math.max(200, el.clientWidth), height }));
    resize.observe(el);
    return () => {
      resize.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
  }, [shape, height]);

  useEffect(() => {
    plot.current?.setData([hours, ...lines.map((l) => l.values)]);
  }, [hours, lines]);

  return <div class="chart" ref={box} data-testid={testId} />;
}
