// The console's pure helpers: cell colours, the slot grid, chart data, leader changes.
import type { Charts, ConsoleState, Series } from './api';

/** Cell colours, each dark enough for white text (WCAG AA); red is kept for a cell that is down. */
export const CELL_COLOURS = [
  '#1f5fbf', '#2e7d32', '#7b1fa2', '#8a5300', '#00695c', '#5d4037', '#ad1457', '#37474f',
  '#3949ab', '#33691e', '#6a1b9a', '#0d47a1', '#4e342e', '#004d40', '#880e4f', '#263238',
];
export const DOWN_COLOUR = '#c62828';

export function cellColour(index: number): string {
  return CELL_COLOURS[index % CELL_COLOURS.length]!;
}

/** `0b` of slot 11. */
export function slotHex(slot: number): string {
  return slot.toString(16).padStart(2, '0');
}

/** A slot's number from two hex digits (`0b`, `0x0b`, `B`); null when it is none. */
export function parseSlot(text: string): number | null {
  const digits = text.trim().toLowerCase().replace(/^0x/, '');
  if (!/^[0-9a-f]{1,2}$/.test(digits)) return null;
  return parseInt(digits, 16);
}

/**
 * The slot a key moves the grid's focus to from `slot` (16 × 16, row-major), or null for a
 * key that does not move it: arrows by one (stopping at the edges), Home/End to the row's
 * ends, with Ctrl to the first and last slot, PageUp/PageDown to the column's ends.
 */
export function slotAfterKey(slot: number, key: string, ctrl = false): number | null {
  const row = slot >> 4;
  const column = slot & 15;
  switch (key) {
    case 'ArrowLeft':
      return column > 0 ? slot - 1 : slot;
    case 'ArrowRight':
      return column < 15 ? slot + 1 : slot;
    case 'ArrowUp':
      return row > 0 ? slot - 16 : slot;
    case 'ArrowDown':
      return row < 15 ? slot + 16 : slot;
    case 'Home':
      return ctrl ? 0 : row * 16;
    case 'End':
      return ctrl ? 255 : row * 16 + 15;
    case 'PageUp':
      return column;
    case 'PageDown':
      return 240 + column;
    default:
      return null;
  }
}

/** What a slot's grid cell says to a screen reader (and in its tooltip). */
export function slotLabel(view: SlotView): string {
  return `slot ${slotHex(view.slot)}: cell ${view.name}${view.down ? ' (down)' : ''}${
    view.migrating ? ', migrating' : ''
  }${view.pinned ? `, ${view.pinned} pinned ISU(s) elsewhere` : ''}`;
}

export interface SlotView {
  slot: number;
  cell: number;
  name: string;
  down: boolean;
  migrating: boolean;
  pinned: number;
}

/** The 256 slots as the grid shows them: owner, whether its cell is down, in migration, pins. */
export function slotViews(state: ConsoleState): SlotView[] {
  const migrating = new Set(state.in_flight.filter((m) => m.outcome === 'in flight').map((m) => m.slot));
  const pinned = new Map<number, number>();
  for (const pin of state.pins) {
    const slot = parseInt(pin.isu.slice(0, 2), 16);
    if (!Number.isNaN(slot)) pinned.set(slot, (pinned.get(slot) ?? 0) + 1);
  }
  return state.slots.map((cell, slot) => ({
    slot,
    cell,
    name: state.cells[cell]?.name ?? '?',
    down: state.cells[cell]?.up === false,
    migrating: migrating.has(slot),
    pinned: pinned.get(slot) ?? 0,
  }));
}

/** The ranges offered, in seconds, with their labels. */
export const RANGES: [number, string][] = [
  [900, '15 minutes'],
  [3600, '1 hour'],
  [21600, '6 hours'],
  [86400, '24 hours'],
];

export interface ChartData {
  cells: string[];
  /** uPlot's aligned data: times, then one column per cell (null where absent). */
  data: (number | null)[][];
}

/** One query's series as uPlot data on the range's time grid. */
export function aligned(charts: Charts, series: Series[], scale = 1): ChartData {
  const times: number[] = [];
  for (let time = charts.start; time <= charts.end; time += charts.step) times.push(time);
  const index = new Map(times.map((time, i) => [time, i]));
  const cells = series.map((s) => s.cell || 'all').sort();
  const columns = cells.map((cell) => {
    const column: (number | null)[] = times.map(() => null);
    const found = series.find((s) => (s.cell || 'all') === cell);
    for (const [time, value] of found?.points ?? []) {
      const i = index.get(Math.round(time));
      if (i !== undefined) column[i] = value * scale;
    }
    return column;
  });
  return { cells, data: [times, ...columns] };
}

/** The times the leader's term rose (a new leader), from the `term` chart. */
export function leaderChanges(charts: Charts): number[] {
  const term = charts.charts.find((chart) => chart.name === 'term')?.series[0]?.points ?? [];
  const changes: number[] = [];
  for (let i = 1; i < term.length; i++) {
    if (term[i]![1] > term[i - 1]![1]) changes.push(term[i]![0]);
  }
  return changes;
}

/** `1.2 s`, `340 ms`. */
export function formatMillis(millis: number): string {
  return millis >= 1000 ? `${(millis / 1000).toFixed(1)} s` : `${Math.round(millis)} ms`;
}
