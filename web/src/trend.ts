// The trend, summed up per character: how many ISUs are at each level now.
import { LEVELS, type Level, type TrendEntry } from './api';

/** The 25 characters, in the order the trend view lists them. */
export const CHARACTERS = [
  'いじっぱり', 'うっかりや', 'おくびょう', 'おだやか', 'おっとり', 'おとなしい', 'がんばりや',
  'きまぐれ', 'さみしがり', 'しんちょう', 'すなお', 'ずぶとい', 'せっかち', 'てれや', 'なまいき',
  'のうてんき', 'のんき', 'ひかえめ', 'まじめ', 'むじゃき', 'やんちゃ', 'ゆうかん', 'ようき',
  'れいせい', 'わんぱく',
] as const;

export type LevelCounts = Record<Level, number>;

export interface CharacterSummary {
  character: string;
  counts: LevelCounts;
  total: number;
  /** Newest condition timestamp among this character's ISUs, or null. */
  latest: number | null;
}

export interface TrendSummary {
  characters: CharacterSummary[];
  totals: LevelCounts;
  total: number;
  /** Largest `total` of one character (scales the bars; at least 1). */
  maxTotal: number;
}

/** One row per known character (zero when absent from the trend), then any unknown
 * characters the server sent, in the order it sent them. */
export function summarizeTrend(entries: readonly TrendEntry[]): TrendSummary {
  const byCharacter = new Map(entries.map((entry) => [entry.character, entry]));
  const names = [...CHARACTERS, ...entries.map((e) => e.character).filter((c) => !CHARACTERS.includes(c as never))];
  const totals: LevelCounts = { info: 0, warning: 0, critical: 0 };
  const characters = names.map((character): CharacterSummary => {
    const entry = byCharacter.get(character);
    const counts: LevelCounts = { info: 0, warning: 0, critical: 0 };
    let latest: number | null = null;
    for (const level of LEVELS) {
      const isus = entry?.[level] ?? [];
      counts[level] = isus.length;
      totals[level] += isus.length;
      for (const isu of isus) latest = latest === null ? isu.timestamp : Math.max(latest, isu.timestamp);
    }
    return { character, counts, total: counts.info + counts.warning + counts.critical, latest };
  });
  const total = totals.info + totals.warning + totals.critical;
  const maxTotal = Math.max(1, ...characters.map((c) => c.total));
  return { characters, totals, total, maxTotal };
}

/** Share of `count` in a bar scaled to `maxTotal`, as a CSS percentage. */
export function barWidth(count: number, maxTotal: number): string {
  return `${(count / Math.max(1, maxTotal)) * 100}%`;
}

/** "3 info, 1 warning, 0 critical". */
export function describeCounts(counts: LevelCounts): string {
  return LEVELS.map((level) => `${counts[level]} ${level}`).join(', ');
}
