// Trend API answers → per-character counts and bar widths.
import { describe, expect, it } from 'vitest';
import type { TrendEntry } from './api';
import { barWidth, CHARACTERS, describeCounts, summarizeTrend } from './trend';

const entry = (character: string, info: number[], warning: number[], critical: number[]): TrendEntry => ({
  character,
  info: info.map((timestamp, i) => ({ isu_id: 100 + i, timestamp })),
  warning: warning.map((timestamp, i) => ({ isu_id: 200 + i, timestamp })),
  critical: critical.map((timestamp, i) => ({ isu_id: 300 + i, timestamp })),
});

describe('trend summary', () => {
  it('lists the 25 characters in a fixed order, with zeros for absent ones', () => {
    const summary = summarizeTrend([entry('のんき', [5], [], [])]);
    expect(CHARACTERS).toHaveLength(25);
    expect(summary.characters.map((c) => c.character)).toEqual([...CHARACTERS]);
    const absent = summary.characters.find((c) => c.character === 'いじっぱり')!;
    expect(absent.counts).toEqual({ info: 0, warning: 0, critical: 0 });
    expect(absent.latest).toBeNull();
  });

  it('counts ISUs per level and overall', () => {
    const summary = summarizeTrend([
      entry('ようき', [30, 20], [25], []),
      entry('まじめ', [], [10], [40, 12, 11]),
    ]);
    const yoki = summary.characters.find((c) => c.character === 'ようき')!;
    expect(yoki.counts).toEqual({ info: 2, warning: 1, critical: 0 });
    expect(yoki.total).toBe(3);
    expect(yoki.latest).toBe(30);
    const majime = summary.characters.find((c) => c.character === 'まじめ')!;
    expect(majime.latest).toBe(40);
    expect(summary.totals).toEqual({ info: 2, warning: 2, critical: 3 });
    expect(summary.total).toBe(7);
    expect(summary.maxTotal).toBe(4);
  });

  it('keeps a character the list does not know, after the known ones', () => {
    const summary = summarizeTrend([entry('新しい', [1], [], [])]);
    expect(summary.characters).toHaveLength(26);
    expect(summary.characters[25]!.character).toBe('新しい');
  });

  it('scales bars to the busiest character and never divides by zero', () => {
    expect(barWidth(1, 4)).toBe('25%');
    expect(barWidth(4, 4)).toBe('100%');
    expect(barWidth(0, 0)).toBe('0%');
    expect(summarizeTrend([]).maxTotal).toBe(1);
  });

  it('describes counts in words for screen readers', () => {
    expect(describeCounts({ info: 3, warning: 1, critical: 0 })).toBe('3 info, 1 warning, 0 critical');
  });
});
