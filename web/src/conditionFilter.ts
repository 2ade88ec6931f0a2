// The condition history's filter, kept in the page URL (?level=&start=&end=) so
// back/forward and shared links keep it.
import { FAR_FUTURE, LEVELS, type ConditionQuery, type Level } from './api';
import { parseIntParam } from './format';

export const PAGE_SIZE = 20; // the API's page size

export interface ConditionFilter {
  levels: Level[];
  /** Inclusive lower bound, unix seconds. */
  start: number | null;
  /** Exclusive upper bound, unix seconds; null = the newest conditions, refreshed live. */
  end: number | null;
}

export function parseFilter(search: URLSearchParams): ConditionFilter {
  const raw = search.get('level');
  const levels = raw === null ? [...LEVELS] : LEVELS.filter((level) => raw.split(',').includes(level));
  return { levels, start: parseIntParam(search.get('start')), end: parseIntParam(search.get('end')) };
}

export function filterSearch(filter: ConditionFilter): string {
  const params = new URLSearchParams();
  if (filter.levels.length !== LEVELS.length) params.set('level', filter.levels.join(','));
  if (filter.start !== null) params.set('start', String(filter.start));
  if (filter.end !== null) params.set('end', String(filter.end));
  const text = params.toString();
  return text ? `?${text}` : '';
}

export function toQuery(filter: ConditionFilter): ConditionQuery {
  return { levels: filter.levels, endTime: filter.end ?? FAR_FUTURE, startTime: filter.start ?? undefined };
}

/** The filter of the next (older) page after a page whose oldest condition is at `oldest`. */
export function olderPage(filter: ConditionFilter, oldest: number): ConditionFilter {
  return { ...filter, end: oldest };
}

/** Whether an older page may exist: the API returns at most PAGE_SIZE items. */
export function mayHaveOlder(pageLength: number): boolean {
  return pageLength >= PAGE_SIZE;
}
