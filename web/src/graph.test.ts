// Graph API answers → chart series.
import { describe, expect, it } from 'vitest';
import type { GraphPoint } from './api';
import { GRAPH_LINES, hoursWithData, toGraphSeries } from './graph';

const G = 1628348400;

function hour(h: number, data: GraphPoint['data'], timestamps: number[] = []): GraphPoint {
  return { start_at: G + 3600 * h, end_at: G + 3600 * (h + 1), data, condition_timestamps: timestamps };
}

describe('graph series', () => {
  // The spec's worked example: info & sitting, warning (dirty) & sitting, critical & not sitting.
  const example = { score: 66, percentage: { sitting: 66, is_dirty: 66, is_overweight: 33, is_broken: 33 } };
  const points = Array.from({ length: 24 }, (_, h) =>
    h === 3 ? hour(3, example, [G + 3 * 3600, G + 3 * 3600 + 10, G + 3 * 3600 + 20]) : hour(h, null),
  );

  it('has one column per hour and the API percentages in their own series', () => {
    const series = toGraphSeries(points);
    expect(series.hours).toHaveLength(24);
    expect(series.hours[0]).toBe(G);
    expect(series.hours[23]).toBe(G + 23 * 3600);
    expect(series.score[3]).toBe(66);
    expect(series.sitting[3]).toBe(66);
    expect(series.dirty[3]).toBe(66);
    expect(series.overweight[3]).toBe(33);
    expect(series.broken[3]).toBe(33);
    expect(series.counts[3]).toBe(3);
  });

  it('leaves hours without conditions empty (null), not zero', () => {
    const series = toGraphSeries(points);
    expect(series.score[2]).toBeNull();
    expect(series.broken[4]).toBeNull();
    expect(series.counts[2]).toBe(0);
    expect(hoursWithData(series)).toBe(1);
  });

  it('keeps a zero score as a value', () => {
    const zero = { score: 0, percentage: { sitting: 0, is_dirty: 0, is_overweight: 0, is_broken: 0 } };
    const series = toGraphSeries([hour(0, zero, [G])]);
    expect(series.score).toEqual([0]);
    expect(hoursWithData(series)).toBe(1);
  });

  it('orders hours oldest first whatever order they came in', () => {
    const series = toGraphSeries([hour(2, null), hour(0, example, [G]), hour(1, null)]);
    expect(series.hours).toEqual([G, G + 3600, G + 7200]);
    expect(series.score).toEqual([66, null, null]);
  });

  it('charts every series the table shows, score first', () => {
    expect(GRAPH_LINES.map((line) => line.key)).toEqual(['score', 'sitting', 'dirty', 'overweight', 'broken']);
  });
});
