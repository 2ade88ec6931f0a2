// Levels, condition flags and times, shown in the viewer's own time zone.
import type { Condition, Level } from './api';

export const LEVEL_LABEL: Record<Level, string> = {
  info: 'Info',
  warning: 'Warning',
  critical: 'Critical',
};

export const LEVEL_MEANING: Record<Level, string> = {
  info: 'no problem',
  warning: 'one or two problems',
  critical: 'dirty, overweight and broken',
};

export interface ConditionFlags {
  dirty: boolean;
  overweight: boolean;
  broken: boolean;
}

const CONDITION_PATTERN = /^is_dirty=(true|false),is_overweight=(true|false),is_broken=(true|false)$/;

/** The three flags of a condition string, or null when it is not in the API's fixed form. */
export function parseConditionFlags(condition: string): ConditionFlags | null {
  const match = CONDITION_PATTERN.exec(condition);
  if (!match) return null;
  return { dirty: match[1] === 'true', overweight: match[2] === 'true', broken: match[3] === 'true' };
}

/** The problems of a condition in words: "dirty, broken", or "no problems". */
export function describeConditionFlags(condition: string): string {
  const flags = parseConditionFlags(condition);
  if (!flags) return condition;
  const problems = [flags.dirty && 'dirty', flags.overweight && 'overweight', flags.broken && 'broken'].filter(
    (word): word is string => typeof word === 'string',
  );
  return problems.length === 0 ? 'no problems' : problems.join(', ');
}

/** One line summing up a condition: "Warning: dirty (sitting)". */
export function summarizeCondition(condition: Condition): string {
  const sitting = condition.is_sitting ? 'sitting' : 'not sitting';
  return `${LEVEL_LABEL[condition.condition_level]}: ${describeConditionFlags(condition.condition)} (${sitting})`;
}

export interface TimeFormatOptions {
  locale?: string | undefined;
  /** IANA zone; default: the viewer's. */
  timeZone?: string | undefined;
}

const formatters = new Map<string, Intl.DateTimeFormat>();
function formatter(kind: string, options: TimeFormatOptions, format: Intl.DateTimeFormatOptions) {
  const key = `${kind}|${options.locale ?? ''}|${options.timeZone ?? ''}`;
  let cached = formatters.get(key);
  if (!cached) {
    cached = new Intl.DateTimeFormat(options.locale, { ...format, timeZone: options.timeZone });
    formatters.set(key, cached);
  }
  return cached;
}

/** "8 Aug 2021, 14:05:09" (in the viewer's locale and zone). */
export function formatDateTime(unixSeconds: number, options: TimeFormatOptions = {}): string {
  return formatter('datetime', options, {
    year: 'numeric',
    month: 'short',
    day: 'numeric',
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
    hourCycle: 'h23',
  }).format(unixSeconds * 1000);
}

/** "Sun, 8 Aug 2021". */
export function formatDay(unixSeconds: number, options: TimeFormatOptions = {}): string {
  return formatter('day', options, { weekday: 'short', year: 'numeric', month: 'short', day: 'numeric' }).format(
    unixSeconds * 1000,
  );
}

/** "14:00". */
export function formatHour(unixSeconds: number, options: TimeFormatOptions = {}): string {
  return formatter('hour', options, { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }).format(
    unixSeconds * 1000,
  );
}

/** ISO-8601 text for <time datetime>. */
export function isoTime(unixSeconds: number): string {
  return new Date(unixSeconds * 1000).toISOString();
}

/** Local midnight (viewer's zone) of the day that contains `unixSeconds`. */
export function startOfLocalDay(unixSeconds: number): number {
  const date = new Date(unixSeconds * 1000);
  return Math.floor(new Date(date.getFullYear(), date.getMonth(), date.getDate()).getTime() / 1000);
}

/** Local midnight `days` days after the day of `unixSeconds` (23 or 25 hours apart across DST changes). */
export function addLocalDays(unixSeconds: number, days: number): number {
  const date = new Date(unixSeconds * 1000);
  return Math.floor(new Date(date.getFullYear(), date.getMonth(), date.getDate() + days).getTime() / 1000);
}

const pad = (value: number) => String(value).padStart(2, '0');

/** Value for <input type="datetime-local"> in the viewer's zone. */
export function toDateTimeLocal(unixSeconds: number): string {
  const d = new Date(unixSeconds * 1000);
  const date = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
  return `${date}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** Unix seconds of an <input type="datetime-local"> value (viewer's zone), or null when empty or invalid. */
export function fromDateTimeLocal(value: string): number | null {
  const match = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2}))?$/.exec(value.trim());
  if (!match) return null;
  const [, y, mo, d, h, mi, s] = match.map(Number) as number[];
  const date = new Date(y!, mo! - 1, d!, h!, mi!, Number.isNaN(s) ? 0 : (s ?? 0));
  const time = date.getTime();
  return Number.isNaN(time) ? null : Math.floor(time / 1000);
}

/** Parses a base-10 integer query parameter; null when absent or malformed. */
export function parseIntParam(value: string | null): number | null {
  if (value === null || !/^-?\d+$/.test(value)) return null;
  const parsed = Number(value);
  return Number.isSafeInteger(parsed) ? parsed : null;
}
