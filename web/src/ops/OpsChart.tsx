// One console chart: a series per cell over the chosen range, leader changes as vertical
// lines (uPlot, loaded with the console's chunk).
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import type { ChartData } from './model';
import { cellColour } from './model';

export function OpsChart({
  title,
  unit,
  chart,
  cellNames,
  leaderChanges,
}: {
  title: string;
  unit: string;
  chart: ChartData;
  /** The map's cell names, for colours matching the grid. */
  cellNames: string[];
  leaderChanges: number[];
}) {
  const container = useRef<HTMLDivElement>(null);
  const marks = useRef(leaderChanges);
  marks.current = leaderChanges;

  useEffect(() => {
    const element = container.current;
    if (!element) return;
    const width = () => Math.max(260, element.clientWidth);
    const colour = (cell: string) => {
      const index = cellNames.indexOf(cell);
      return index < 0 ? '#5b6470' : cellColour(index);
    };
    const options: uPlot.Options = {
      width: width(),
      height: 180,
      scales: { x: { time: true } },
      cursor: { drag: { x: false, y: false } },
      legend: { live: false },
      series: [
        {},
        ...chart.cells.map(
          (cell): uPlot.Series => ({
            label: cell,
            stroke: colour(cell),
            width: 1.5,
            dash: cell === 'coordinator' ? [5, 3] : undefined,
            spanGaps: false,
          }),
        ),
      ],
      axes: [{}, { label: unit, size: 60 }],
      hooks: {
        draw: [
          (plot) => {
            const context = plot.ctx;
            context.save();
            context.strokeStyle = '#c62828';
            context.setLineDash([4, 4]);
            for (const time of marks.current) {
              const x = plot.valToPos(time, 'x', true);
              context.beginPath();
              context.moveTo(x, plot.bbox.top);
              context.lineTo(x, plot.bbox.top + plot.bbox.height);
              context.stroke();
            }
            context.restore();
          },
        ],
      },
    };
    const plot = new uPlot(options, chart.data as uPlot.AlignedData, element);
    const observer = new ResizeObserver(() => plot.setSize({ width: width(), height: 180 }));
    observer.observe(element);
    return () => {
      observer.disconnect();
      plot.destroy();
    };
  }, [chart, cellNames.join(' '), unit]);

  const points = chart.data.slice(1).reduce((sum, column) => sum + column.filter((v) => v !== null).length, 0);
  return (
    <figure class="ops-chart">
      <figcaption>{title}</figcaption>
      <div ref={container} role="img" aria-label={`${title}: ${points} data points`} data-points={points} />
    </figure>
  );
}
