import { describe, expect, it } from 'vitest';
import type { Charts, ConsoleState } from './api';
import { aligned, cellColour, leaderChanges, parseSlot, slotAfterKey, slotHex, slotLabel, slotViews } from './model';

function state(overrides: Partial<ConsoleState> = {}): ConsoleState {
  return {
    map_version: 3,
    cells: [
      { name: 'a', up: true, slots: 128, pins: 0, map_version: 3 },
      { name: 'b', up: false, slots: 128, pins: 1, map_version: null },
    ],
    slots: Array.from({ length: 256 }, (_, slot) => (slot >> 4) % 2),
    pins: [{ isu: '0b5c1109-beff-4598-b8f1-658d1994d55f', cell: 1 }],
    in_flight: [
      { id: 1, subject: 'slot 2c', slot: 0x2c, pin: false, from: 'a', to: 'b', steps: [], outcome: 'in flight', millis: 0 },
    ],
    recent: [],
    replicas: [],
    served_by: 1,
    prometheus: false,
    ...overrides,
  };
}

describe('the slot grid', () => {
  it('moves the keyboard focus by arrows, Home/End and PageUp/PageDown, stopping at the edges', () => {
    expect(slotAfterKey(0x3d, 'ArrowRight')).toBe(0x3e);
    expect(slotAfterKey(0x3d, 'ArrowLeft')).toBe(0x3c);
    expect(slotAfterKey(0x3d, 'ArrowDown')).toBe(0x4d);
    expect(slotAfterKey(0x3d, 'ArrowUp')).toBe(0x2d);
    expect(slotAfterKey(0x3f, 'ArrowRight')).toBe(0x3f);
    expect(slotAfterKey(0x30, 'ArrowLeft')).toBe(0x30);
    expect(slotAfterKey(0x0d, 'ArrowUp')).toBe(0x0d);
    expect(slotAfterKey(0xfd, 'ArrowDown')).toBe(0xfd);
    expect(slotAfterKey(0x3d, 'Home')).toBe(0x30);
    expect(slotAfterKey(0x3d, 'End')).toBe(0x3f);
    expect(slotAfterKey(0x3d, 'Home', true)).toBe(0x00);
    expect(slotAfterKey(0x3d, 'End', true)).toBe(0xff);
    expect(slotAfterKey(0x3d, 'PageUp')).toBe(0x0d);
    expect(slotAfterKey(0x3d, 'PageDown')).toBe(0xfd);
    expect(slotAfterKey(0x3d, 'Enter')).toBeNull();
    expect(slotAfterKey(0x3d, 'a')).toBeNull();
  });

  it('names each slot for a screen reader', () => {
    const views = slotViews(state());
    expect(slotLabel(views[0x0b]!)).toBe('slot 0b: cell a, 1 pinned ISU(s) elsewhere');
    expect(slotLabel(views[0x1b]!)).toBe('slot 1b: cell b (down)');
    expect(slotLabel(views[0x2c]!)).toBe('slot 2c: cell a, migrating');
  });

  it('names each slot’s cell and marks down cells, migrations and pins', () => {
    const views = slotViews(state());
    expect(views).toHaveLength(256);
    expect(views[0x0b]).toMatchObject({ name: 'a', down: false, pinned: 1, migrating: false });
    expect(views[0x1b]).toMatchObject({ name: 'b', down: true });
    expect(views[0x2c]!.migrating).toBe(true);
  });

  it('reads and writes slots as two hex digits', () => {
    expect(slotHex(11)).toBe('0b');
    expect(parseSlot('0B')).toBe(11);
    expect(parseSlot('0xff')).toBe(255);
    expect(parseSlot('100')).toBeNull();
    expect(parseSlot('zz')).toBeNull();
  });

  it('gives every cell a colour that is not the down red', () => {
    expect(new Set(Array.from({ length: 16 }, (_, i) => cellColour(i))).size).toBe(16);
    expect(Array.from({ length: 16 }, (_, i) => cellColour(i))).not.toContain('#c62828');
  });
});

describe('charts', () => {
  const charts: Charts = {
    start: 1000,
    end: 1020,
    step: 10,
    charts: [
      { name: 'requests', series: [{ cell: 'b', points: [[1010, 2]] }, { cell: 'a', points: [[1000, 1], [1020, 3]] }] },
      { name: 'term', series: [{ cell: '', points: [[1000, 2], [1010, 2], [1020, 3]] }] },
    ],
  };

  it('aligns each cell on the range’s time grid, gaps as null', () => {
    const { cells, data } = aligned(charts, charts.charts[0]!.series, 10);
    expect(cells).toEqual(['a', 'b']);
    expect(data).toEqual([
      [1000, 1010, 1020],
      [10, null, 30],
      [null, 20, null],
    ]);
  });

  it('finds the leader changes where the term rises', () => {
    expect(leaderChanges(charts)).toEqual([1020]);
  });
});
