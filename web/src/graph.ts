// Series of the 24-hour graph, in the shape the chart library takes (columns,
// null where an hour has no condition, so lines break instead of dropping to 0).
import type { GraphPoint } from './api';

export interface GraphSeries {
  /** Start of each hour, unix seconds. */
  hours: number[];
  score: (number | null)[];
  sitting: (number | null)[];
  dirty: (number | null)[];
  overweight: (number | null)[];
  broken: (number | null)[];
  /** Conditions reported in each hour. */
  counts: number[];
}

export function toGraphSeries(points: readonly GraphPoint[]): GraphSeries {
  const sorted = [...points].sort((a, b) => a.start_at - b.start_at);
  const pick = (read: (point: GraphPoint) => number) => sorted.map((point) => (point.data ? read(point) : null));
  return {
    hours: sorted.map((point) => point.start_at),
    score: pick((point) => point.data!.score),
    sitting: pick((point) => point.data!.percentage.sitting),
    dirty: pick((point) => point.data!.percentage.is_dirty),
    overweight: pick((point) => point.data!.percentage.is_overweight),
    broken: pick((point) => point.data!.percentage.is_broken),
    counts: sorted.map((point) => point.condition_timestamps.length),
  };
}

/** Number of hours that have at least one condition. */
export function hoursWithData(series: GraphSeries): number {
  return series.score.filter((value) => value !== null).length;
}

/** The series shown in the chart and the table, in order, with their labels. */
export const GRAPH_LINES = [
  { key: 'score', label: 'Score', color: '#1f5fbf' },
  { key: 'sitting', label: 'Sitting %', color: '#7a7a7a' },
  { key: 'dirty', label: 'Dirty %', color: '#b26a00' },
  { key: 'overweight', label: 'Overweight %', color: '#8e44ad' },
  { key: 'broken', label: 'Broken %', color: '#c62828' },
] as const satisfies readonly { key: keyof GraphSeries; label: string; color: string }[];
