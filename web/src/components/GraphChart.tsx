// The 24-hour graph drawn by uPlot (loaded on demand: only this page needs it).
import { useEffect, useRef } from 'preact/hooks';
import type uPlot from 'uplot';
import { formatHour } from '../format';
import { GRAPH_LINES, type GraphSeries } from '../graph';

type UPlotClass = typeof uPlot;
let uPlotClass: Promise<UPlotClass> | null = null;
function loadUPlot(): Promise<UPlotClass> {
  uPlotClass ??= Promise.all([import('uplot'), import('uplot/dist/uPlot.min.css')]).then(
    ([module]) => (module as unknown as { default: UPlotClass }).default,
  );
  return uPlotClass;
}

function chartData(series: GraphSeries): uPlot.AlignedData {
  return [series.hours, ...GRAPH_LINES.map((line) => series[line.key])];
}

export function GraphChart({ series, label }: { series: GraphSeries; label: string }) {
  const container = useRef<HTMLDivElement>(null);
  const chart = useRef<uPlot | null>(null);
  const latest = useRef(series);
  latest.current = series;

  useEffect(() => {
    let cancelled = false;
    let observer: ResizeObserver | undefined;
    void loadUPlot().then((UPlot) => {
      const element = container.current;
      if (cancelled || !element) return;
      const width = () => Math.max(280, element.clientWidth);
      const options: uPlot.Options = {
        width: width(),
        height: 320,
        scales: { x: { time: true }, y: { range: [0, 100] } },
        cursor: { drag: { x: false, y: false } },
        series: [
          { label: 'Hour', value: (_u, value) => (value == null ? '—' : formatHour(value)) },
          ...GRAPH_LINES.map(
            (line): uPlot.Series => ({
              label: line.label,
              stroke: line.color,
              width: line.key === 'score' ? 3 : 1.5,
              dash: line.key === 'score' ? undefined : [6, 4],
              fill: line.key === 'score' ? 'rgba(31, 95, 191, 0.08)' : undefined,
              points: { show: true, size: line.key === 'score' ? 7 : 5 },
              value: (_u, value) => (value == null ? '—' : String(value)),
            }),
          ),
        ],
        axes: [
          { values: (_u, splits) => splits.map((split) => formatHour(split)) },
          { label: 'Score / %', size: 56 },
        ],
      };
      chart.current = new UPlot(options, chartData(latest.current), element);
      observer = new ResizeObserver(() => chart.current?.setSize({ width: width(), height: 320 }));
      observer.observe(element);
    });
    return () => {
      cancelled = true;
      observer?.disconnect();
      chart.current?.destroy();
      chart.current = null;
    };
  }, []);

  useEffect(() => {
    chart.current?.setData(chartData(series));
  }, [series]);

  return <div class="chart" ref={container} role="img" aria-label={label} data-testid="graph-chart" />;
}
